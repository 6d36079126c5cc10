"""Issue 40: the coded warnings of serving answers outside what the serving rows validate
(``uncalibrated_engine``, ``outside_validated_range``), and the shipped pairs and ranges as
the fit on the committed rows."""

from __future__ import annotations

import dataclasses

from benchmarks import serving_validation as v
from benchmarks.accuracy import seed_accelerators
from service.core import serving as s
from service.core.plausibility import OUTSIDE_VALIDATED_RANGE, WarningDetail
from service.core.presets import PRESETS

ACC = seed_accelerators()
ROWS = v.load()
USABLE = [r for r in ROWS if v.skip_reason(r, ACC) is None]
DENSE = PRESETS["llama3.1-70b"].model
MOE = PRESETS["mixtral-8x7b"].model


def deployment(engine: s.Engine, accelerator: str, **extra: object) -> s.Deployment:
    return s.Deployment(accelerator=ACC[accelerator], gpus_per_replica=4, tp=4,
                        weight_precision=s.WeightPrecision.FP8, engine=engine,
                        **extra)  # type: ignore[arg-type]


def traffic(prompt: float = 1024, output: float = 256, **extra: object) -> s.Traffic:
    return s.Traffic(mode=s.TrafficMode.ONLINE, prompt=s.Lengths.of(mean=prompt),
                     output=s.Lengths.of(mean=output), **extra)  # type: ignore[arg-type]


def codes(e: s.ServingEstimate) -> dict[str, list[WarningDetail]]:
    out: dict[str, list[WarningDetail]] = {}
    for d in e.warning_details:
        out.setdefault(d.code, []).append(d)
    return out


def test_the_shipped_calibrated_pairs_and_range_are_the_fit_on_the_committed_rows() -> None:
    assert dict(s.CALIBRATED_PAIRS) == v.calibrated_pairs(USABLE)
    assert v.validated_range(USABLE) == s.VALIDATED_RANGE
    assert all(e is not s.Engine.UNKNOWN for e, _ in s.CALIBRATED_PAIRS)  # never fitted


def test_a_pair_without_fitted_rows_is_answered_with_uncalibrated_engine() -> None:
    calibrated = s.serve(DENSE, deployment(s.Engine.VLLM, "h100-sxm5-80gb"),
                         traffic(concurrency=8))
    assert s.UNCALIBRATED_ENGINE not in codes(calibrated)
    for engine, accelerator in ((s.Engine.VLLM, "mi325x-256gb"),
                                (s.Engine.SGLANG, "h200-sxm-141gb"),
                                (s.Engine.TRTLLM, "h200-sxm-141gb"),
                                (s.Engine.UNKNOWN, "h100-sxm5-80gb")):
        assert (engine, accelerator) not in s.CALIBRATED_PAIRS
        e = s.serve(DENSE, deployment(engine, accelerator), traffic(concurrency=8))
        [detail] = codes(e)[s.UNCALIBRATED_ENGINE]
        assert detail.field == "deployment.engine"
        assert accelerator in detail.message
        assert str(engine) in detail.message
        assert detail.message in e.warnings
        # The figures themselves are the same model's: only the warning is added.
        assert e.output_tokens_per_s > 0


def test_moe_serving_is_coded_outside_the_validated_range_and_still_answered() -> None:
    e = s.serve(MOE, deployment(s.Engine.VLLM, "h100-sxm5-80gb"), traffic(concurrency=8))
    [detail] = [d for d in codes(e)[OUTSIDE_VALIDATED_RANGE] if d.field == "model"]
    assert detail.message == s.MOE_SERVING_WARNING
    assert e.warnings.count(s.MOE_SERVING_WARNING) == 1
    assert e.output_tokens_per_s > 0


def test_lengths_and_batches_beyond_the_validated_rows_are_coded() -> None:
    d = deployment(s.Engine.VLLM, "h100-sxm5-80gb")
    inside = s.serve(DENSE, d, traffic(concurrency=8))
    assert OUTSIDE_VALIDATED_RANGE not in codes(inside)
    high = s.VALIDATED_RANGE.prompt_tokens[1]
    e = s.serve(DENSE, d, traffic(prompt=high * 1.5, concurrency=8))
    assert [x.field for x in codes(e)[OUTSIDE_VALIDATED_RANGE]] == ["traffic.prompt_tokens"]
    short = s.serve(DENSE, d, traffic(output=s.VALIDATED_RANGE.output_tokens[0] / 2,
                                      concurrency=8))
    assert [x.field for x in codes(short)[OUTSIDE_VALIDATED_RANGE]] == ["traffic.output_tokens"]
    big = int(s.VALIDATED_RANGE.running_batch_max) * 2
    batch = s.serve(DENSE, dataclasses.replace(d, max_batch=big), s.Traffic(
        mode=s.TrafficMode.FIXED_BATCH, prompt=s.Lengths.of(mean=128),
        output=s.Lengths.of(mean=256), batch_size=big))
    assert batch.batch > s.VALIDATED_RANGE.running_batch_max
    assert [x.field for x in codes(batch)[OUTSIDE_VALIDATED_RANGE]] == ["traffic.batch_size"]


def test_the_pairs_given_replace_the_shipped_ones() -> None:
    d = deployment(s.Engine.SGLANG, "h200-sxm-141gb")
    details = s.validation_warnings(DENSE, d, traffic(concurrency=8), 8.0,
                                    pairs={(s.Engine.SGLANG, "h200-sxm-141gb"): 3})
    assert details == []
