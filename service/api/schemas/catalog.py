"""Accelerator and model-preset responses."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from pydantic import BaseModel, Field

from service.catalog.models import Accelerator
from service.catalog.offers import MICROS
from service.core.params import count_parameters
from service.core.presets import Preset
from service.core.specs import MlpKind


class AcceleratorOut(BaseModel):
    """Datasheet facts of one accelerator; units are in the field names."""

    id: str = Field(examples=["h100-sxm5-80gb"])
    vendor: str = Field(examples=["NVIDIA"])
    name: str = Field(examples=["H100 SXM5 80GB"])
    memory_gib: float = Field(description="HBM capacity in GiB.", examples=[80])
    hbm_tbytes_per_s: float = Field(description="HBM bandwidth, decimal TB/s.", examples=[3.35])
    fp32_tflops: float | None = Field(description="Dense FP32 peak, TFLOP/s.")
    tf32_tflops: float | None = Field(description="Dense TF32 tensor peak, TFLOP/s.")
    bf16_tflops: float | None = Field(description="Dense BF16 tensor peak, TFLOP/s.")
    fp16_tflops: float | None = Field(description="Dense FP16 tensor peak, TFLOP/s.")
    fp8_tflops: float | None = Field(description="Dense FP8 tensor peak, TFLOP/s.")
    tdp_w: float = Field(description="Board power limit, W.")
    scaleup_domain_size: int = Field(description="GPUs sharing the scale-up fabric (NVLink).")
    scaleup_gbytes_per_s: float = Field(
        description="Scale-up bandwidth per GPU per direction, GB/s."
    )
    scaleout_gbits_per_s: float = Field(description="Scale-out network per GPU, Gbit/s.")
    purchase_price_usd: str | None = Field(
        description="Indicative purchase price per GPU, decimal string; see price_basis."
    )
    price_basis: str | None
    source: str = Field(description="Datasheets and documents the figures come from.")
    as_of: dt.date
    notes: str

    @classmethod
    def from_row(cls, row: Accelerator) -> AcceleratorOut:
        price = row.purchase_price_usd_micros
        return cls(
            id=row.id, vendor=row.vendor, name=row.name, memory_gib=row.memory_gib,
            hbm_tbytes_per_s=row.hbm_tbytes_per_s, fp32_tflops=row.fp32_tflops,
            tf32_tflops=row.tf32_tflops, bf16_tflops=row.bf16_tflops,
            fp16_tflops=row.fp16_tflops, fp8_tflops=row.fp8_tflops, tdp_w=row.tdp_w,
            scaleup_domain_size=row.scaleup_domain_size,
            scaleup_gbytes_per_s=row.scaleup_gbytes_per_s,
            scaleout_gbits_per_s=row.scaleout_gbits_per_s,
            purchase_price_usd=(
                str((Decimal(price) / MICROS).quantize(Decimal("0.01")))
                if price is not None else None
            ),
            price_basis=row.price_basis, source=row.source, as_of=row.as_of, notes=row.notes,
        )


class ModelPresetOut(BaseModel):
    """A published model architecture with its parameter counts."""

    name: str = Field(examples=["llama3.1-70b"])
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int
    mlp: MlpKind
    vocab_size: int
    tied_embeddings: bool
    num_experts: int
    experts_per_token: int
    num_shared_experts: int
    moe_ffn_hidden_size: int | None
    num_dense_layers: int
    multi_head_latent_attention: bool
    params_total: int = Field(description="Parameters counted by our model.")
    params_active: int = Field(description="Parameters touched per token (MoE: top-k experts).")
    published_params: float = Field(description="Total parameters as published by the source.")
    source: str

    @classmethod
    def from_preset(cls, preset: Preset) -> ModelPresetOut:
        m = preset.model
        counts = count_parameters(m)
        return cls(
            name=m.name, num_layers=m.num_layers, hidden_size=m.hidden_size,
            num_heads=m.num_heads, num_kv_heads=m.num_kv_heads, head_dim=m.attention_head_dim,
            ffn_hidden_size=m.ffn_hidden_size, mlp=m.mlp, vocab_size=m.vocab_size,
            tied_embeddings=m.tied_embeddings, num_experts=m.num_experts,
            experts_per_token=m.experts_per_token, num_shared_experts=m.num_shared_experts,
            moe_ffn_hidden_size=m.moe_ffn_hidden_size, num_dense_layers=m.num_dense_layers,
            multi_head_latent_attention=m.mla is not None, params_total=counts.total,
            params_active=counts.active, published_params=preset.published_params,
            source=preset.source,
        )
