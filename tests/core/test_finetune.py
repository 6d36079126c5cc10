"""Fine-tuning methods in the estimate (issue 43): full fine-tuning, LoRA and QLoRA."""

from __future__ import annotations

import pytest

from service.core.errors import InvalidSpecError
from service.core.estimate import estimate
from service.core.memory import FROZEN_EMBEDDING_BYTES_PER_PARAM, state_layout
from service.core.params import count_parameters, trainable_params
from service.core.specs import (
    BasePrecision,
    Framework,
    LoraSpec,
    LoraTarget,
    Precision,
    RecomputeMode,
    TrainingMethod,
    dataset_tokens,
)
from tests.factories import cluster, model, plan, training


def single_gpu_plan(**overrides: object) -> object:
    values: dict[str, object] = {"tp": 1, "pp": 1, "dp": 1, "cp": 1, "vp": 1,
                                 "recompute": RecomputeMode.FULL, "micro_batch": 1}
    values.update(overrides)
    return plan(**values)


class TestTrainableParameters:
    def test_lora_rank_16_on_all_linear_layers_of_llama31_8b(self) -> None:
        # Llama 3.1 8B (Dubey et al. 2024, Table 3): h 4096, 32 heads of 128, 8 KV heads,
        # FFN 14336, 32 layers. A rank-r adapter of a d_in x d_out matrix has r(d_in + d_out).
        h, kv, f, layers, r = 4096, 8 * 128, 14336, 32, 16
        shapes = [(h, h), (h, kv), (h, kv), (h, h), (h, f), (h, f), (f, h)]
        expected = layers * sum(r * (d_in + d_out) for d_in, d_out in shapes)
        m = model("llama3.1-8b")
        t = training(method=TrainingMethod.LORA, lora=LoraSpec(rank=16))
        assert trainable_params(m, count_parameters(m), t) == expected == 41_943_040

    def test_pretrain_and_full_finetune_train_every_parameter(self) -> None:
        m = model("llama3.1-8b")
        counts = count_parameters(m)
        for method in (TrainingMethod.PRETRAIN, TrainingMethod.FULL_FINETUNE):
            assert trainable_params(m, counts, training(method=method)) == counts.total

    def test_fewer_target_modules_fewer_parameters(self) -> None:
        m = model("llama3.1-8b")
        qv = LoraSpec(rank=8, target_modules=frozenset({LoraTarget.Q, LoraTarget.V}))
        t = training(method=TrainingMethod.LORA, lora=qv)
        assert trainable_params(m, count_parameters(m), t) == 32 * 8 * (
            (4096 + 4096) + (4096 + 1024))


