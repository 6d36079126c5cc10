"""Named procurement policies: immutable revisions, the newest is the policy. A quote stores
the (name, revision) it was judged by, so ``verify`` judges it again by the same rules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from sqlalchemy.orm import Session

from service.catalog import revisions
from service.catalog.models import PolicyRevision
from service.core.policy import DEFAULT_POLICY, Policy

KIND, PATH = "policy", "/v1/policies"


def latest(session: Session, name: str) -> PolicyRevision:
    return revisions.latest(session, PolicyRevision, KIND, name)


def get_revision(session: Session, name: str, revision: int) -> PolicyRevision:
    return revisions.get_revision(session, PolicyRevision, KIND, name, revision)


def list_latest(session: Session, *, limit: int, after: str | None) -> Sequence[PolicyRevision]:
    """The newest revision of each policy, by name."""
    return revisions.list_latest(session, PolicyRevision, limit=limit, after=after)


def create(session: Session, *, name: str, description: str, rules: Mapping[str, Any],
           created_by: str) -> PolicyRevision:
    """Revision 1 of a new policy; 409 if the name exists. Flushes; the caller commits."""
    return revisions.create(session, PolicyRevision, KIND, PATH, name=name,
                            created_by=created_by, description=description, rules=dict(rules))


def revise(session: Session, *, name: str, expected_revision: int, description: str,
           rules: Mapping[str, Any], created_by: str) -> PolicyRevision:
    """A new revision, if the newest is still ``expected_revision``."""
    return revisions.revise(session, PolicyRevision, KIND, name=name,
                            expected_revision=expected_revision, created_by=created_by,
                            description=description, rules=dict(rules))


def to_core(row: PolicyRevision | None) -> Policy:
    """A stored revision as the core's ``Policy`` (None: the built-in default)."""
    if row is None:
        return DEFAULT_POLICY
    rules = row.rules

    def money(key: str) -> Decimal | None:
        value = rules.get(key)
        return Decimal(value) if value is not None else None

    def names(key: str) -> frozenset[str] | None:
        value = rules.get(key)
        return frozenset(value) if value is not None else None

    def built_in(key: str) -> Any:
        """The stored rule, else the built-in default's: a revision stored before a rule
        existed (price ages, FX ages, capacity: issue 39) takes the built-in value."""
        return rules.get(key, getattr(DEFAULT_POLICY, key))

    return Policy(
        name=row.name, revision=row.revision, currency=rules.get("currency", "USD"),
        max_commitment=money("max_commitment"), max_job_cost=money("max_job_cost"),
        allowed_terms=names("allowed_terms"), allowed_providers=names("allowed_providers"),
        allowed_regions=names("allowed_regions"),
        forbid_indicative=rules.get("forbid_indicative", True),
        forbid_quarantined=rules.get("forbid_quarantined", True),
        max_price_age_s=built_in("max_price_age_s"),
        max_observed_age_days=built_in("max_observed_age_days"),
        fx_rate_warn_age_days=built_in("fx_rate_warn_age_days"),
        fx_rate_fail_age_days=built_in("fx_rate_fail_age_days"),
        max_duration_s=rules.get("max_duration_s"),
        min_success_probability=rules.get("min_success_probability"),
        require_node_fit=rules.get("require_node_fit", True),
        max_on_demand_gpus_per_region=built_in("max_on_demand_gpus_per_region"),
        max_reserved_gpus_per_region=built_in("max_reserved_gpus_per_region"),
        max_capacity_block_instances=built_in("max_capacity_block_instances"),
        forbid_unverified_spot_capacity=rules.get("forbid_unverified_spot_capacity", True),
        forbid_assumed_interruption_rates=rules.get("forbid_assumed_interruption_rates", False),
        forbid_unvalidated_estimates=rules.get("forbid_unvalidated_estimates", True),
        warn_only=frozenset(rules.get("warn_only", ())),
    )


def resolve(session: Session, name: str | None, default_name: str | None,
            revision: int | None = None) -> Policy:
    """The policy a quote names (newest revision, or ``revision``), else the server default
    (``CQ_DEFAULT_POLICY``), else the built-in default."""
    chosen = name or default_name
    if chosen is None:
        return DEFAULT_POLICY
    row = get_revision(session, chosen, revision) if revision else latest(session, chosen)
    return to_core(row)
