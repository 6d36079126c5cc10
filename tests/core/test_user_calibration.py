"""The user-calibration fit (issue 37, service/core/user_calibration.py) on runs the model
itself "measured" with known factors: one run moves the factors partway, many recover them,
a factor the runs cannot see stays uninformed, the bounds hold, outliers are named, and the
band narrows only as far as the runs' leave-one-out errors allow."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from service.core.calibration import DEFAULT_CALIBRATION
from service.core.estimate import estimate
from service.core.presets import get_preset
from service.core.specs import (
    ClusterSpec,
    Framework,
    ParallelismPlan,
    RecomputeMode,
    TrainingSpec,
)
from service.core.user_calibration import (
    FACTOR_HIGH,
    MeasuredRun,
    OutlierRunsError,
    apply,
    fit,
    step_parts,
)
from tests.factories import accelerator as h100

TRUTH = {"compute": 0.8, "communication": 1.6, "overhead": 1.0}


def layouts(multi_gpu: bool = True) -> list[tuple[ClusterSpec, ParallelismPlan, TrainingSpec]]:
    found = []
    counts = (8, 16, 32, 64) if multi_gpu else (1,)
    for num_gpus in counts:
        for tp in ((1, 2, 4, 8) if multi_gpu else (1,)):
            for micro_batch in (1, 2):
                cluster = ClusterSpec(accelerator=h100(), num_gpus=num_gpus, gpus_per_node=8
                                      if num_gpus >= 8 else num_gpus)
                dp = num_gpus // tp
                plan = ParallelismPlan(tp=tp, pp=1, dp=dp, micro_batch=micro_batch,
                                       zero_stage=1, recompute=RecomputeMode.FULL)
                training = TrainingSpec(seq_len=4096, global_batch_seqs=dp * micro_batch * 4,
                                        tokens=1e10, framework=Framework.MEGATRON)
                found.append((cluster, plan, training))
    return found


def runs(truth: dict[str, float], multi_gpu: bool = True,
         noise: float = 0.0) -> list[MeasuredRun]:
    """Runs whose "measured" step is the model's own under ``truth`` (times a fixed pattern of
    noise): a user whose stack is exactly the factors away from the project's fit."""
    # One GPU holds an 8-layer cut of the 8B model (its Adam state fits in 80 GB).
    model = get_preset("llama3.1-8b").model
    if not multi_gpu:
        model = replace(model, num_layers=8)
    true_cal = apply(DEFAULT_CALIBRATION, truth)
    made = []
    rng = np.random.default_rng(7)
    for cluster, plan, training in layouts(multi_gpu):
        base = estimate(model, cluster, plan, training)
        measured = estimate(model, cluster, plan, training, calibration=true_cal)
        assert base.memory.fits
        made.append(MeasuredRun(
            parts=step_parts(base.throughput.step, cluster.num_gpus, DEFAULT_CALIBRATION),
            measured_step_s=float(measured.throughput.step.step_s)
            * math.exp(noise * rng.standard_normal()), regime="megatron"))
    return made


def test_unit_factors_change_nothing() -> None:
    model = get_preset("llama3.1-8b").model
    cluster, plan, training = layouts()[5]
    same = apply(DEFAULT_CALIBRATION, {})
    assert (estimate(model, cluster, plan, training, calibration=same).throughput.step
            == estimate(model, cluster, plan, training).throughput.step)


def test_parts_add_up_to_the_step() -> None:
    for run in runs({}):
        assert run.parts.step_s == pytest.approx(run.measured_step_s, rel=1e-12)


def test_one_run_moves_the_factors_partway() -> None:
    one = fit(runs(TRUTH)[:1])
    compute = one.factors[0]
    assert compute.name == "compute"
    assert TRUTH["compute"] < compute.value < 1.0
    assert 0.2 < one.shrinkage_fraction < 0.95


