"""Calibration from a user's own measured runs (issue 37): a few bounded factors on top of
the project's fit, pulled towards the user's runs by partial pooling, with a band that
narrows only as far as the runs' own leave-one-out errors allow.

Index:

- ``step_parts``: one run's predicted step (under the base calibration) split into what each
  factor scales: compute, communication, neither, and the fixed per-step overhead.
- ``fit``: the factors' posterior, the leave-one-out errors, the band and the outliers.
- ``apply``: a ``Calibration`` with the factors and bands in it, for ``estimate()``.

The model. A run's measured step ``T_i`` against the parts of its predicted one::

    T_i = [C_i / f_c + M_i / f_m + F_i] (1 + s_i) + O_i f_o     (times exp(eps_i))

with ``C`` the compute (including its share of the pipeline bubble), ``M`` every
collective and point-to-point transfer (and their share of the bubble, and the exposed
data-parallel traffic), ``F`` the HBM-bound optimizer step, offload and FSDP2 copies (no
factor), ``s`` the straggler multiplier and ``O`` the fixed per-step overhead
(``timing.step_overhead_s``). ``apply`` puts the factors where the model has them:
``f_c`` multiplies every stack's compute efficiency (``Calibration.stack_efficiency``),
``f_m`` the achieved link efficiencies and divides the collective latency (so each
collective's alpha + S/B takes exactly 1/f_m the time), ``f_o`` the fixed and the
per-doubling overhead. The fit uses the parts of the base estimate (one estimate per run),
so it is exact for every term that is linear in them and a first-order approximation for the
few ``max`` terms (context-parallel and data-parallel overlap).

The fit is the hierarchical normal model of Gelman et al., *Bayesian Data Analysis*, 3rd ed.
(2013), chapter 5 (sections 5.4-5.5, partial pooling of a group's effect towards the
population): the log factors ``theta`` of this user's stack and regime are a draw from the
population of source families, ``theta ~ N(0, diag(tau^2))``, and each run's log residual
is ``eps_i ~ N(0, sigma^2)``. The posterior mode is found by Gauss-Newton on the log step
(a ridge regression at each step; BDA section 14.8 for the normal linear model with a normal
prior), projected on the bounds ``[1/4, 4]``. ``sigma^2`` has a scaled-inverse-chi^2 prior
(BDA section 3.3) centred on the project's within-family spread, so one run moves the factors
partway (the shrinkage weight tau^2 / (tau^2 + sigma^2/n) of BDA eq. 5.17 grows with the
number of runs) and many runs make them the user's own, while a wide spread among the runs
(a large sigma) pulls them less. A factor the runs barely move (posterior variance above
``UNINFORMED_VARIANCE_FRACTION`` of the prior's: the communication factor when every run is
on one GPU) is reported as not informed and stays at the project's value.

Leave-one-out residuals are the ridge PRESS residuals ``e_i / (1 - h_ii)`` of the final
Gauss-Newton step (Allen 1974, "The relationship between variable selection and data
augmentation", Technometrics 16(1); Hastie, Tibshirani and Friedman, *The Elements of
Statistical Learning*, 2nd ed., eq. 7.52): exact for the linearised model, one pass for
10,000 runs. The band is split conformal on them (Vovk, Gammerman and Shafer 2005;
Angelopoulos and Bates 2021, section 1: the ceil((n+1) q)-th order statistic), blended with
the project's out-of-sample band by the weight n / (n + ``BAND_PSEUDO_RUNS``) and never
narrower than the runs' own conformal band: it narrows only where the runs support it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from service.core.calibration import DEFAULT_CALIBRATION, Band, Calibration
from service.core.errors import InvalidSpecError
from service.core.specs import Framework
from service.core.timing import LN_2, StepTime

FACTOR_NAMES = ("compute", "communication", "overhead")
"""The factors, in the order of every vector here."""
FACTOR_LOW = 0.25
FACTOR_HIGH = 4.0
"""Bounds of every factor: a user's stack four times faster or slower than the project's fit
in one term is beyond anything the published families show (their leave-one-source-out
errors stay within -60% and +160%, docs/validation.md)."""
Z_80 = 1.2815515655446004
"""The standard normal's 90th percentile: an 80% two-sided interval is mean +/- Z_80 sd."""


