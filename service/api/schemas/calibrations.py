"""``/v1/calibrations``: a user's measured runs in, the fitted factors and band out (issue 37,
docs/calibrations.md)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from pydantic import BaseModel, Field

from service.api.schemas.common import RequestModel, TextRule
from service.api.schemas.estimate import EstimateRequest
from service.core.user_calibration import UserFit

MAX_RUNS = 10_000
CALIBRATION_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._ -]*$"


class MeasuredIn(RequestModel):
    step_time_s: float = Field(
        strict=True, gt=0, le=1e7, description=(
            "Measured seconds per optimizer step of this layout (the steady-state median of a "
            "training log's iteration times, warm-up steps left out)."), examples=[2.41])


class RunIn(RequestModel):
    estimate: EstimateRequest = Field(description=(
        "The run as POST /v1/estimates takes it, with every layout field as it ran (no "
        "\"auto\"; no calibration_id)."))
    measured: MeasuredIn


EXAMPLE_RUN: dict[str, Any] = {
    "estimate": {
        "model": {"preset": "llama3.1-8b"},
        "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 8},
        # Micro-batch 2 without recomputation needs 115.8 GiB per GPU by the model, so the
        # example was refused (issue 41: found when the examples were run); torchtitan's
        # selective activation checkpointing fits it in 73.0 GiB.
        "parallelism": {"tp": 1, "pp": 1, "zero_stage": 3, "micro_batch": 2,
                        "recompute": "selective"},
        "training": {"seq_len": 8192, "global_batch_seqs": 16, "tokens": 1e9,
                     "framework": "torchtitan"},
    },
    "measured": {"step_time_s": 1.9},
}
CALIBRATION_EXAMPLE: dict[str, Any] = {"name": "our-h100-torchtitan", "runs": [EXAMPLE_RUN]}


class CalibrationRequest(RequestModel):
    model_config = RequestModel.model_config | {
        "json_schema_extra": {"examples": [CALIBRATION_EXAMPLE]}}

    name: Annotated[str, TextRule(max_length=64)] = Field(
        pattern=CALIBRATION_NAME_PATTERN, description=(
            "A label; each calibration stored under the same name by the same key's principal "
            "gets the next revision."), examples=["our-h100-torchtitan"])
    runs: list[RunIn] = Field(min_length=1, max_length=MAX_RUNS, description=(
        f"1 to {MAX_RUNS:,} measured runs."))


class FactorOut(BaseModel):
    name: str = Field(description="compute, communication or overhead.")
    value: float = Field(description="The fitted multiplier on the project's constant (1: "
                                     "unchanged; 1 as well when not informed).")
    bounds: list[float] = Field(description="[low, high] every factor is kept within.")
    interval_80: list[float] = Field(description="80% posterior interval, within the bounds.")
    informed: bool = Field(description="False when the runs barely reduce its uncertainty "
                                       "(communication when every run is on one GPU).")
    prior_sd_log: float
    posterior_sd_log: float
    mean_share_fraction: float = Field(description="Its mean share of the runs' steps.")


class LeaveOneOutOut(BaseModel):
    median_fraction: float = Field(description="Median |predicted / measured - 1| of step "
                                               "time, each run predicted without itself.")
    p90_fraction: float
    max_fraction: float
    band_coverage_fraction: float = Field(description=(
        "Share of runs whose measured time is inside the band around their leave-one-out "
        "prediction."))


class CalibrationBandOut(BaseModel):
    regime: str
    low_fraction: float = Field(description="As the estimate's band: predicted/measured - 1 "
                                            "of tokens/s, 10th percentile side.")
    high_fraction: float
    runs: int


class CalibrationOut(BaseModel):
    id: str
    name: str
    revision: int
    created_at: dt.datetime
    principal: str
    runs_used: int
    base_calibration_version: str = Field(description="The project's fit the factors are on.")
    estimator_version: str
    factors: list[FactorOut]
    uninformed: list[str] = Field(description="Factors the runs could not inform (kept at 1).")
    outliers: list[int] = Field(description=(
        "Always empty: a run that disagrees with the others beyond any plausible factor is "
        "refused with 422 naming it, never fitted around."))
    shrinkage_fraction: float = Field(description=(
        "How far the compute factor moved from the project's fit towards the runs' own value "
        "(0: not at all, 1: all the way)."))
    residual_sd_log: float = Field(description="The runs' scatter around the fitted model, "
                                               "in log terms.")
    leave_one_out: LeaveOneOutOut
    bands: list[CalibrationBandOut] = Field(
        description="The band of each regime the runs are in.")
    method: str

    @classmethod
    def from_fit(cls, user: UserFit, **head: Any) -> CalibrationOut:
        return cls(
            **head,
            runs_used=user.runs_used,
            factors=[FactorOut(name=f.name, value=f.value, bounds=[f.low_bound, f.high_bound],
                               interval_80=[f.interval_low, f.interval_high],
                               informed=f.informed, prior_sd_log=f.prior_sd_log,
                               posterior_sd_log=f.posterior_sd_log,
                               mean_share_fraction=f.mean_share_fraction)
                     for f in user.factors],
            uninformed=list(user.uninformed), outliers=[],
            shrinkage_fraction=user.shrinkage_fraction, residual_sd_log=user.residual_sd_log,
            leave_one_out=LeaveOneOutOut(
                median_fraction=user.loo.median_fraction, p90_fraction=user.loo.p90_fraction,
                max_fraction=user.loo.max_fraction,
                band_coverage_fraction=user.loo.coverage_fraction),
            bands=[CalibrationBandOut(
                regime=r, low_fraction=user.bands[r].low_fraction,
                high_fraction=user.bands[r].high_fraction, runs=user.bands[r].rows)
                for r in user.regimes],
            method=("partial pooling (Gelman et al., BDA ch. 5) of log factors towards the "
                    "project's fit; ridge leave-one-out residuals; split-conformal band "
                    "blended with the project's (docs/calibrations.md)"),
        )


class CalibrationSummaryOut(BaseModel):
    id: str
    name: str
    revision: int
    created_at: dt.datetime
    principal: str
    runs_used: int