class TestFrozenBaseMemory:
    @pytest.mark.parametrize(("precision", "bytes_per_param"), [
        (BasePrecision.BF16, 2.0), (BasePrecision.FP8, 1.0),
        # QLoRA section 3: 4-bit NF4 plus 0.127 bits of double-quantised constants.
        (BasePrecision.NF4, 0.5 + 0.127 / 8),
    ])
    def test_weights_are_the_base_at_its_precision_plus_the_adapters(
        self, precision: BasePrecision, bytes_per_param: float,
    ) -> None:
        m = model("llama3.1-8b")
        counts = count_parameters(m)
        method = TrainingMethod.QLORA if precision == BasePrecision.NF4 else TrainingMethod.LORA
        t = training(seq_len=2048, global_batch_seqs=1, tokens=1e7, method=method,
                     lora=LoraSpec(base_precision=precision), framework=Framework.MEGATRON)
        e = estimate(m, cluster(1, gpus_per_node=1), single_gpu_plan(), t)
        layers = m.num_layers * counts.dense_layer
        embedding_and_head = counts.embedding + counts.output_head
        adapters = e.trainable_params
        layout = state_layout(t)
        expected_weights = (bytes_per_param * layers
                            + FROZEN_EMBEDDING_BYTES_PER_PARAM * embedding_and_head
                            + layout.weight_bytes_per_param * adapters)
        assert e.memory.weights_bytes == pytest.approx(expected_weights, rel=1e-12)
        # No gradients or optimizer state for the frozen base: only the adapters'.
        assert e.memory.gradients_bytes == pytest.approx(
            layout.grad_bytes_per_param * adapters, rel=1e-12)
        assert e.memory.optimizer_bytes == pytest.approx(
            layout.optimizer_bytes_per_param * adapters, rel=1e-12)

    def test_zero_3_shards_the_frozen_base_as_fsdp_does(self) -> None:
        """ZeRO-1/2 shard the adapters' states only; ZeRO-3 (FSDP, which wraps the frozen
        base in torchtune's distributed LoRA recipes) shards the base's weights too, and
        gathers them every micro-batch. Measured: keeping the base whole put torchtune's
        Llama 3.1 70B LoRA on 8 A100 at 142 GiB against 27.6 GiB published
        (benchmarks.finetune_validation)."""
        m = model("llama3.1-8b")
        t = training(seq_len=2048, global_batch_seqs=8, tokens=1e7, method=TrainingMethod.LORA)
        one = estimate(m, cluster(8), single_gpu_plan(dp=8, zero_stage=0), t)
        two = estimate(m, cluster(8), single_gpu_plan(dp=8, zero_stage=2), t)
        sharded = estimate(m, cluster(8), single_gpu_plan(dp=8, zero_stage=3), t)
        assert sharded.memory.optimizer_bytes == pytest.approx(one.memory.optimizer_bytes / 8)
        assert two.memory.weights_bytes == pytest.approx(one.memory.weights_bytes)
        assert sharded.memory.weights_bytes == pytest.approx(one.memory.weights_bytes / 8)
        # Every micro-batch gathers the frozen base (forward and backward): ZeRO-3 exposes
        # more data-parallel time than ZeRO-2, which moves only the adapters' gradients.
        assert (sharded.throughput.step.dp_comm_exposed_s
                > 2 * two.throughput.step.dp_comm_exposed_s)

    def test_adapter_activations_are_counted(self) -> None:
        m = model("llama3.1-8b")
        base = training(seq_len=2048, global_batch_seqs=1, tokens=1e7,
                        method=TrainingMethod.LORA, lora=LoraSpec(rank=8))
        wide = training(seq_len=2048, global_batch_seqs=1, tokens=1e7,
                        method=TrainingMethod.LORA, lora=LoraSpec(rank=64))
        p = single_gpu_plan(recompute=RecomputeMode.NONE)
        a8 = estimate(m, cluster(1, gpus_per_node=1), p, base).memory.activations_bytes
        a64 = estimate(m, cluster(1, gpus_per_node=1), p, wide).memory.activations_bytes
        # 2 bytes x r per adapted matrix (7) per token per layer.
        assert a64 - a8 == pytest.approx(2.0 * (64 - 8) * 7 * 2048 * 32)


class TestFinetuneFlops:
    def test_lora_is_about_four_sixths_of_pretraining_plus_the_adapters(self) -> None:
        m = model("llama3.1-8b")
        c, p = cluster(1, gpus_per_node=1), single_gpu_plan()
        pre = estimate(m, c, p, training(seq_len=2048, global_batch_seqs=1, tokens=1e7))
        lora = estimate(m, c, p, training(seq_len=2048, global_batch_seqs=1, tokens=1e7,
                                          method=TrainingMethod.LORA))
        f = pre.flops
        matmul = f.layer_matmul_flops + f.logits_flops
        expected = (2.0 * matmul + 3.0 * f.attention_core_full_flops
                    + 6.0 * lora.trainable_params)
        assert lora.flops.model_training_flops == pytest.approx(expected, rel=1e-12)
        ratio = lora.flops.model_training_flops / pre.flops.model_training_flops
        assert 4 / 6 < ratio < 0.72
        # MFU counts the FLOPs actually done: at the same step time it would be the ratio.
        assert lora.total_training_flops == pytest.approx(
            lora.flops.model_training_flops * 1e7)

    def test_full_finetune_is_pretraining(self) -> None:
        m = model("llama3.1-8b")
        c, p = cluster(1, gpus_per_node=1), single_gpu_plan()
        pre = estimate(m, c, p, training(seq_len=2048, global_batch_seqs=1, tokens=1e7))
        full = estimate(m, c, p, training(seq_len=2048, global_batch_seqs=1, tokens=1e7,
                                          method=TrainingMethod.FULL_FINETUNE))
        assert full.memory.peak_bytes == pre.memory.peak_bytes
        assert full.throughput.step.step_s == pre.throughput.step.step_s
        assert any("full_finetune" in note for note in full.assumptions)

    def test_qlora_pays_for_dequantisation(self) -> None:
        m = model("llama3.1-8b")
        c, p = cluster(1, gpus_per_node=1), single_gpu_plan()
        common = {"seq_len": 2048, "global_batch_seqs": 1, "tokens": 1e7}
        lora = estimate(m, c, p, training(method=TrainingMethod.LORA, **common))
        qlora = estimate(m, c, p, training(method=TrainingMethod.QLORA, **common))
        assert qlora.flops.model_training_flops == lora.flops.model_training_flops
        assert qlora.throughput.step.compute_s > lora.throughput.step.compute_s


