"""``/v1/policies``: a procurement side's own rules for quotes (docs/policies.md)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, Field
from typing_extensions import TypeAliasType

from service.api.schemas.common import RequestModel, TextRule
from service.api.schemas.prices import DecimalString
from service.api.schemas.quotes import CurrencyCode, PolicyName, Slug, TermName
from service.core.policy import DEFAULT_POLICY, RULES

PolicyRuleName = TypeAliasType("PolicyRuleName", Literal[
    "budget", "deadline", "max_commitment", "max_job_cost", "allowed_terms",
    "allowed_providers", "allowed_regions", "forbid_indicative", "forbid_quarantined",
    "max_price_age_s", "max_observed_age_days", "fx_rate_age", "max_duration_s",
    "min_success_probability",
    "require_node_fit", "forbid_unverified_spot_capacity", "forbid_assumed_interruption_rates"])
RuleName = PolicyRuleName
assert set(get_args(PolicyRuleName.__value__)) == set(RULES)  # noqa: S101

POLICY_EXAMPLE: dict[str, Any] = {
    "name": "finance-2027",
    "description": "Training spend FY2027: 2M USD per commitment, no 3-year terms",
    "rules": {"currency": "USD", "max_commitment": "2000000.00",
              "allowed_terms": ["on_demand", "spot", "reserved_1y", "onprem"],
              "forbid_indicative": True, "max_price_age_s": 7776000,
              "max_observed_age_days": 14, "min_success_probability": 0.8,
              "warn_only": ["forbid_indicative"]},
}


class PolicyRulesIn(RequestModel):
    """Every rule; an omitted one takes the built-in default (shown), null switches a limit
    off. A violated rule fails the quote (verdict reject) unless listed in ``warn_only``."""

    currency: CurrencyCode = Field(default="USD",
                          description="Currency of the money limits; a quote in another "
                                      "currency fails them.")
    max_commitment: DecimalString | None = Field(default=None,
                                                 description="Largest commitment_total.")
    max_job_cost: DecimalString | None = Field(default=None,
                                               description="Largest job_cost_total.")
    allowed_terms: list[TermName] | None = Field(default=None, max_length=6)
    allowed_providers: list[Slug] | None = Field(default=None, max_length=64)
    allowed_regions: list[Slug] | None = Field(default=None, max_length=256)
    forbid_indicative: bool = Field(
        strict=True, default=DEFAULT_POLICY.forbid_indicative,
        description="Indicative or derived (synthetic) prices fail; false: they warn.")
    forbid_quarantined: bool = Field(
        strict=True, default=DEFAULT_POLICY.forbid_quarantined,
        description="Prices with data-quality flags (price_outlier, spot_above_on_demand, "
                    "spot_not_discounted, reserved_above_on_demand, gpu_memory_mismatch) "
                    "fail; false: they warn.")
    max_price_age_s: float | None = Field(
        strict=True, default=DEFAULT_POLICY.max_price_age_s, gt=0, le=1e10,
        description="A price older than this (its as_of against the quote's date) fails "
                    "stale_price; a price with no as_of fails undated_price unless "
                    "max_observed_age_days accepts it. null: no price-date rule at all.")
    max_observed_age_days: float | None = Field(
        strict=True, default=DEFAULT_POLICY.max_observed_age_days, gt=0, le=36_525,
        examples=[30],
        description="For a price whose as_of is unknown: read by the catalogue (observed_at) at "
                    "most this many days before the quote's date, it warns "
                    "(price_date_unknown_observed); read earlier, it fails "
                    "(observed_price_stale); never read on a recorded day, it fails "
                    "undated_price. null: every undated price fails undated_price. Judged only "
                    "while max_price_age_s is set; each reason carries date, age_days, "
                    "limit_days and the fix.")
    max_duration_s: float | None = Field(strict=True, default=None, gt=0, le=1e10)
    min_success_probability: float | None = Field(
        strict=True, default=None, ge=0, le=1,
        description="Least probability of finishing before the quote's deadline.")
    require_node_fit: bool = Field(
        strict=True, default=DEFAULT_POLICY.require_node_fit,
        description="Offers whose instance cannot host the plan are rejected unpriced; "
                    "false: priced with a warning.")
    forbid_unverified_spot_capacity: bool = Field(
        strict=True, default=DEFAULT_POLICY.forbid_unverified_spot_capacity,
        description="A spot line needing more GPUs in one zone than anything public shows "
                    "fails; false: it warns.")
    forbid_assumed_interruption_rates: bool = Field(
        strict=True, default=DEFAULT_POLICY.forbid_assumed_interruption_rates,
        description="A spot line on an assumed interruption rate fails; false: it warns.")
    warn_only: list[RuleName] = Field(default_factory=list, max_length=len(RULES),
                                      description="Rules whose failure only warns.")


Description = Annotated[str, TextRule(max_length=2000)]


class PolicyIn(RequestModel):
    name: PolicyName = Field(examples=["finance-2027"])
    description: Description = ""
    rules: PolicyRulesIn = Field(default_factory=PolicyRulesIn)


class PolicyRevisionIn(RequestModel):
    """A new revision of an existing policy (``PUT`` with ``If-Match``)."""

    description: Description = ""
    rules: PolicyRulesIn = Field(default_factory=PolicyRulesIn)


class PolicyOut(BaseModel):
    name: str
    revision: int
    created_at: dt.datetime
    created_by: str
    description: str
    rules: dict[str, Any]
