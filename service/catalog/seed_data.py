"""The seed catalogue as typed records, read from the CSV files in ``service/catalog/seed``.

The files are copies of the team's research data (``seed/README.md`` names the sources); the
service never reads anything outside its own package at run time.
"""

from __future__ import annotations

import csv
import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from importlib import resources


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceleratorSeed:
    """One accelerator, in datasheet units (see ``catalog/mapping.py``)."""

    id: str
    vendor: str
    name: str
    memory_gib: float
    hbm_tbytes_per_s: float
    fp32_tflops: float | None
    tf32_tflops: float | None
    bf16_tflops: float | None
    fp16_tflops: float | None
    fp8_tflops: float | None
    tdp_w: float
    scaleup_domain_size: int
    scaleup_gbytes_per_s: float
    scaleout_gbits_per_s: float
    purchase_price_usd: Decimal | None
    price_basis: str | None
    source: str
    as_of: dt.date
    notes: str


def _optional_float(text: str) -> float | None:
    return float(text) if text.strip() else None


@cache
def accelerator_seeds() -> tuple[AcceleratorSeed, ...]:
    """Every accelerator of the seed file, in file order."""
    text = resources.files("service.catalog").joinpath("seed/accelerators.csv").read_text("utf-8")
    seeds = []
    for row in csv.DictReader(text.splitlines()):
        seeds.append(
            AcceleratorSeed(
                id=row["id"],
                vendor=row["vendor"],
                name=row["name"],
                memory_gib=float(row["memory_gib"]),
                hbm_tbytes_per_s=float(row["hbm_tbytes_per_s"]),
                fp32_tflops=_optional_float(row["fp32_tflops"]),
                tf32_tflops=_optional_float(row["tf32_tflops"]),
                bf16_tflops=_optional_float(row["bf16_tflops"]),
                fp16_tflops=_optional_float(row["fp16_tflops"]),
                fp8_tflops=_optional_float(row["fp8_tflops"]),
                tdp_w=float(row["tdp_w"]),
                scaleup_domain_size=int(row["scaleup_domain_size"]),
                scaleup_gbytes_per_s=float(row["scaleup_gbytes_per_s"]),
                scaleout_gbits_per_s=float(row["scaleout_gbits_per_s"]),
                purchase_price_usd=(
                    Decimal(row["purchase_price_usd"]) if row["purchase_price_usd"] else None
                ),
                price_basis=row["price_basis"] or None,
                source=row["source"],
                as_of=dt.date.fromisoformat(row["as_of"]),
                notes=row["notes"],
            )
        )
    return tuple(seeds)
