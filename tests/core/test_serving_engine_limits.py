"""Engine limits as data (issue 40): each engine version's documented defaults apply where
the deployment sets no max_batch, and pinned replicas past their capacity are answered as
saturated instead of re-sized."""

from __future__ import annotations

import dataclasses
import math

import pytest

from benchmarks.accuracy import seed_accelerators
from service.core import serving as s
from service.core import serving_search as ss
from service.core.errors import InvalidSpecError
from service.core.plausibility import DEFAULTED_INPUT
from service.core.presets import PRESETS

ACC = seed_accelerators()
H100, A100 = ACC["h100-sxm5-80gb"], ACC["a100-sxm4-80gb"]
L8 = PRESETS["llama3.1-8b"].model
L70 = PRESETS["llama3.1-70b"].model
OFFLINE = s.Traffic(mode=s.TrafficMode.OFFLINE, prompt=s.Lengths.of(mean=128),
                    output=s.Lengths.of(mean=128))


def deployment(**changes: object) -> s.Deployment:
    base = {"accelerator": H100, "gpus_per_replica": 1, "tp": 1, "engine": s.Engine.VLLM}
    return s.Deployment(**{**base, **changes})  # type: ignore[arg-type]


def test_every_named_engine_has_sourced_versions_and_unknown_has_none() -> None:
    for engine in (s.Engine.VLLM, s.Engine.TRTLLM, s.Engine.SGLANG):
        known = s.ENGINE_LIMITS[engine]
        assert known, engine
        assert len({x.version for x in known}) == len(known)
        for limits in known:
            assert "https://" in limits.source, (engine, limits.version)
            assert limits.scheduling_policy
    assert s.ENGINE_LIMITS[s.Engine.UNKNOWN] == ()
    assert s.engine_limits(s.Engine.UNKNOWN, None) is None
    assert s.engine_limits(s.Engine.VLLM, None) == s.ENGINE_LIMITS[s.Engine.VLLM][-1]



def test_vllm_v0_states_its_long_context_chunked_prefill_and_changes_no_figure() -> None:
    """vLLM 0.6 (V0) turns chunked prefill on by itself above a 32,768-token max_model_len
    (vllm/engine/arg_utils.py and vllm/config.py at v0.6.3/v0.6.4: 512 tokens per step,
    decodes included; not on ROCm from v0.6.5, PR #11146); ``assumptions`` says so. A
    ModelSpec carries no context window, so the model does not branch on it: the estimate's
    figures are those of the same limits without the statement."""
    v0 = s.engine_limits(s.Engine.VLLM, "0.6.3")
    assert v0 is not None
    assert (v0.long_context_chunked_prefill_tokens, v0.long_context_min_tokens) == (512, 32768)
    text = v0.describe(s.Engine.VLLM, H100)
    assert "above it" in text
    assert "512 tokens per step" in text
    assert "ROCm" in text
    assert "v0.6.3" in v0.source
    assert "#11146" in v0.source
    latest = s.engine_limits(s.Engine.VLLM, None)
    assert latest is not None
    assert latest.long_context_chunked_prefill_tokens is None
    assert "above it" not in latest.describe(s.Engine.VLLM, H100)
    stated = s.serve(L8, deployment(engine_version="0.6.3"), OFFLINE)
    bare = dataclasses.replace(v0, long_context_chunked_prefill_tokens=None,
                               long_context_min_tokens=None, long_context_note="")
    saved = s.ENGINE_LIMITS
    s.ENGINE_LIMITS = {**saved, s.Engine.VLLM: (bare, *saved[s.Engine.VLLM][1:])}
    try:
        swapped = s.engine_limits(s.Engine.VLLM, "0.6.3")
        assert swapped is not None
        assert swapped.long_context_chunked_prefill_tokens is None
        unstated = s.serve(L8, deployment(engine_version="0.6.3"), OFFLINE)
    finally:
        s.ENGINE_LIMITS = saved
    assert stated.output_tokens_per_s == unstated.output_tokens_per_s
    assert stated.tpot_s == unstated.tpot_s
    assert stated.ttft_s == unstated.ttft_s


