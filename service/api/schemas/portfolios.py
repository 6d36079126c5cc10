"""Request and response bodies of ``/v1/portfolios`` (issue 44; docs/portfolio.md)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, Field, StringConstraints, model_validator
from typing_extensions import TypeAliasType

from service.api.portfolio_solver import DEFAULT_NODE_LIMIT
from service.api.schemas.common import RequestModel, TextRule
from service.api.schemas.quotes import MoneyIn, PolicyField, ServingWorkload, Slug, WorkloadIn

Month = Annotated[str, StringConstraints(pattern=r"^\d{4}-(0[1-9]|1[0-2])$")]
PortfolioTerm = TypeAliasType("PortfolioTerm", Literal[
    "on_demand", "spot", "reserved_1y", "reserved_3y", "capacity_block"])
BudgetPer = TypeAliasType("BudgetPer", Literal["month", "quarter", "year", "horizon"])
PortfolioAccounting = TypeAliasType("PortfolioAccounting", Literal["commitment", "amortised"])
OnLimit = TypeAliasType("OnLimit", Literal["refuse", "best"])
PORTFOLIO_TERMS: tuple[PortfolioTerm, ...] = ("on_demand", "spot", "reserved_1y", "reserved_3y",
                                    "capacity_block")
Ident = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]

MAX_JOBS = 64
MAX_FLEETS = 8
MAX_MONTHS = 60


def month_index(month: str) -> int:
    """``YYYY-MM`` as months since year 0."""
    match = re.fullmatch(r"(\d{4})-(\d{2})", month)
    assert match is not None  # noqa: S101 - the pattern checked it
    return int(match[1]) * 12 + int(match[2]) - 1


def month_label(index: int) -> str:
    return f"{index // 12:04d}-{index % 12 + 1:02d}"


PORTFOLIO_EXAMPLE: dict[str, Any] = {
    "name": "FY27 pretraining",
    "horizon": {"start": "2027-01", "months": 6},
    "jobs": [{"id": "pretrain", "workload": {"gpu_hours": {
        "accelerator": "h100-sxm5-80gb", "gpu_hours": 400000, "num_gpus": 256}},
        "earliest_start": "2027-01", "deadline": "2027-04", "must_run": True}],
    "budget": {"amount": "5000000.00", "currency": "USD", "per": "horizon"},
}


class HorizonIn(RequestModel):
    start: Month = Field(description="First month, YYYY-MM.", examples=["2027-01"])
    months: int = Field(strict=True, ge=1, le=MAX_MONTHS, examples=[12],
                        description="Months planned (1-60).")


class PortfolioJobIn(RequestModel):
    id: Ident = Field(description="The job's name, unique in the portfolio.",
                      examples=["pretrain-8b"])
    workload: WorkloadIn = Field(description="Any quote workload.")
    earliest_start: Month = Field(description="First month the job may run.",
                                  examples=["2027-01"])
    deadline: Month = Field(description="Last month the job may run in (inclusive).",
                            examples=["2027-06"])
    must_run: bool = Field(default=True, description="Optional jobs may be dropped, with a "
                                                     "coded reason.")


class FleetIn(RequestModel):
    id: Ident = Field(description="The fleet's name, unique in the portfolio.",
                      examples=["chat"])
    workload: FleetWorkloadIn
    monthly_requests_per_s: list[Annotated[float, Field(strict=True, ge=0, le=1e7)]] = Field(
        min_length=1, max_length=MAX_MONTHS, examples=[[10.0, 12.0, 20.0]],
        description="Requests per second in each month of the horizon.")


class FleetWorkloadIn(RequestModel):
    serving: ServingWorkload


class PortfolioBudgetIn(MoneyIn):
    per: BudgetPer = Field(
        default="horizon", description="The period the amount limits.")


class PortfolioRequest(RequestModel):
    name: Annotated[str, TextRule(min_length=1, max_length=128)] = Field(
        examples=["FY27 training and serving"])
    horizon: HorizonIn
    jobs: list[PortfolioJobIn] = Field(default_factory=list, max_length=MAX_JOBS)
    fleets: list[FleetIn] = Field(default_factory=list, max_length=MAX_FLEETS)
    budget: PortfolioBudgetIn | None = None
    policy: PolicyField = None
    providers: list[Slug] = Field(default_factory=list, max_length=32)
    regions: list[Slug] = Field(default_factory=list, max_length=64)
    terms: list[PortfolioTerm] = Field(
        default_factory=lambda: list(PORTFOLIO_TERMS), min_length=1, max_length=5,
        description="Terms the plan may buy.")
    accounting: PortfolioAccounting = Field(
        default="commitment", description="commitment: minimise everything signed for; "
                                          "amortised: the in-horizon monthly shares.")
    catalog_version: str | None = Field(default=None, pattern=r"^cv_\d{6}$")
    max_offers: int = Field(strict=True, default=400, ge=1, le=2000,
                            description="Most candidate offers the programme may consider.")
    pools_per_job: int | None = Field(
        strict=True, default=4, ge=1, le=1000,
        description="Keep each job's and fleet's this many cheapest pools per mode (base, "
                    "spot) as candidates; null keeps every pool. optimal is proven over the "
                    "kept candidates (solver.options_dropped counts the rest).")
    time_limit_s: float = Field(strict=True, default=10.0, gt=0, le=30,
                                description="The solve's wall-clock guard, seconds. A solve "
                                            "it stops depends on the machine's speed, so it "
                                            "is always 503 search-deadline, nothing stored.")
    node_limit: int = Field(
        strict=True, default=DEFAULT_NODE_LIMIT, ge=0, le=100_000,
        description="The solve's work budget: branch-and-bound nodes per HiGHS solve (the "
                    "whole programme and each of its smaller re-solves). Counted, not timed, "
                    "so a plan it stops is the same on every machine and verifies.")
    on_limit: OnLimit = Field(
        default="refuse", description="Past the work budget (node_limit): 503 search-deadline "
                                      "with nothing stored, or the best plan found with its "
                                      "gap and optimal false.")

    @model_validator(mode="after")
    def _checks(self) -> Self:
        start = month_index(self.horizon.start)
        end = start + self.horizon.months - 1
        for index, job in enumerate(self.jobs):
            first, last = month_index(job.earliest_start), month_index(job.deadline)
            if last < first:
                raise ValueError(f"jobs.{index}.deadline is before jobs.{index}.earliest_start")
            if first < start or last > end:
                raise ValueError(f"jobs.{index}: months beyond the horizon "
                                 f"{self.horizon.start} + {self.horizon.months}")
        for index, fleet in enumerate(self.fleets):
            if len(fleet.monthly_requests_per_s) != self.horizon.months:
                raise ValueError(f"fleets.{index}.monthly_requests_per_s has "
                                 f"{len(fleet.monthly_requests_per_s)} months, the horizon "
                                 f"{self.horizon.months}")
        if len(set(self.terms)) != len(self.terms):
            raise ValueError("terms lists a term twice")
        ids = [j.id for j in self.jobs] + [f.id for f in self.fleets]
        if len(set(ids)) != len(ids):
            raise ValueError("jobs and fleets need distinct ids")
        if not ids:
            raise ValueError("jobs: a portfolio plans at least one job or fleet")
        return self


class PortfolioOut(BaseModel):
    """The stored plan (docs/portfolio.md)."""

    id: str = Field(examples=["pf_" + "0" * 32])
    name: str
    created_at: str
    principal: str
    catalog_version: str
    estimator_version: str
    policy: dict[str, Any]
    horizon: dict[str, Any]
    accounting: str
    solver: dict[str, Any] = Field(description="status, optimal, gap_usd, gap_fraction, "
                                               "nodes, solve_s, columns, rows.")
    purchases: list[dict[str, Any]] = Field(description="Commitments bought: term, provider, "
                                                        "instance, region, count, start, end.")
    jobs: list[dict[str, Any]]
    fleets: list[dict[str, Any]] = Field(description=(
        "Per fleet: replicas and instances per month (sized on the serving estimate's "
        "expected figures); replicas_at_band_slow_end per month, band_slow_end_factor, "
        "extra_instances_at_band_slow_end per month (where the slow end's extra replicas "
        "would go: idle commitments, then on demand or spot) and the estimate's "
        "warning_details (issue 40; docs/portfolio.md, \"The band's slow end\")."))
    months: list[dict[str, Any]] = Field(description=(
        "Per month: billed cash, effective cost, committed and demanded capacity; with "
        "fleets, the billed and effective cost at the band's slow end too."))
    utilisation: list[dict[str, Any]]
    totals: dict[str, Any]
    baselines: list[dict[str, Any]]
    budget: dict[str, Any] | None
    verdict: str
    reasons: list[dict[str, Any]]


class PortfolioVerifyOut(BaseModel):
    matches: bool
    differences: list[dict[str, Any]]
    catalog_version: str
    estimator_version: str
    stored_estimator_version: str


FleetIn.model_rebuild()


WhatIfChange = TypeAliasType("WhatIfChange", Literal["price", "demand"])


class PortfolioWhatIfIn(RequestModel):
    """One change to a stored portfolio: a term's prices scaled ("if 3-year prices drop
    10 %": change price, term reserved_3y, factor 0.9), or one fleet's load in one month
    scaled ("if the fleet's load doubles in month 7": change demand, fleet, month, factor 2)."""

    change: WhatIfChange = Field(examples=["price"])
    factor: float = Field(strict=True, gt=0, le=100, examples=[0.9],
                          description="What the price or the load is multiplied by.")
    term: PortfolioTerm | None = Field(default=None, description="change price: the term.")
    provider: Slug | None = Field(default=None,
                                  description="change price: only this provider's offers.")
    fleet: Ident | None = Field(default=None, description="change demand: the fleet's id.")
    month: Month | None = Field(default=None, description="change demand: the month.")

    @model_validator(mode="after")
    def _fields(self) -> Self:
        if self.change == "price" and self.term is None:
            raise ValueError("change price needs term")
        if self.change == "demand" and (self.fleet is None or self.month is None):
            raise ValueError("change demand needs fleet and month")
        return self


class PortfolioWhatIfOut(BaseModel):
    change: dict[str, Any]
    base_total_usd: str
    changed_total_usd: str
    delta_usd: str
    purchases_added: list[dict[str, Any]] = Field(
        description="Commitments the change buys that the plan does not (count: how many more).")
    purchases_removed: list[dict[str, Any]] = Field(
        description="Commitments of the plan the change no longer buys (count: how many fewer).")
    solver: dict[str, Any]
    verdict: str
