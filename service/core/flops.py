"""FLOPs per token (docs/model.md section 2).

Forward FLOPs per token are 2 x (matmul parameters touched per token) (Kaplan et al. 2020,
section 2.1), plus attention scores and the weighted sum of values, plus the logits. Training
is forward + backward = 3 x forward (the backward pass computes gradients for both inputs and
weights: Kaplan et al. 2020; Narayanan et al. 2021 eq. 2).

Attention convention: *model* FLOPs count full (non-causal) attention,
4*s*(a*d_qk + a*d_v)/2 per token per layer = 4*s*h for standard heads, as PaLM (Chowdhery et
al. 2022, appendix B) and Megatron-LM (Narayanan et al. 2021, eq. 3) do, so MFU is comparable
with published figures. *Executed* attention FLOPs are half of that for causal masks, because
FlashAttention skips fully masked blocks (Dao 2023, section 3.1); the timing model uses those.

Recomputation adds hardware FLOPs: full recomputation repeats the layer forward pass (8*N*D
instead of 6*N*D); selective recomputation repeats only the attention core (Korthikanti et
al. 2022, section 5).

Adapters on a frozen base (LoRA, Hu et al. 2021, arXiv 2106.09685, section 4.2; QLoRA,
Dettmers et al. 2023): the backward of a linear layer is two matmuls, the input gradient
dX = dY W^T and the weight gradient dW = X^T dY, each as costly as the forward (Narayanan et
al. 2021, section 3.1: "the backward pass ... two GEMMs"). A frozen layer computes only the
first, so its training cost is 2 x forward (4*N*D instead of 6*N*D); the attention core has
no weights and keeps its 3 x; the adapters themselves train fully, 6*r*(d_in + d_out) FLOPs
per token per adapted matrix. For a frozen base the *model* FLOPs (the MFU numerator) are
these FLOPs actually done (the 4N rule plus the adapters), not 6N.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.params import ParameterCount, adapter_params_per_layer
from service.core.specs import ModelSpec, RecomputeMode, TrainingSpec

FORWARD_BACKWARD_MULTIPLIER = 3.0
"""Forward + backward = 3 x forward (Kaplan et al. 2020; Narayanan et al. 2021 eq. 2)."""
FROZEN_FORWARD_BACKWARD_MULTIPLIER = 2.0
"""Forward + input-gradient backward = 2 x forward for a frozen matmul: no weight gradient
(LoRA, Hu et al. 2021, section 4.2; backward = input-grad + weight-grad GEMMs)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenFlops:
    """Forward FLOPs per token, split by where they run. All ``_flops`` are per token."""

    layer_matmul_flops: float
    """Linear layers of every transformer layer (attention projections, MLPs, router)."""
    attention_core_full_flops: float
    """QK^T and AV for all layers at full (non-causal) attention: the *model* convention."""
    logits_flops: float
    """Output head, 2*V*h."""
    frozen_base: bool = False
    """The layers' and the head's weights are frozen (lora, qlora): no weight gradients."""
    adapter_forward_flops: float = 0.0
    """Forward FLOPs of the LoRA adapters, 2*r*(d_in + d_out) per adapted matrix, all layers."""

    @property
    def model_forward_flops(self) -> float:
        return self.layer_matmul_flops + self.attention_core_full_flops + self.logits_flops

    @property
    def model_training_flops(self) -> float:
        """Model FLOPs per trained token (MFU numerator), no recomputation: 3 x forward; on a
        frozen base 2 x the frozen matmuls + 3 x the attention core and the adapters."""
        if not self.frozen_base:
            return FORWARD_BACKWARD_MULTIPLIER * self.model_forward_flops
        return (FROZEN_FORWARD_BACKWARD_MULTIPLIER * (self.layer_matmul_flops
                                                      + self.logits_flops)
                + FORWARD_BACKWARD_MULTIPLIER * (self.attention_core_full_flops
                                                 + self.adapter_forward_flops))

    def hardware_training_flops(self, recompute: RecomputeMode) -> float:
        """Model FLOPs plus the recomputed forward work (HFU numerator)."""
        return self.model_training_flops + self.recompute_flops(recompute)

    def recompute_flops(self, recompute: RecomputeMode) -> float:
        if recompute == RecomputeMode.FULL:
            if self.frozen_base:
                return (self.layer_matmul_flops + self.attention_core_full_flops
                        + self.adapter_forward_flops)
            return self.layer_matmul_flops + self.attention_core_full_flops
        if recompute == RecomputeMode.SELECTIVE:
            return self.attention_core_full_flops
        return 0.0


def attention_core_flops_per_token_layer(model: ModelSpec, seq_len: int) -> float:
    """QK^T (2*s*a*d_qk) plus AV (2*s*a*d_v) per token and layer, full attention."""
    a = model.num_heads
    return 2.0 * seq_len * a * (model.attention_head_dim + model.value_head_dim)


def token_flops(model: ModelSpec, counts: ParameterCount, seq_len: int,
                training: TrainingSpec | None = None) -> TokenFlops:
    """Forward FLOPs per token of ``model`` at ``seq_len``.

    Matmul parameters exclude norms and biases' adds are negligible; MoE layers count
    ``experts_per_token`` routed experts, the shared experts and the router (2*h*E).
    """
    dense_matmul = counts.attention_per_layer + counts.dense_mlp_per_layer
    moe_matmul = (
        counts.attention_per_layer
        + counts.experts_per_token * counts.expert_mlp
        + counts.shared_experts_per_layer
        + counts.router_per_layer
    )
    layer_matmul = 2.0 * (
        counts.num_dense_layers * dense_matmul + counts.num_moe_layers * moe_matmul
    )
    attention = model.num_layers * attention_core_flops_per_token_layer(model, seq_len)
    logits = 2.0 * model.vocab_size * model.hidden_size
    if training is not None and training.adapters:
        return TokenFlops(
            layer_matmul_flops=layer_matmul,
            attention_core_full_flops=attention,
            logits_flops=logits,
            frozen_base=True,
            adapter_forward_flops=2.0 * model.num_layers * adapter_params_per_layer(
                model, training.lora_spec),
        )
    return TokenFlops(
        layer_matmul_flops=layer_matmul,
        attention_core_full_flops=attention,
        logits_flops=logits,
    )