def test_an_omitted_max_batch_applies_the_engines_documented_default() -> None:
    """An 8B model on an 80 GB GPU holds thousands of short sequences' KV cache; without a
    max_batch the offline batch used to be all of them (issue 40: 3,586 where the engine
    runs 256). It is now the engine's running-batch limit, named in the assumptions."""
    memory_bound = s.serve(L8, deployment(engine=s.Engine.UNKNOWN), OFFLINE)
    assert memory_bound.batch == memory_bound.memory.max_concurrency > 2048
    for engine, version, accelerator, expected in (
            (s.Engine.VLLM, "0.6", H100, 256),
            (s.Engine.VLLM, "0.10", H100, 1024),   # V1, a GPU of 70 GiB or more
            (s.Engine.VLLM, "0.10", A100, 256),    # V1 keeps the A100 on the small default
            (s.Engine.TRTLLM, "0.18", H100, 2048)):
        d = deployment(engine=engine, engine_version=version, accelerator=accelerator)
        e = s.serve(L8, d, OFFLINE)
        assert e.memory.max_concurrency > expected, (engine, version)
        assert e.batch == expected, (engine, version, accelerator.id)
        assert e.output_tokens_per_s == pytest.approx(e.capacity_requests_per_s * 128)
        limits_line = next(a for a in e.assumptions if a.startswith("engine limits:"))
        assert f"{expected:,}" in limits_line
        assert "max_batch not given" in limits_line
        assert s.engine_limits(engine, version).source in limits_line  # type: ignore[union-attr]
    # SGLang sets no running limit: KV memory alone bounds the batch, and it says so.
    sglang = s.serve(L8, deployment(engine=s.Engine.SGLANG), OFFLINE)
    assert sglang.batch == sglang.memory.max_concurrency
    assert any("max_running_requests unset" in a for a in sglang.assumptions)


def test_a_given_max_batch_wins_over_the_default() -> None:
    e = s.serve(L8, deployment(engine_version="0.6", max_batch=2000), OFFLINE)
    assert e.batch == 2000 < e.memory.max_concurrency
    assert any("max_batch 2000 given" in a for a in e.assumptions)


def test_an_omitted_engine_version_is_the_latest_and_a_coded_defaulted_input() -> None:
    e = s.serve(L8, deployment(), OFFLINE)
    [detail] = [d for d in e.warning_details if d.code == DEFAULTED_INPUT]
    assert detail.field == "deployment.engine_version"
    latest = s.ENGINE_LIMITS[s.Engine.VLLM][-1].version
    assert latest in detail.message
    assert detail.message in e.assumptions
    pinned = s.serve(L8, deployment(engine_version=latest), OFFLINE)
    assert not pinned.warning_details
    assert pinned.batch == e.batch


def test_a_malformed_or_too_old_engine_version_is_refused_naming_the_field_and_the_known_ones(
        ) -> None:
    for version in ("nine", "0.6.3 ", "6", "0.6.x", "0.5.4", "0.6.0rc1", "0.6.0.dev3"):
        with pytest.raises(InvalidSpecError) as error:
            deployment(engine_version=version)
        assert error.value.field == "deployment.engine_version", version
        for limits in s.ENGINE_LIMITS[s.Engine.VLLM]:
            assert limits.version in str(error.value), version
    with pytest.raises(InvalidSpecError) as too_old:
        deployment(engine=s.Engine.TRTLLM, engine_version="0.15.0")
    assert "older than the oldest" in str(too_old.value)
    with pytest.raises(InvalidSpecError):
        deployment(engine=s.Engine.UNKNOWN, engine_version="0.10")