BEFORE_ISSUE_43 = {
    # (peak bytes, step s, MFU) of these layouts computed on commit 9e8a91e, before methods;
    # step and MFU recomputed at calibration 2026-12-02.2 (the refit after the A100 NVLink fix).
    "70b-megatron-64": (70385165015.7568, 15.154353050081149, 0.5262883093149237),
    "8b-fsdp-8-full": (27417614228.1728, 4.4437112180378335, 0.3837650070839712),
    "8b-1gpu-full": (132850030693.888, 1.1100885220917316, 0.3600194310474606),
    "70b-fp8-selective": (54130758906.60491, 10.094418150030037, 0.394848352405544),
}


def _before_cases() -> dict[str, tuple[object, object, object, object]]:
    return {
        "70b-megatron-64": (model("llama3.1-70b"), cluster(64),
                            plan(sequence_parallel=True, zero_stage=1),
                            training(framework=Framework.MEGATRON)),
        "8b-fsdp-8-full": (model("llama3.1-8b"), cluster(8),
                           single_gpu_plan(dp=8, zero_stage=3, micro_batch=1),
                           training(seq_len=4096, global_batch_seqs=64,
                                    framework=Framework.TORCHTITAN)),
        "8b-1gpu-full": (model("llama3.1-8b"), cluster(1, gpus_per_node=1), single_gpu_plan(),
                         training(seq_len=2048, global_batch_seqs=4, framework=Framework.FSDP)),
        "70b-fp8-selective": (model("llama3.1-70b"), cluster(64),
                              plan(sequence_parallel=True, zero_stage=1,
                                   recompute=RecomputeMode.SELECTIVE),
                              training(precision=Precision.FP8, framework=Framework.MEGATRON)),
    }


class TestPretrainUnchanged:
    @pytest.mark.parametrize("name", sorted(BEFORE_ISSUE_43))
    def test_method_absent_gives_the_figures_of_before(self, name: str) -> None:
        m, c, p, t = _before_cases()[name]
        e = estimate(m, c, p, t)  # type: ignore[arg-type]
        peak, step, mfu = BEFORE_ISSUE_43[name]
        assert float(e.memory.peak_bytes) == peak
        assert float(e.throughput.step.step_s) == step
        assert float(e.throughput.mfu_fraction) == mfu
        assert e.trainable_params == e.params.total


class TestQloraHeadline:
    """QLoRA (Dettmers et al. 2023, arXiv 2305.14314, abstract and section 5): a 65B model
    fine-tuned on a single 48 GB GPU; Guanaco trained at sequence lengths up to 512."""

    def _estimate(self, method: TrainingMethod) -> object:
        t = training(seq_len=512, global_batch_seqs=16, tokens=1e8, method=method)
        return estimate(model("llama1-65b"), cluster(1, "l40s-48gb", 1), single_gpu_plan(), t)

    def test_qlora_65b_fits_on_one_48gb_gpu(self) -> None:
        e = self._estimate(TrainingMethod.QLORA)
        assert e.memory.fits  # type: ignore[attr-defined]
        # The 4-bit base of 65.3B parameters alone is about 33.7 GB (0.516 B each); the rest
        # (bf16 embedding and head, adapters with Adam, activations, overhead) is a few GB.
        assert 33e9 < e.memory.peak_bytes < 45e9  # type: ignore[attr-defined]
        assert any(d.code == "outside_validated_range" and d.field == "training.method"
                   for d in e.warning_details)  # type: ignore[attr-defined]
        assert any("paged optimizer" in n for n in e.assumptions)  # type: ignore[attr-defined]

    def test_full_finetune_65b_does_not_fit(self) -> None:
        e = self._estimate(TrainingMethod.FULL_FINETUNE)
        assert not e.memory.fits  # type: ignore[attr-defined]
        assert e.memory.peak_bytes > 10 * e.memory.capacity_bytes  # type: ignore[attr-defined]

    def test_bf16_lora_65b_does_not_fit_either(self) -> None:
        assert not self._estimate(TrainingMethod.LORA).memory.fits  # type: ignore[attr-defined]


