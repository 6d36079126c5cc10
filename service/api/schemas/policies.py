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
    "require_node_fit", "max_gpus_per_region_by_term", "max_capacity_block_instances",
    "forbid_unverified_spot_capacity", "forbid_assumed_interruption_rates",
    "forbid_unvalidated_estimates"])
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
    fx_rate_warn_age_days: float | None = Field(
        strict=True, default=DEFAULT_POLICY.fx_rate_warn_age_days, gt=0, le=36_525,
        examples=[7],
        description="A quote that converts money (a budget not in USD) warns fx_rate_stale "
                    "when its ECB fixing is more than this many days before the quote's date "
                    "(rule fx_rate_age). null: never warns.")
    fx_rate_fail_age_days: float | None = Field(
        strict=True, default=DEFAULT_POLICY.fx_rate_fail_age_days, gt=0, le=36_525,
        examples=[35],
        description="... and fails fx_rate_too_old past this many days. null: never fails. A "
                    "quote that converts nothing is not judged.")
    max_duration_s: float | None = Field(strict=True, default=None, gt=0, le=1e10)
    min_success_probability: float | None = Field(
        strict=True, default=None, ge=0, le=1,
        description="Least probability of finishing before the quote's deadline.")
    require_node_fit: bool = Field(
        strict=True, default=DEFAULT_POLICY.require_node_fit,
        description="Offers whose instance cannot host the plan are rejected unpriced; "
                    "false: priced with a warning.")
    max_on_demand_gpus_per_region: int | None = Field(
        strict=True, default=DEFAULT_POLICY.max_on_demand_gpus_per_region, gt=0,
        le=10_000_000, examples=[4096],
        description="Most GPUs of one instance type in one region an on-demand line may count "
                    "on; more fails capacity_limit_exceeded (rule "
                    "max_gpus_per_region_by_term). Built-in 2,048: AWS's published 256 "
                    "instances across an account's Capacity Blocks, the largest allocation "
                    "sold without an agreement; set it to your accounts' quota. null: not "
                    "judged.")
    max_reserved_gpus_per_region: int | None = Field(
        strict=True, default=DEFAULT_POLICY.max_reserved_gpus_per_region, gt=0,
        le=10_000_000, examples=[4096],
        description="The same for reserved_1y and reserved_3y lines.")
    max_capacity_block_instances: int | None = Field(
        strict=True, default=DEFAULT_POLICY.max_capacity_block_instances, gt=0,
        le=1_000_000, examples=[64],
        description="Most instances a capacity_block line may need; more fails "
                    "capacity_block_size_exceeded. Built-in 64: AWS sells at most 64 "
                    "instances a Capacity Block, placed together (256 across an account's "
                    "blocks). null: not judged.")
    forbid_unverified_spot_capacity: bool = Field(
        strict=True, default=DEFAULT_POLICY.forbid_unverified_spot_capacity,
        description="A spot line needing more GPUs in one zone than anything public shows "
                    "fails; false: it warns.")
    forbid_assumed_interruption_rates: bool = Field(
        strict=True, default=DEFAULT_POLICY.forbid_assumed_interruption_rates,
        description="A spot line on an assumed interruption rate fails; false: it warns.")
    forbid_unvalidated_estimates: bool = Field(
        strict=True, default=DEFAULT_POLICY.forbid_unvalidated_estimates,
        description="A serving line whose estimate is outside what the model's published "
                    "rows validate (flag unvalidated_estimate: its warning_details carry "
                    "outside_validated_range, e.g. a mixture-of-experts model or a band that "
                    "did not hold out of sample) fails estimate_unvalidated; false: it warns.")
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