def _prior_sd_from_band(band: Band) -> float:
    """The log-scale sd implied by an 80% band: (ln(1+high) - ln(1+low)) / (2 z_0.9)."""
    return (math.log1p(band.high_fraction) - math.log1p(band.low_fraction)) / (2.0 * Z_80)


COMPUTE_PRIOR_SD = _prior_sd_from_band(DEFAULT_CALIBRATION.bands[Framework.UNKNOWN.value])
"""tau of the compute factor: the spread of the project's leave-one-source-out errors (the
``unknown`` band pools all 239 out-of-sample rows), about 0.18 in log terms: how far a new
family's efficiency lands from the fit."""
COMMUNICATION_PRIOR_SD = 2.0 * COMPUTE_PRIOR_SD
"""tau of the communication factor: twice the compute one. Few source families inform the
link efficiencies (``benchmarks.calibrate.strong_prior`` holds them near their physical
starting points), so a user's fabric may differ more (issue 37: a 150 to 600 GB/s change
did not move the small-layout errors)."""
OVERHEAD_PRIOR_SD = 2.0 * COMPUTE_PRIOR_SD
"""tau of the fixed per-step overhead: as loosely known (fitted mostly on this project's own
single-GPU steps)."""
PRIOR_SD = (COMPUTE_PRIOR_SD, COMMUNICATION_PRIOR_SD, OVERHEAD_PRIOR_SD)
WITHIN_FAMILY_SD = 0.10
"""sigma_0: the median, over the 22 source families with at least three rows, of the sd of
their leave-one-source-out log errors (benchmarks/data/holdout.csv, calibration 2026-11-27.6:
0.103): how much runs of one family scatter around their common offset."""
SIGMA_PRIOR_DOF = 4.0
"""nu_0 of sigma^2's scaled-inverse-chi^2 prior: worth four runs (BDA section 3.3)."""
UNINFORMED_VARIANCE_FRACTION = 0.8
"""A factor whose posterior variance is above this share of its prior variance is reported
as not informed (the runs reduced its uncertainty by less than a fifth)."""
BAND_PSEUDO_RUNS = 10.0
"""The prior band counts as this many runs when it is blended with the runs' own band."""
BAND_TAIL = 0.1
"""Each side of the 80% band."""
IMPLAUSIBLE_LOG_RATIO = math.log(FACTOR_HIGH)
"""A run measured more than 4x away from its prediction cannot be explained by factors
within their bounds (a unit slip such as milliseconds, or a different layout)."""
OUTLIER_MIN_LOG = math.log(2.0)
OUTLIER_ROBUST_SDS = 5.0
"""With three or more runs, a run whose leave-one-out error exceeds both a factor of 2 and
five robust sds of the others' (1.4826 x the median absolute leave-one-out error, the normal
consistency constant of the MAD; Rousseeuw and Croux 1993) disagrees with them beyond any
plausible factor: it is refused, never silently fitted."""
GAUSS_NEWTON_STEPS = 30


@dataclass(frozen=True, slots=True, kw_only=True)
class StepParts:
    """One run's predicted step under the base calibration, by what each factor scales."""

    compute_s: float
    communication_s: float
    fixed_s: float
    overhead_s: float
    straggler_multiplier: float
    """1 + straggler_fraction x sqrt(2 ln N): the work's share of the step overhead."""

    @property
    def step_s(self) -> float:
        return self.predicted_s((1.0, 1.0, 1.0))

    def predicted_s(self, factors: Sequence[float]) -> float:
        compute, communication, overhead = factors
        work = (self.compute_s / compute + self.communication_s / communication
                + self.fixed_s)
        return work * self.straggler_multiplier + self.overhead_s * overhead


