"""Accelerator and model-preset responses."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from service.api.schemas.common import IsoDate, RequestModel, TextRule
from service.api.schemas.prices import PurchasePrice
from service.catalog.models import Accelerator
from service.catalog.offers import MICROS
from service.core.calibration import DEFAULT_CALIBRATION
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
    calibrated: bool = Field(
        default=True, description="Whether the estimator is fitted on published runs on this "
                                  "accelerator; false: a conservative efficiency prior and the "
                                  "widest band, with a warning in every estimate.")

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
            calibrated=DEFAULT_CALIBRATION.is_calibrated_for(row.id),
        )


ACCELERATOR_EXAMPLE: dict[str, Any] = {
    "id": "acme-npu-2", "vendor": "ACME", "name": "ACME NPU 2 (in-house)",
    "memory_gib": 96, "hbm_tbytes_per_s": 2.4, "bf16_tflops": 600, "fp8_tflops": 1200,
    "tdp_w": 550, "scaleup_domain_size": 8, "scaleup_gbytes_per_s": 300,
    "scaleout_gbits_per_s": 400, "purchase_price_usd": "18000.00",
    "price_basis": "internal transfer price, FY2027",
    "source": "ACME NPU 2 datasheet rev. C (internal, 2026-10)", "as_of": "2026-10-15",
}

MIN_TFLOPS = 0.01
"""10 GFLOP/s: a floor far below any accelerator sold for training or serving (a 2012 Tesla
K20 did 3.5 TFLOP/s FP32). A peak of 1e-300 was stored and made every time, and so every
cost, of that accelerator overflow (issue 36): the floors here keep estimates finite."""
Tflops = Annotated[float, Field(strict=True, ge=MIN_TFLOPS, le=1_000_000,
                                allow_inf_nan=False)]


class AcceleratorIn(RequestModel):
    """An accelerator the catalogue lacks (an in-house or new part), with its datasheet facts.
    Dense peaks (not sparse); per-GPU, per-direction scale-up bandwidth. Immutable once
    stored: a corrected datasheet is a new id, so quotes that used the old one reproduce."""

    model_config = ConfigDict(json_schema_extra={"examples": [ACCELERATOR_EXAMPLE]})

    id: Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{1,63}$")]
    vendor: Annotated[str, TextRule(min_length=1, max_length=64)]
    name: Annotated[str, TextRule(min_length=1, max_length=128)]
    memory_gib: float = Field(strict=True, ge=0.125, le=16_384, allow_inf_nan=False,
                              description="HBM capacity per accelerator, GiB (at least 1/8).")
    hbm_tbytes_per_s: float = Field(strict=True, ge=0.01, le=1_000, allow_inf_nan=False,
                                    description="HBM bandwidth, decimal TB/s (at least 0.01: "
                                                "10 GB/s).")
    fp32_tflops: Tflops | None = None
    tf32_tflops: Tflops | None = None
    bf16_tflops: Tflops | None = Field(default=None, description="Dense BF16 peak, TFLOP/s.")
    fp16_tflops: Tflops | None = None
    fp8_tflops: Tflops | None = None
    tdp_w: float = Field(strict=True, ge=1, le=20_000, allow_inf_nan=False,
                         description="Board power, W.")
    scaleup_domain_size: int = Field(strict=True, ge=1, le=100_000,
                                     description="Accelerators sharing the scale-up fabric.")
    scaleup_gbytes_per_s: float = Field(strict=True, ge=0.1, le=100_000, allow_inf_nan=False,
                                        description="Per accelerator per direction, GB/s (at "
                                                    "least 0.1).")
    scaleout_gbits_per_s: float = Field(strict=True, ge=0.1, le=100_000, allow_inf_nan=False,
                                        description="Back-end network per accelerator, Gbit/s "
                                                    "(at least 0.1).")
    purchase_price_usd: PurchasePrice | None = Field(
        default=None, description="Purchase price per accelerator (on-prem TCO), at most "
                                  "10,000,000.")
    price_basis: Annotated[str, TextRule(max_length=2000)] | None = None
    source: Annotated[str, TextRule(min_length=1, max_length=2000)] = Field(
        description="Where the figures come from (datasheet, measurement).")
    as_of: IsoDate
    notes: Annotated[str, TextRule(max_length=4000)] = ""

    @model_validator(mode="after")
    def _checks(self) -> Self:
        if self.bf16_tflops is None and self.fp16_tflops is None:
            raise ValueError("give bf16_tflops or fp16_tflops: training needs a 16-bit peak")
        if self.purchase_price_usd is not None and self.price_basis is None:
            raise ValueError("price_basis is required with purchase_price_usd")
        return self


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
