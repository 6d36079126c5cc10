"""Exact parameter counts of a decoder-only transformer (docs/model.md section 1).

Per layer (Vaswani et al. 2017; Shazeer 2020 for gated MLPs; Ainslie et al. 2023 for GQA):
- attention: Q and O are h x (a*d_h) each; K and V are h x (g*d_h) each, with d_h = h/a
  unless the model sets its own head width;
- MLA attention (DeepSeek-V2, arXiv 2405.04434 eq. 9-12): down-projections h x r_q and
  h x (r_kv + d_rope), up-projections r_q x a(d_nope + d_rope) and r_kv x a(d_nope + d_v), output
  a*d_v x h, plus the two latent RMSNorms;
- MLP: 2*h*f for GELU or squared ReLU, 3*h*f for SwiGLU;
- MoE (Fedus et al. 2022; DeepSeek-V3 arXiv 2412.19437): routed experts x expert MLP, shared
  experts x expert MLP, and an h x E router;
- two norms of h each (RMSNorm; LayerNorm also has a bias, counted when ``linear_bias``).
Embedding V*h, output head V*h unless tied, a final norm, and an optional learned position table.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.specs import LoraSpec, MlpKind, ModelSpec, TrainingSpec, lora_matrix_shapes


@dataclass(frozen=True, slots=True, kw_only=True)
class ParameterCount:
    """Parameter counts by part. ``*_per_layer`` figures are for one layer of that kind."""

    embedding: int
    output_head: int
    final_norm: int
    attention_per_layer: int
    norms_per_layer: int
    dense_mlp_per_layer: int
    expert_mlp: int
    routed_experts_per_layer: int
    shared_experts_per_layer: int
    router_per_layer: int
    num_dense_layers: int
    num_moe_layers: int
    experts_per_token: int

    @property
    def dense_layer(self) -> int:
        return self.attention_per_layer + self.norms_per_layer + self.dense_mlp_per_layer

    @property
    def moe_layer(self) -> int:
        return (
            self.attention_per_layer
            + self.norms_per_layer
            + self.routed_experts_per_layer
            + self.shared_experts_per_layer
            + self.router_per_layer
        )

    @property
    def moe_layer_active(self) -> int:
        return (
            self.attention_per_layer
            + self.norms_per_layer
            + self.experts_per_token * self.expert_mlp
            + self.shared_experts_per_layer
            + self.router_per_layer
        )

    @property
    def total(self) -> int:
        return (
            self.embedding
            + self.output_head
            + self.final_norm
            + self.num_dense_layers * self.dense_layer
            + self.num_moe_layers * self.moe_layer
        )

    @property
    def active(self) -> int:
        """Parameters touched per token (routed experts counted at experts_per_token)."""
        return (
            self.embedding
            + self.output_head
            + self.final_norm
            + self.num_dense_layers * self.dense_layer
            + self.num_moe_layers * self.moe_layer_active
        )

    @property
    def routed_expert_total(self) -> int:
        return self.num_moe_layers * self.routed_experts_per_layer


def mlp_params(hidden_size: int, ffn_hidden_size: int, kind: MlpKind, *, bias: bool) -> int:
    """Weights (and biases) of one MLP: 3*h*f for SwiGLU, 2*h*f otherwise."""
    matrices = 3 if kind == MlpKind.SWIGLU else 2
    weights = matrices * hidden_size * ffn_hidden_size
    biases = ((matrices - 1) * ffn_hidden_size + hidden_size) if bias else 0
    return weights + biases


def attention_params(model: ModelSpec) -> int:
    """Projection weights (and biases) of one attention block, GQA or MLA."""
    h, a = model.hidden_size, model.num_heads
    if model.mla is not None:
        mla = model.mla
        qk_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        q = h * mla.q_lora_rank + mla.q_lora_rank + mla.q_lora_rank * a * qk_head
        kv = (
            h * (mla.kv_lora_rank + mla.qk_rope_head_dim)
            + mla.kv_lora_rank
            + mla.kv_lora_rank * a * (mla.qk_nope_head_dim + mla.v_head_dim)
        )
        out = a * mla.v_head_dim * h
        return q + kv + out
    d_h = model.attention_head_dim
    q_width = a * d_h
    kv_width = model.num_kv_heads * d_h
    weights = 2 * h * q_width + 2 * h * kv_width
    biases = (q_width + 2 * kv_width + h) if model.linear_bias else 0
    return weights + biases


def count_parameters(model: ModelSpec) -> ParameterCount:
    """Count every parameter of ``model`` by part."""
    h = model.hidden_size
    norm = 2 * h if model.linear_bias else h
    embedding = model.vocab_size * h + model.learned_position_embeddings * h
    output_head = 0 if model.tied_embeddings else model.vocab_size * h
    dense_mlp = mlp_params(h, model.ffn_hidden_size, model.mlp, bias=model.linear_bias)
    if model.is_moe:
        expert = mlp_params(h, model.expert_ffn_hidden_size, model.mlp, bias=model.linear_bias)
        routed = model.num_experts * expert
        shared = model.num_shared_experts * expert
        router = h * model.num_experts
        num_dense, num_moe = model.num_dense_layers, model.num_moe_layers
    else:
        expert = routed = shared = router = 0
        num_dense, num_moe = model.num_layers, 0
    return ParameterCount(
        embedding=embedding,
        output_head=output_head,
        final_norm=norm,
        attention_per_layer=attention_params(model),
        norms_per_layer=2 * norm,
        dense_mlp_per_layer=dense_mlp,
        expert_mlp=expert,
        routed_experts_per_layer=routed,
        shared_experts_per_layer=shared,
        router_per_layer=router,
        num_dense_layers=num_dense,
        num_moe_layers=num_moe,
        experts_per_token=model.experts_per_token,
    )


def adapter_params_per_layer(model: ModelSpec, lora: LoraSpec) -> int:
    """LoRA parameters of one layer: r x (d_in + d_out) per targeted matrix (the A matrix is
    d_in x r, B is r x d_out; Hu et al. 2021, arXiv 2106.09685, section 4.1)."""
    shapes = lora_matrix_shapes(model)
    return sum(lora.rank * (shapes[name][0] + shapes[name][1])
               for name in lora.target_modules if name in shapes)


def trainable_params(model: ModelSpec, counts: ParameterCount, training: TrainingSpec) -> int:
    """Parameters that receive gradients: every one, or the adapters of every layer."""
    if not training.adapters:
        return counts.total
    return model.num_layers * adapter_params_per_layer(model, training.lora_spec)