@pytest.mark.parametrize(("engine", "version", "documented"), [
    (s.Engine.VLLM, "0.6", "0.6"),
    (s.Engine.VLLM, "0.6.3", "0.6"),
    (s.Engine.VLLM, "v0.6.2", "0.6"),
    (s.Engine.VLLM, "0.6.4.dev4+gc9fc1608", "0.6"),       # a build after 0.6.3: above 0.6
    (s.Engine.VLLM, "0.9.1", "0.6"),
    (s.Engine.VLLM, "0.10.0rc1", "0.6"),                  # before 0.10.0 (PEP 440)
    (s.Engine.VLLM, "0.10.0", "0.10"),
    (s.Engine.VLLM, "0.10.2", "0.10"),
    (s.Engine.VLLM, "0.19.1", "0.10"),
    (s.Engine.TRTLLM, "0.16.0", "0.16"),
    (s.Engine.TRTLLM, "0.17.1", "0.16"),
    (s.Engine.TRTLLM, "1.0.0", "0.18"),
    (s.Engine.SGLANG, "0.4.3.post2", "0.4"),
    (s.Engine.SGLANG, "0.5.7", "0.4"),
])
def test_a_release_takes_the_newest_documented_defaults_at_or_below_it(
        engine: s.Engine, version: str, documented: str) -> None:
    d = deployment(engine=engine, engine_version=version)
    assert d.limits == s.engine_limits(engine, documented)
    e = s.serve(L8, d, OFFLINE)
    assert e.batch == s.serve(L8, deployment(engine=engine, engine_version=documented),
                              OFFLINE).batch
    mapped = [a for a in e.assumptions if a.startswith("deployment.engine_version")]
    if version == documented:
        assert not mapped
    else:
        [line] = mapped
        assert version in line
        assert f"are {documented}'s" in line
    assert not [x for x in e.warning_details if x.code == DEFAULTED_INPUT]


def test_pep440_ordering_of_development_and_pre_releases() -> None:
    parse = s.EngineRelease.parse
    final = parse("0.8")
    assert final is not None
    assert parse("0.8.0") == final  # trailing zeros are the same release
    for below in ("0.7.4.dev181+gf35f8e22", "0.8.0rc2", "0.8.0.dev5", "0.7.99"):
        version = parse(below)
        assert version is not None
        assert not version.at_or_above(final), below
    for above in ("0.8.0", "0.8.0.post1", "0.8.1.dev3", "0.8.0.post1.dev2", "1.0"):
        version = parse(above)
        assert version is not None
        assert version.at_or_above(final), above
    for malformed in ("", "0", "0.8-beta", "latest", "0.8.0 ", "0..8"):
        assert parse(malformed) is None, malformed


def test_a_pinned_replica_at_twice_its_capacity_reports_saturation() -> None:
    d = deployment(gpus_per_replica=4, tp=4, weight_precision=s.WeightPrecision.FP8,
                   engine=s.Engine.TRTLLM)
    base = s.Traffic(mode=s.TrafficMode.ONLINE, prompt=s.Lengths.of(mean=1024),
                     output=s.Lengths.of(mean=256), requests_per_s=1.0,
                     slo=s.Slo(ttft_p99_s=2.0))
    capacity = s.serve(L70, dataclasses.replace(d, replicas=1), base).capacity_requests_per_s
    traffic = dataclasses.replace(base, requests_per_s=2 * capacity)
    sized = s.serve(L70, d, traffic)
    assert sized.replicas >= 2
    assert not sized.saturated
    e = s.serve(L70, dataclasses.replace(d, replicas=1), traffic)
    assert e.replicas == 1
    assert e.saturated
    assert e.meets_slo is False
    assert e.queue_growth_requests_per_s == pytest.approx(capacity, rel=1e-9)
    [detail] = [x for x in e.warning_details if x.code == s.SATURATED]
    assert detail.field == "deployment.replicas"
    assert f"{capacity:.3g} requests/s" in detail.message
    assert all(math.isfinite(v) for v in (e.ttft_s.p50, e.ttft_s.p99, e.e2e_s.p99,
                                          e.tpot_s.p99, e.batch))
    # Three pinned replicas serve it: not saturated, no queue growth.
    three = s.serve(L70, dataclasses.replace(d, replicas=3), traffic)
    assert not three.saturated
    assert three.queue_growth_requests_per_s == 0.0
    assert not [x for x in three.warning_details if x.code == s.SATURATED]


def test_bulk_rows_apply_the_same_defaults_as_serve() -> None:
    deployments = [deployment(engine=e, engine_version=v, accelerator=a)
                   for e, v, a in ((s.Engine.VLLM, "0.6", H100), (s.Engine.VLLM, None, H100),
                                   (s.Engine.VLLM, None, A100), (s.Engine.TRTLLM, None, H100),
                                   (s.Engine.SGLANG, None, H100), (s.Engine.UNKNOWN, None, H100))]
    columns, ok = ss.columns_of(deployments)
    assert ok.all()
    figures = ss.evaluate(L8, columns, OFFLINE)
    assert figures.batch.tolist() == [s.serve(L8, d, OFFLINE).batch for d in deployments]
    assert figures.batch.tolist()[:4] == [256.0, 1024.0, 256.0, 2048.0]
