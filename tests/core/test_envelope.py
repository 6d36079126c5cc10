"""The calibration's envelope, stack versions, family vocabularies and coded warnings
(issue 37)."""

from __future__ import annotations

import pytest

from benchmarks.accuracy import seed_accelerators, usable_inputs
from benchmarks.envelope import derive
from service.core.attention import kernel_for
from service.core.calibration import DEFAULT_CALIBRATION
from service.core.envelope import (
    REGIONS,
    VersionEra,
    outside_details,
    uses_local_defaults,
    version_era,
)
from service.core.estimate import estimate
from service.core.plausibility import (
    COSTLY_PREFIX,
    LONG_RUN_PREFIX,
    OTHER,
    WARNING_CODES,
    detail_of,
)
from service.core.presets import default_vocab, get_preset
from service.core.specs import (
    AttentionKernel,
    ClusterSpec,
    Framework,
    MlpKind,
    ParallelismPlan,
    TrainingSpec,
)

TT = Framework.TORCHTITAN


def test_the_envelope_is_what_the_rows_cover() -> None:
    """REGIONS is data derived from published-runs.csv: a new row must regenerate it
    (python -m benchmarks.envelope)."""
    assert derive(usable_inputs()) == REGIONS


def fields(**request: object) -> set[str | None]:
    args: dict[str, object] = {"framework": Framework.MEGATRON, "accelerator_id": "h100-sxm5-80gb",
                               "calibrated": True, "num_gpus": 64, "hidden_size": 8192,
                               "seq_len": 8192, "moe": False}
    args.update(request)
    return {d.field for d in outside_details(**args)}  # type: ignore[arg-type]


class TestOutside:
    def test_inside_carries_nothing(self) -> None:
        assert fields() == set()
        # The H200 is H100 silicon; fsdp's runs were on H100s.
        assert fields(framework=Framework.FSDP, accelerator_id="h200-sxm-141gb") == set()

    def test_each_dimension_is_named(self) -> None:
        assert fields(framework=TT, num_gpus=1024) == {"cluster.num_gpus"}
        assert fields(hidden_size=1024) == {"model.hidden_size"}
        assert fields(seq_len=262_144) == {"training.seq_len"}
        assert fields(framework=Framework.FSDP, accelerator_id="tpu-v4") == {
            "cluster.accelerator"}
        assert fields(framework=Framework.FSDP, moe=True) == {"model.num_experts"}
        # An uncalibrated accelerator has its own code; the envelope does not judge it.
        assert fields(accelerator_id="l40s-48gb", calibrated=False) == set()

    def test_the_message_says_how_far(self) -> None:
        (detail,) = outside_details(framework=TT, accelerator_id="h100-sxm5-80gb",
                                    calibrated=True, num_gpus=1024, hidden_size=4096,
                                    seq_len=8192, moe=False)
        assert detail.code == "outside_validated_range"
        assert "1.0 doublings above the 1-512" in detail.message

    def test_a_region_derived_without_a_family_is_used_when_given(self) -> None:
        rows = [r for r in usable_inputs() if r.training.framework == TT
                and not r.source.startswith("ComputeQuote")]
        regions = derive(rows)
        assert fields(framework=TT, num_gpus=1, regions=regions) == {"cluster.num_gpus"}


class TestVersions:
    @pytest.mark.parametrize(("version", "era"), [
        (None, VersionEra.NOT_GIVEN), ("2024-12", VersionEra.PUBLISHED),
        ("2025-12-31", VersionEra.PUBLISHED), ("2026-01", VersionEra.CURRENT),
        ("torch 2.4", VersionEra.PUBLISHED), ("PyTorch-2.9.1", VersionEra.PUBLISHED),
        ("torch2.10", VersionEra.CURRENT), ("v0.1.0", VersionEra.UNPLACED)])
    def test_torchtitan_versions_are_placed(self, version: str | None,
                                            era: VersionEra) -> None:
        assert version_era(TT, version) == era

    def test_other_stacks_keep_their_defaults(self) -> None:
        assert version_era(Framework.MEGATRON, "2021-04") == VersionEra.CURRENT
        assert uses_local_defaults(Framework.MEGATRON, "v0.1.0")

    def test_a_published_torchtitan_takes_fa2_and_the_pooled_band(self) -> None:
        h100 = "h100-sxm5-80gb"
        assert kernel_for(TT, h100) == AttentionKernel.CUDNN
        assert kernel_for(TT, h100, None, "2024-12") == AttentionKernel.FA2
        assert kernel_for(TT, h100, AttentionKernel.CUDNN, "2024-12") == AttentionKernel.CUDNN
        assert kernel_for(Framework.MEGATRON, h100, None, "2024-12") == AttentionKernel.CUDNN
        local = DEFAULT_CALIBRATION.band_for(framework=TT, moe=False, accelerator_id=h100)
        old = DEFAULT_CALIBRATION.band_for(framework=TT, moe=False, accelerator_id=h100,
                                           framework_version="2024-12")
        assert local.regime == "torchtitan"
        assert old.regime == "unknown"
        assert old.high_fraction - old.low_fraction > local.high_fraction - local.low_fraction


