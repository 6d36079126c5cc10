"""Rows to core specs: the only place where datasheet units become SI units.

Catalogue rows keep datasheet units, with the unit in the column name (``memory_gib``,
``hbm_tbytes_per_s``, ``bf16_tflops``, ``scaleup_gbytes_per_s`` per direction,
``scaleout_gbits_per_s``). HBM capacities printed as "80GB" are binary sizes (five 16 GiB
stacks), so they are stored and converted as GiB.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, Protocol

from service.catalog.seed_facts import is_assumed
from service.core.quote import Fabric, PriceOffer, Term
from service.core.specs import AcceleratorSpec, FabricProtocol, Precision
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


class OfferRow(Protocol):
    """What ``offer_to_price`` reads: a row of the columns ``catalog/quoting.py`` selects."""

    offer_id: str
    provider_id: str
    region: str
    zone: str | None
    instance_type: str
    accelerator_id: str
    term: str
    payment_option: str | None
    currency: str
    effective_price_per_hour_micros: int
    gpus_per_instance: float
    nvlink_domain: int | None
    inter_node_gbps: float | None
    fabric_source: str | None
    interconnect: str | None
    interruption_rate_per_hour: float | None
    interruption_rate_source: str | None
    region_carbon_g_per_kwh: float | None
    as_of: dt.date | None
    observed_at: dt.date | None
    indicative: bool
    source: str
    quality_flags: list[dict[str, Any]]


MICROS = Decimal(1_000_000)


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


def fabric_protocol(interconnect: str | None) -> FabricProtocol | None:
    """An offer's ``interconnect`` as the protocol its lines are timed on: a
    ``FabricProtocol`` value (the seed's, ``seed_facts.instance_protocol``), else None (free
    text an import gave, or nothing: the line keeps the fitted network)."""
    if interconnect is None:
        return None
    try:
        return FabricProtocol(interconnect.strip().lower())
    except ValueError:
        return None


def offer_to_price(row: OfferRow, on_demand_rate: Decimal | None) -> PriceOffer:
    """A catalogue offer (its stored columns) as the quote's ``PriceOffer``. Money stays in
    micro-units in the database and becomes ``Decimal`` here, once."""
    return PriceOffer(
        offer_id=row.offer_id, provider=row.provider_id, region=row.region, zone=row.zone,
        instance_type=row.instance_type, accelerator=row.accelerator_id, term=Term(row.term),
        payment_option=row.payment_option, currency=row.currency,
        price_per_instance_hour=(Decimal(row.effective_price_per_hour_micros) / MICROS
                                 ).quantize(Decimal("0.000001")),
        fabric=Fabric(gpus_per_instance=row.gpus_per_instance,
                      nvlink_domain=row.nvlink_domain, inter_node_gbps=row.inter_node_gbps,
                      protocol=fabric_protocol(row.interconnect)),
        fabric_source=row.fabric_source,
        interruption_rate_per_hour=row.interruption_rate_per_hour,
        interruption_rate_source=row.interruption_rate_source,
        interruption_rate_assumed=row.term == Term.SPOT.value and is_assumed(
            row.interruption_rate_source),
        region_carbon_g_per_kwh=row.region_carbon_g_per_kwh,
        as_of=None if row.as_of is None else row.as_of.isoformat(),
        as_of_day=None if row.as_of is None else row.as_of.toordinal(),
        observed_at=None if row.observed_at is None else row.observed_at.isoformat(),
        observed_at_day=None if row.observed_at is None else row.observed_at.toordinal(),
        indicative=row.indicative, derived=row.source.startswith("derived:"),
        quality_flags=tuple(f["code"] for f in row.quality_flags),
        on_demand_rate=on_demand_rate,
    )
