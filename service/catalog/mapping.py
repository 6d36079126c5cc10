"""Rows to core specs: the only place where datasheet units become SI units.

Catalogue rows keep datasheet units, with the unit in the column name (``memory_gib``,
``hbm_tbytes_per_s``, ``bf16_tflops``, ``scaleup_gbytes_per_s`` per direction,
``scaleout_gbits_per_s``). HBM capacities printed as "80GB" are binary sizes (five 16 GiB
stacks), so they are stored and converted as GiB.
"""

from __future__ import annotations

from typing import Protocol

from service.core.specs import AcceleratorSpec, Precision
from service.core.units import (
    gbits_per_s_to_bytes_per_s,
    gbytes_per_s_to_bytes_per_s,
    gib_to_bytes,
    tbytes_per_s_to_bytes_per_s,
    tflops_to_flops_per_s,
)


class AcceleratorRecord(Protocol):
    """What ``accelerator_to_spec`` reads: an ORM row or a seed record."""

    @property
    def id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def memory_gib(self) -> float: ...
    @property
    def hbm_tbytes_per_s(self) -> float: ...
    @property
    def bf16_tflops(self) -> float | None: ...
    @property
    def fp16_tflops(self) -> float | None: ...
    @property
    def fp8_tflops(self) -> float | None: ...
    @property
    def tdp_w(self) -> float: ...
    @property
    def scaleup_domain_size(self) -> int: ...
    @property
    def scaleup_gbytes_per_s(self) -> float: ...
    @property
    def scaleout_gbits_per_s(self) -> float: ...


def accelerator_to_spec(row: AcceleratorRecord) -> AcceleratorSpec:
    """Convert a catalogue row to the core's SI-unit ``AcceleratorSpec``."""
    peaks: dict[Precision, float] = {}
    for precision, tflops in (
        (Precision.BF16, row.bf16_tflops),
        (Precision.FP16, row.fp16_tflops),
        (Precision.FP8, row.fp8_tflops),
    ):
        if tflops:
            peaks[precision] = tflops_to_flops_per_s(tflops)
    return AcceleratorSpec(
        id=row.id,
        name=row.name,
        memory_bytes=gib_to_bytes(row.memory_gib),
        hbm_bytes_per_s=tbytes_per_s_to_bytes_per_s(row.hbm_tbytes_per_s),
        peak_flops_per_s=peaks,
        tdp_w=row.tdp_w,
        scaleup_domain_size=row.scaleup_domain_size,
        scaleup_bytes_per_s=gbytes_per_s_to_bytes_per_s(row.scaleup_gbytes_per_s),
        scaleout_bytes_per_s=gbits_per_s_to_bytes_per_s(row.scaleout_gbits_per_s),
    )
