"""QLoRA memory terms from the bitsandbytes/Lightning sources (issue 43): single quantisation,
a quantised output head, and the inputs bitsandbytes < 0.43.2 keeps for every 4-bit matmul."""

from __future__ import annotations

import dataclasses

import pytest

from service.core.estimate import Estimate, estimate
from service.core.memory import ACTIVATION_BYTES
from service.core.params import count_parameters
from service.core.specs import (
    BasePrecision,
    Framework,
    LoraSpec,
    LoraTarget,
    ParallelismPlan,
    RecomputeMode,
    TrainingMethod,
    TrainingSpec,
)
from tests.factories import cluster, model, plan, training

QV = frozenset({LoraTarget.Q, LoraTarget.V})


def _plan(recompute: RecomputeMode = RecomputeMode.NONE) -> ParallelismPlan:
    return plan(tp=1, pp=1, dp=1, cp=1, vp=1, recompute=recompute, micro_batch=1)


def _qlora(seq_len: int = 1024, *, double_quant: bool = True, quantize_head: bool = False,
           keeps_matmul_inputs: bool = False, dequant_cast: bool = False) -> TrainingSpec:
    lora = LoraSpec(rank=8, target_modules=QV, double_quant=double_quant,
                    quantize_head=quantize_head, keeps_matmul_inputs=keeps_matmul_inputs,
                    dequant_cast=dequant_cast)
    return training(seq_len=seq_len, global_batch_seqs=1, tokens=1e7,
                    method=TrainingMethod.QLORA, framework=Framework.FSDP, lora=lora)


def _estimate(t: TrainingSpec, recompute: RecomputeMode = RecomputeMode.NONE) -> Estimate:
    return estimate(model("llama2-7b"), cluster(1, gpus_per_node=1), _plan(recompute), t)


def test_without_double_quantisation_the_constants_are_one_fp32_per_64_weights() -> None:
    # QLoRA section 3: fp32 absmax per block of 64 = 32/64 bits = 1/16 byte per weight, and
    # double quantisation brings it to 8/64 + 32/(64*256) = 0.127 bits (as the paper rounds).
    m = model("llama2-7b")
    layers = m.num_layers * count_parameters(m).dense_layer
    dq = _estimate(_qlora()).memory.weights_bytes
    single = _estimate(_qlora(double_quant=False)).memory.weights_bytes
    expected = layers * (32 / 64 - 0.127) / 8
    assert single - dq == pytest.approx(expected, rel=1e-9)
    assert 0.3e9 < expected < 0.4e9  # 6.5B layer weights x 0.0466 B


def test_a_quantised_head_is_stored_at_nf4_and_dequantised_whole() -> None:
    m = model("llama2-7b")
    head = count_parameters(m).output_head
    assert head == 32_000 * 4096
    kept = _estimate(_qlora()).memory
    quantised = _estimate(_qlora(quantize_head=True)).memory
    nf4 = 0.5 + 0.127 / 8
    assert kept.weights_bytes - quantised.weights_bytes == pytest.approx(
        head * (2.0 - nf4), rel=1e-9)
    # The dequantised bf16 copy is now the head (V x h), not the largest layer matrix
    # (h x f = 4096 x 11008): the difference lands in ``other``.
    assert quantised.other_bytes - kept.other_bytes == pytest.approx(
        ACTIVATION_BYTES * (head - 4096 * 11008), rel=1e-9)


def test_the_head_stays_bf16_unless_asked_and_on_bf16_bases() -> None:
    lora = training(seq_len=1024, global_batch_seqs=1, tokens=1e7, method=TrainingMethod.LORA,
                    framework=Framework.FSDP,
                    lora=LoraSpec(rank=8, target_modules=QV, quantize_head=True))
    plain = dataclasses.replace(lora, lora=LoraSpec(rank=8, target_modules=QV))
    assert (_estimate(lora).memory.weights_bytes
            == pytest.approx(_estimate(plain).memory.weights_bytes, rel=1e-12))


def test_bitsandbytes_before_0_43_2_keeps_each_4bit_matmuls_input() -> None:
    # Per token and layer: two norm outputs (2h each), the attention output (a x d_v = h)
    # and the MLP's down-projection input (f), in bf16: Llama 2 7B, h 4096, f 11008.
    h, f, layers, tokens = 4096, 11008, 32, 1024
    per_token_layer = 2.0 * (2 * h + h + f)
    plain = _estimate(_qlora(seq_len=tokens)).memory
    kept = _estimate(_qlora(seq_len=tokens, keeps_matmul_inputs=True)).memory
    assert kept.activations_bytes - plain.activations_bytes == pytest.approx(
        per_token_layer * tokens * layers, rel=1e-9)


def test_with_full_recompute_only_the_recomputed_layer_keeps_them() -> None:
    h, f, tokens = 4096, 11008, 1024
    full = RecomputeMode.FULL
    plain = _estimate(_qlora(seq_len=tokens), full).memory
    kept = _estimate(_qlora(seq_len=tokens, keeps_matmul_inputs=True), full).memory
    delta = kept.activations_bytes - plain.activations_bytes
    # At most one layer's worth (the recomputed layer's working set), never all 32.
    assert 0.0 <= delta <= 2.0 * (3 * h + f) * tokens * (1 + 1e-9)


def test_inputs_are_kept_only_on_an_nf4_base() -> None:
    bf16 = training(seq_len=1024, global_batch_seqs=1, tokens=1e7, method=TrainingMethod.LORA,
                    framework=Framework.FSDP,
                    lora=LoraSpec(rank=8, target_modules=QV, base_precision=BasePrecision.BF16,
                                  keeps_matmul_inputs=True))
    plain = dataclasses.replace(bf16, lora=LoraSpec(rank=8, target_modules=QV,
                                                    base_precision=BasePrecision.BF16))
    assert (_estimate(bf16).memory.activations_bytes
            == pytest.approx(_estimate(plain).memory.activations_bytes, rel=1e-12))


def test_a_quantised_head_adds_its_dequantisation_traffic_to_the_step() -> None:
    plain = _estimate(_qlora()).throughput.step.step_s
    quantised = _estimate(_qlora(quantize_head=True)).throughput.step.step_s
    assert quantised > plain


def test_an_fp16_quant_state_cast_to_bf16_holds_two_copies_of_the_dequantised_matrix() -> None:
    # Lightning quantises weight.to(torch.half): dequantize_4bit writes fp16 and MatMul4Bit
    # casts to bf16, both live at the cast. The largest matrix of Llama 2 7B is h x f.
    plain = _estimate(_qlora()).memory.other_bytes
    cast = _estimate(_qlora(dequant_cast=True)).memory.other_bytes
    assert cast - plain == pytest.approx(2.0 * 4096 * 11008, rel=1e-9)
    head = _estimate(_qlora(quantize_head=True, dequant_cast=True)).memory.other_bytes
    head_plain = _estimate(_qlora(quantize_head=True)).memory.other_bytes
    assert head - head_plain == pytest.approx(2.0 * 32_000 * 4096, rel=1e-9)