class TestVocabulary:
    @pytest.mark.parametrize(("name", "mlp", "heads", "kv", "size"), [
        ("custom", MlpKind.GELU, 16, 16, 50_257),        # GPT-2/3, Megatron GPT
        ("gpt3-13b", MlpKind.SWIGLU, 40, 40, 50_257),
        ("my-llama2-7b", MlpKind.SWIGLU, 32, 8, 32_000),
        ("custom", MlpKind.SWIGLU, 32, 32, 32_000),      # no GQA: the Llama 1/2 era
        ("custom", MlpKind.SWIGLU, 32, 8, 128_256),      # GQA: Llama 3's
        ("llama3-ish", MlpKind.SWIGLU, 32, 32, 128_256),
        ("gpt-oss-like", MlpKind.SWIGLU, 64, 8, 128_256)])
    def test_the_family_or_era_sets_it(self, name: str, mlp: MlpKind, heads: int, kv: int,
                                       size: int) -> None:
        assert default_vocab(name, mlp, heads, kv).size == size


class TestCodes:
    def test_every_sentence_has_a_code(self) -> None:
        samples = {
            f"{LONG_RUN_PREFIX}: training takes 9 days": "impractical_wall_clock",
            f"{COSTLY_PREFIX}: 12× the cheapest": "impractical_cost",
            "does not fit: needs 90.0 GiB per GPU, h100 has 80.0 GiB": "does_not_fit",
            "fits at the edge: 78.0 of 80.0 GiB per GPU": "fits_at_edge",
            "vocab_size not given: assumed 32,000 (x)": "defaulted_input",
            "predicted MFU 85% is above what published runs reach": "high_mfu",
            "l4-24gb has no published training runs in the calibration set; its efficiency":
                "uncalibrated_accelerator",
            "81 layers do not divide evenly over 4 pipeline stages; the slowest":
                "uneven_pipeline",
            "tp (16) spans more than one node (8 GPUs per node): tensor": "tp_spans_nodes",
            "sequence parallelism is off: activations outside TP regions replicate":
                "sequence_parallel_off",
            "interleaved pipelining usually needs the micro-batch count (3) to be":
                "interleaving_micro_batches",
        }
        for message, code in samples.items():
            assert detail_of(message).code == code, message
            assert code in WARNING_CODES
        assert detail_of("something new").code == OTHER

    def test_the_estimate_codes_its_sentences_and_its_envelope(self) -> None:
        preset = get_preset("llama3.1-8b").model
        accelerator = seed_accelerators()["h100-sxm5-80gb"]
        cluster = ClusterSpec(accelerator=accelerator, num_gpus=8, gpus_per_node=8)
        plan = ParallelismPlan(tp=1, pp=1, dp=8)
        inside = estimate(preset, cluster, plan, TrainingSpec(
            seq_len=4096, global_batch_seqs=64, tokens=1e10, framework=Framework.MEGATRON))
        assert [d.message for d in inside.warning_details[:len(inside.warnings)]] == list(
            inside.warnings)
        assert not [d for d in inside.warning_details if d.code == "outside_validated_range"]
        far = estimate(preset, cluster, plan, TrainingSpec(
            seq_len=1024, global_batch_seqs=64, tokens=1e10, framework=Framework.MEGATRON))
        assert ("outside_validated_range", "training.seq_len") in {
            (d.code, d.field) for d in far.warning_details}