def step_parts(step: StepTime, num_gpus: int, calibration: Calibration) -> StepParts:
    """Split an estimate's ``StepTime`` (made with ``calibration``) into ``StepParts``: the
    pipeline bubble in the proportion of compute to communication in a micro-batch, the
    exposed data-parallel traffic as communication, the overhead into its fixed part and its
    straggler part (``timing.step_overhead_s``)."""
    compute = float(step.compute_s)
    comm = float(step.tp_comm_s + step.cp_comm_s + step.ep_comm_s + step.pp_comm_s)
    bubble = float(step.pp_bubble_s)
    micro = compute + comm
    share = compute / micro if micro > 0 else 1.0
    fixed = float(step.optimizer_s + step.host_offload_s + step.fsdp_copy_s)
    communication = comm + bubble * (1.0 - share) + float(step.dp_comm_exposed_s)
    compute_part = compute + bubble * share
    overhead = (calibration.step_overhead_s
                + calibration.step_sync_s_per_doubling * math.log(num_gpus) / LN_2)
    work = compute_part + communication + fixed
    straggler = float(step.overhead_s) - overhead
    return StepParts(compute_s=compute_part, communication_s=communication, fixed_s=fixed,
                     overhead_s=overhead,
                     straggler_multiplier=1.0 + (straggler / work if work > 0 else 0.0))


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredRun:
    """One measured run: its predicted parts, its measured step and its band regime."""

    parts: StepParts
    measured_step_s: float
    regime: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Factor:
    name: str
    value: float
    """The posterior mode, within [low_bound, high_bound]; 1 means the project's fit."""
    low_bound: float
    high_bound: float
    interval_low: float
    interval_high: float
    """The 80% posterior interval (normal on the log factor), clipped to the bounds."""
    prior_sd_log: float
    posterior_sd_log: float
    informed: bool
    mean_share_fraction: float
    """The factor's mean share of the runs' predicted steps."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LooSummary:
    """|predicted / measured - 1| on step time, each run predicted without itself."""

    median_fraction: float
    p90_fraction: float
    max_fraction: float
    coverage_fraction: float
    """Share of the runs whose measured step lies inside the band around their leave-one-out
    prediction."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UserFit:
    factors: tuple[Factor, ...]
    runs_used: int
    residual_sd_log: float
    """sigma, the posterior scatter of the runs around the fitted model (log terms)."""
    shrinkage_fraction: float
    """How far the compute factor moved from the prior towards the runs' own least-squares
    value: 0 is the project's fit, 1 the runs' alone (tau^2 / (tau^2 + sigma^2 / n) for one
    factor; BDA eq. 5.17)."""
    loo_log_residuals: tuple[float, ...]
    """ln(measured / predicted-without-the-run) per run, in the order given."""
    loo: LooSummary
    bands: dict[str, Band]
    """The band per regime: the runs' regimes get the blended one; the others keep the
    project's."""
    regimes: tuple[str, ...]
    """The regimes the runs are in."""

    @property
    def values(self) -> tuple[float, ...]:
        return tuple(f.value for f in self.factors)

    @property
    def uninformed(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.factors if not f.informed)


class OutlierRunsError(InvalidSpecError):
    """Runs that disagree with the others (or with any bounded factor); ``runs`` holds
    (index, leave-one-out log error) pairs. The field names the first."""

    def __init__(self, message: str, *, runs: tuple[tuple[int, float], ...]) -> None:
        super().__init__(message, field=f"runs.{runs[0][0]}.measured.step_time_s")
        self.runs = runs