class TestContract:
    def test_rank_above_the_narrowest_targeted_width_names_the_field(self) -> None:
        t = training(method=TrainingMethod.LORA, lora=LoraSpec(rank=2048))
        with pytest.raises(InvalidSpecError) as err:
            estimate(model("llama3.1-8b"), cluster(1, gpus_per_node=1), single_gpu_plan(), t)
        assert err.value.field == "training.lora.rank"
        assert "1024" in str(err.value)  # k and v are 4096 x 1024

    def test_rank_within_the_targeted_widths_is_accepted(self) -> None:
        q_only = LoraSpec(rank=2048, target_modules=frozenset({LoraTarget.Q}))
        t = training(seq_len=2048, global_batch_seqs=1, tokens=1e7, method=TrainingMethod.LORA,
                     lora=q_only)
        e = estimate(model("llama3.1-8b"), cluster(1, gpus_per_node=1), single_gpu_plan(), t)
        assert e.trainable_params == 32 * 2048 * 8192

    @pytest.mark.parametrize("method", [TrainingMethod.PRETRAIN, TrainingMethod.FULL_FINETUNE])
    def test_nf4_needs_adapters(self, method: TrainingMethod) -> None:
        with pytest.raises(InvalidSpecError) as err:
            training(method=method, lora=LoraSpec(base_precision=BasePrecision.NF4))
        assert err.value.field in ("training.lora.base_precision", "training.lora")

    def test_lora_block_without_an_adapter_method_names_the_field(self) -> None:
        with pytest.raises(InvalidSpecError) as err:
            training(method=TrainingMethod.FULL_FINETUNE, lora=LoraSpec())
        assert err.value.field == "training.lora"

    def test_moe_models_are_refused_for_now(self) -> None:
        t = training(method=TrainingMethod.LORA)
        with pytest.raises(InvalidSpecError) as err:
            estimate(model("mixtral-8x7b"), cluster(8), single_gpu_plan(dp=8), t)
        assert err.value.field == "training.method"

    def test_base_precision_defaults_follow_the_method(self) -> None:
        assert training(method=TrainingMethod.QLORA).base_precision == BasePrecision.NF4
        assert training(method=TrainingMethod.LORA).base_precision == BasePrecision.BF16


class TestDatasetSizing:
    def test_packed_examples_are_their_tokens(self) -> None:
        assert dataset_tokens(examples=1000, mean_example_tokens=300.5, seq_len=2048,
                              packing=True) == 300_500.0

    def test_unpacked_examples_are_padded_to_the_sequence(self) -> None:
        assert dataset_tokens(examples=1000, mean_example_tokens=300.5, seq_len=2048,
                              packing=False) == 2_048_000.0

    def test_padding_waste_is_named(self) -> None:
        t = training(seq_len=2048, global_batch_seqs=1, tokens=2_048_000.0, examples=1000,
                     mean_example_tokens=512.0, packing=False)
        e = estimate(model("llama3.1-8b"), cluster(1, gpus_per_node=1), single_gpu_plan(), t)
        assert any("75% of the tokens processed are padding" in n for n in e.assumptions)


def test_the_assumptions_say_whether_the_frozen_base_is_sharded() -> None:
    """The sentence follows the memory model: whole on every rank under ZeRO-0/1/2, sharded
    and gathered under ZeRO-3 (decision 395)."""
    m = model("llama3.1-8b")
    t = training(seq_len=2048, global_batch_seqs=8, tokens=1e7, method=TrainingMethod.LORA)
    two = estimate(m, cluster(8), single_gpu_plan(dp=8, zero_stage=2), t).assumptions
    three = estimate(m, cluster(8), single_gpu_plan(dp=8, zero_stage=3), t).assumptions
    assert any("the frozen base is whole on every rank" in a for a in two)
    assert not any("whole on every rank" in a for a in three)
    assert any("ZeRO-3 shards the adapters' states and the frozen base" in a for a in three)