def test_many_runs_make_the_factors_the_users_own() -> None:
    many = fit(runs(TRUTH))
    values = dict(zip(("compute", "communication", "overhead"), many.values, strict=True))
    assert values["compute"] == pytest.approx(TRUTH["compute"], rel=0.03)
    # Communication is a small share of these steps: it moves most of the way (in log terms).
    assert math.log(values["communication"]) > 0.5 * math.log(TRUTH["communication"])
    assert many.uninformed == ()
    assert many.shrinkage_fraction > 0.95
    assert many.loo.median_fraction < 0.01
    # The further the factors, the more runs it takes: 32 runs get closer than 2.
    few = fit(runs(TRUTH)[:2])
    assert abs(math.log(few.values[0] / 0.8)) > abs(math.log(values["compute"] / 0.8))


def test_single_gpu_runs_cannot_inform_the_communication_factor() -> None:
    single = fit(runs(TRUTH, multi_gpu=False) * 4)
    assert "communication" in single.uninformed
    communication = single.factors[1]
    assert communication.value == 1.0
    assert not communication.informed


def test_factors_stay_within_their_bounds() -> None:
    made = runs({"compute": 0.26, "communication": 1.0, "overhead": 1.0})
    # Measured 3.7x slower than the model: the compute factor reaches its floor, not past it.
    slow = [replace(r, measured_step_s=r.parts.step_s * 3.9) for r in made]
    fitted = fit(slow)
    assert all(f.low_bound <= f.value <= f.high_bound for f in fitted.factors)
    with pytest.raises(OutlierRunsError) as caught:
        fit([replace(r, measured_step_s=r.parts.step_s * FACTOR_HIGH * 1.5) for r in made[:3]])
    assert caught.value.field == "runs.0.measured.step_time_s"


def test_a_run_that_disagrees_with_the_others_is_named() -> None:
    made = runs(TRUTH, noise=0.02)
    made[5] = replace(made[5], measured_step_s=made[5].measured_step_s * 2.5)
    with pytest.raises(OutlierRunsError) as caught:
        fit(made)
    assert caught.value.field == "runs.5.measured.step_time_s"
    assert [index for index, _ in caught.value.runs] == [5]


def test_non_positive_times_are_refused() -> None:
    made = runs(TRUTH)[:3]
    for bad in (0.0, -1.0, math.nan, math.inf):
        broken = [*made[:2], replace(made[2], measured_step_s=bad)]
        with pytest.raises(ValueError, match="positive") as caught:
            fit(broken)
        assert getattr(caught.value, "field", None) == "runs.2.measured.step_time_s"


def test_the_band_narrows_only_as_far_as_the_runs_support() -> None:
    prior = DEFAULT_CALIBRATION.bands["megatron"]
    one = fit(runs(TRUTH)[:1]).bands["megatron"]
    # One run: the band barely moves from the project's (weight 1/11).
    assert one.high_fraction - one.low_fraction > 0.85 * (prior.high_fraction
                                                          - prior.low_fraction)
    noisy = fit(runs(TRUTH, noise=0.15))
    band = noisy.bands["megatron"]
    # Never narrower than the runs' own leave-one-out spread (their 10th-90th percentiles).
    errors = np.expm1(np.array(noisy.loo_log_residuals))
    assert band.low_fraction <= np.quantile(errors, 0.1) + 1e-12
    assert band.high_fraction >= np.quantile(errors, 0.9) - 1e-12
    assert noisy.loo.coverage_fraction >= 0.8
    # Other regimes keep the project's band.
    assert noisy.bands["fsdp"] == DEFAULT_CALIBRATION.bands["fsdp"]


def test_leave_one_out_matches_refitting_without_the_run() -> None:
    """The ridge PRESS residuals are the refit-without-the-run residuals of the linearised
    model: close to an exact refit for runs near the fit."""
    made = runs(TRUTH, noise=0.05)[:12]
    fitted = fit(made)
    for i in (0, 5, 11):
        rest = fit([r for j, r in enumerate(made) if j != i])
        predicted = made[i].parts.predicted_s(rest.values)
        exact = math.log(made[i].measured_step_s / predicted)
        assert fitted.loo_log_residuals[i] == pytest.approx(exact, abs=0.02)