def _design(runs: Sequence[MeasuredRun], theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(predicted log step, d log step / d theta) for every run at log factors ``theta``."""
    parts = np.array([[r.parts.compute_s, r.parts.communication_s, r.parts.fixed_s,
                       r.parts.overhead_s, r.parts.straggler_multiplier] for r in runs])
    compute, comm, fixed, overhead, mult = parts.T
    c = compute * np.exp(-theta[0]) * mult
    m = comm * np.exp(-theta[1]) * mult
    o = overhead * np.exp(theta[2])
    total = c + m + fixed * mult + o
    jacobian = np.stack([-c / total, -m / total, o / total], axis=1)
    return np.log(total), jacobian


def _posterior(y: np.ndarray, runs: Sequence[MeasuredRun], sigma2: float,
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(theta mode, residuals, jacobian, posterior precision) by projected Gauss-Newton."""
    precision_prior = np.diag(1.0 / np.square(PRIOR_SD))
    theta = np.zeros(3)
    low, high = math.log(FACTOR_LOW), math.log(FACTOR_HIGH)
    for _ in range(GAUSS_NEWTON_STEPS):
        predicted, jac = _design(runs, theta)
        residual = y - predicted
        precision = jac.T @ jac / sigma2 + precision_prior
        gradient = jac.T @ residual / sigma2 - precision_prior @ theta
        step = np.linalg.solve(precision, gradient)
        new = np.clip(theta + step, low, high)
        done = bool(np.max(np.abs(new - theta)) < 1e-10)
        theta = new
        if done:
            break
    predicted, jac = _design(runs, theta)
    residual = y - predicted
    precision = jac.T @ jac / sigma2 + precision_prior
    return theta, residual, jac, precision


def _order_statistic(values: np.ndarray, q: float) -> float:
    """The ceil((n+1) q)-th smallest (1-based), capped at the largest (split conformal)."""
    ordered = np.sort(values)
    k = min(len(ordered), max(1, math.ceil((len(ordered) + 1) * q)))
    return float(ordered[k - 1])


def _percentile(values: np.ndarray, q: float) -> float:
    return float(np.quantile(values, q)) if len(values) else 0.0


def _blend(prior: Band, own_low: float, own_high: float, n: int, regime: str) -> Band:
    weight = n / (n + BAND_PSEUDO_RUNS)
    low = (1.0 - weight) * prior.low_fraction + weight * own_low
    high = (1.0 - weight) * prior.high_fraction + weight * own_high
    return Band(regime=regime, low_fraction=min(low, own_low), high_fraction=max(high, own_high),
                rows=n, coverage_fraction=prior.coverage_fraction)


def fit(runs: Sequence[MeasuredRun], *, base: Calibration = DEFAULT_CALIBRATION) -> UserFit:
    """The user's factors, leave-one-out errors and band (module docstring). Raises
    ``OutlierRunsError`` for runs no bounded factor explains or that disagree with the
    others, and ``InvalidSpecError`` for no runs or a non-positive time."""
    n = len(runs)
    if n == 0:
        raise InvalidSpecError("at least one run is needed", field="runs")
    for index, run in enumerate(runs):
        if not (math.isfinite(run.measured_step_s) and run.measured_step_s > 0):
            raise InvalidSpecError("the measured step time must be a positive number of "
                                   "seconds", field=f"runs.{index}.measured.step_time_s")
    y = np.log(np.array([r.measured_step_s for r in runs]))
    raw = y - np.log(np.array([r.parts.step_s for r in runs]))
    implausible = tuple((int(i), float(raw[i])) for i in np.flatnonzero(
        np.abs(raw) > IMPLAUSIBLE_LOG_RATIO))
    if implausible:
        first, error = implausible[0]
        raise OutlierRunsError(
            f"{len(implausible)} run(s) measured more than {FACTOR_HIGH:g}x away from their "
            f"prediction, beyond any factor within [{FACTOR_LOW:g}, {FACTOR_HIGH:g}]; run "
            f"{first} is {math.exp(error):.3g}x the predicted step: check the unit (seconds) "
            "and the layout", runs=implausible)

    sigma2 = WITHIN_FAMILY_SD ** 2
    theta, residual, jac, precision = _posterior(y, runs, sigma2)
    for _ in range(3):  # empirical Bayes on sigma^2 (scaled-inverse-chi^2 posterior mean)
        sigma2 = ((SIGMA_PRIOR_DOF * WITHIN_FAMILY_SD ** 2 + float(residual @ residual))
                  / (SIGMA_PRIOR_DOF + n))
        theta, residual, jac, precision = _posterior(y, runs, sigma2)
    covariance = np.linalg.inv(precision)
    # Ridge PRESS: h_ii = x_i' P^-1 x_i / sigma^2.
    leverage = np.einsum("ij,jk,ik->i", jac, covariance, jac) / sigma2
    loo = residual / np.maximum(1.0 - leverage, 1e-9)

    if n >= 3:
        robust = 1.4826 * float(np.median(np.abs(loo)))
        limit = max(OUTLIER_MIN_LOG, OUTLIER_ROBUST_SDS * robust)
        far = tuple((int(i), float(loo[i])) for i in np.flatnonzero(np.abs(loo) > limit))
        if far:
            first, error = far[0]
            raise OutlierRunsError(
                f"{len(far)} run(s) disagree with the others beyond any plausible factor: "
                f"run {first} measured {math.exp(error):.3g}x what the other runs predict "
                f"(the limit is {math.exp(limit):.3g}x); check its time and layout, or "
                "calibrate it separately", runs=far)

    prior_var = np.square(PRIOR_SD)
    post_var = np.diag(covariance)
    shares = np.abs(jac).mean(axis=0)
    factors = []
    for j, name in enumerate(FACTOR_NAMES):
        informed = bool(post_var[j] < UNINFORMED_VARIANCE_FRACTION * prior_var[j])
        value = float(math.exp(theta[j])) if informed else 1.0
        sd = math.sqrt(post_var[j])
        centre = theta[j] if informed else 0.0
        factors.append(Factor(
            name=name, value=value, low_bound=FACTOR_LOW, high_bound=FACTOR_HIGH,
            interval_low=max(FACTOR_LOW, math.exp(centre - Z_80 * sd)),
            interval_high=min(FACTOR_HIGH, math.exp(centre + Z_80 * sd)),
            prior_sd_log=float(PRIOR_SD[j]), posterior_sd_log=sd, informed=informed,
            mean_share_fraction=float(shares[j])))

    # How far the compute factor moved towards the runs' own least-squares value.
    # (Linearised at the mode: the unpenalised one-factor step from it.)
    x = -jac[:, 0]
    own = float(theta[0] - (x @ residual) / (x @ x)) if x @ x > 0 else 0.0
    shrink = float(theta[0] / own) if abs(own) > 1e-12 else 0.0

    # tokens/s error of a prediction: predicted/measured - 1 = measured_step/predicted - 1.
    tokens_error = np.expm1(loo)
    own_low = _order_statistic(tokens_error, BAND_TAIL)
    own_high = _order_statistic(tokens_error, 1.0 - BAND_TAIL)
    own_low, own_high = min(own_low, 0.0), max(own_high, 0.0)
    regimes = tuple(sorted({r.regime for r in runs}))
    bands = dict(base.bands)
    for regime in regimes:
        prior = base.bands.get(regime, base.bands[Framework.UNKNOWN.value])
        bands[regime] = _blend(prior, own_low, own_high, n, regime)
    # Coverage of each run's leave-one-out prediction by its regime's band.
    lows = np.array([bands[r.regime].low_fraction for r in runs])
    highs = np.array([bands[r.regime].high_fraction for r in runs])
    covered = float(np.mean((tokens_error >= lows) & (tokens_error <= highs)))
    step_error = np.abs(np.expm1(-loo))
    return UserFit(
        factors=tuple(factors), runs_used=n, residual_sd_log=math.sqrt(sigma2),
        shrinkage_fraction=min(max(shrink, 0.0), 1.0),
        loo_log_residuals=tuple(float(v) for v in loo),
        loo=LooSummary(median_fraction=_percentile(step_error, 0.5),
                       p90_fraction=_percentile(step_error, 0.9),
                       max_fraction=float(step_error.max()), coverage_fraction=covered),
        bands=bands, regimes=regimes)


def apply(base: Calibration, factors: Mapping[str, float],
          bands: Mapping[str, Band] | None = None) -> Calibration:
    """``base`` with the user's factors in the constants they scale (module docstring) and
    the user's bands. Factors outside the bounds are refused."""
    for name in FACTOR_NAMES:
        value = factors.get(name, 1.0)
        if not (FACTOR_LOW <= value <= FACTOR_HIGH):
            raise InvalidSpecError(f"factor {name} must be within [{FACTOR_LOW}, "
                                   f"{FACTOR_HIGH}]", field=f"factors.{name}")
    compute = factors.get("compute", 1.0)
    comm = factors.get("communication", 1.0)
    overhead = factors.get("overhead", 1.0)
    return replace(
        base,
        stack_efficiency={fw.value: base.stack_efficiency_for(fw) * compute
                          for fw in Framework},
        scaleup_efficiency_fraction=base.scaleup_efficiency_fraction * comm,
        scaleout_efficiency_fraction=base.scaleout_efficiency_fraction * comm,
        collective_latency_s=base.collective_latency_s / comm,
        step_overhead_s=base.step_overhead_s * overhead,
        step_sync_s_per_doubling=base.step_sync_s_per_doubling * overhead,
        bands=dict(bands) if bands is not None else base.bands,
    )
