"""Money for a training run (docs/pricing.md; MODEL.md sections 6 and 7).

Time is float seconds; money is ``Decimal`` and is rounded only on a line's totals, half-even
to the cent. A float enters money only through ``exact(x)``, the exact decimal value of the
float, so the same inputs always give the same cents.

Goodput (Young 1974; Daly 2006): with a job-level interruption rate Λ (per second), a
checkpoint write time C and a restart time R, the optimal checkpoint interval is
τ = √(2C/Λ) and the lost fraction is C/τ + Λ(τ/2 + R). A job that loses everything (Λ·R ≥ 1,
or a lost fraction of 1 or more) cannot make progress. Billed time = wall-clock × (1 + lost).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Decimal
from types import MappingProxyType

from service.core.units import HOURS_PER_YEAR, SECONDS_PER_HOUR

CENT = Decimal("0.01")
SECONDS_PER_HOUR_DECIMAL = Decimal(int(SECONDS_PER_HOUR))
DEFAULT_FAILURE_RATE_PER_GPU_HOUR = 2.2e-5
"""Llama 3 405B: 466 job interruptions in 54 days on 16,384 H100 (Dubey et al. 2024, section
3.3.4): 466 / (54 × 24 × 16,384) = 2.2e-5 per GPU-hour."""
DEFAULT_RESTART_S = 600.0
"""Assumed 10 minutes to detect a failure, reschedule and reload the last checkpoint."""
DEFAULT_CHECKPOINT_BYTES_PER_S = 10e9
"""Assumed aggregate checkpoint write bandwidth of the job's storage, 10 GB/s."""
CHECKPOINT_BYTES_PER_PARAM = 14.0
"""bf16 weights (2) + fp32 master weights, Adam m and v (12) (Rajbhandari et al. 2020, K=12)."""

DEFAULT_ONPREM_OVERHEAD_FRACTION = Decimal("0.35")
"""Server, network and storage share on top of the GPU price: an 8-GPU HGX server's CPUs,
memory, NICs and chassis plus the fabric add roughly a third to the GPUs' cost (assumption,
docs/pricing.md)."""
DEFAULT_DEPRECIATION_YEARS = 4
"""Straight-line depreciation over 4 years (a common accelerator life; hyperscalers use 5-6
for servers, GPUs age faster)."""
DEFAULT_ELECTRICITY_USD_PER_KWH = Decimal("0.10")
"""US industrial average electricity price, about 0.08-0.10 USD/kWh (EIA, 2024-2025)."""
DEFAULT_ONPREM_PUE = Decimal("1.3")
"""A typical enterprise data centre (Uptime Institute survey average is about 1.5; modern
sites 1.2-1.4)."""
DEFAULT_OPERATIONS_FRACTION = Decimal("0.10")
"""Yearly operations (staff, support contracts, space) as a fraction of capex (assumption)."""


def exact(value: float) -> Decimal:
    """The exact decimal value of a float (``Decimal(repr(x))``: shortest round-trip text,
    so -0.0 and 0.0 keep their own text)."""
    if not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite amount")
    return Decimal(repr(value))


def cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_HALF_EVEN)


@dataclass(frozen=True, slots=True, kw_only=True)
class Goodput:
    interval_s: float | None
    """Optimal checkpoint interval; None when nothing interrupts the job."""
    lost_fraction: float
    feasible: bool
    reason: str | None = None


def goodput(interruptions_per_s: float, checkpoint_s: float, restart_s: float) -> Goodput:
    """Young/Daly lost fraction for a job-level interruption rate (module docstring)."""
    rate = interruptions_per_s
    if rate <= 0:
        return Goodput(interval_s=None, lost_fraction=0.0, feasible=True)
    if rate * restart_s >= 1:
        return Goodput(interval_s=None, lost_fraction=math.inf, feasible=False,
                       reason=f"interrupted every {1 / rate:,.0f} s on average, less than the "
                              f"{restart_s:,.0f} s a restart takes (Λ·R = {rate * restart_s:.2f}"
                              " ≥ 1): the job cannot make progress")
    if checkpoint_s <= 0:
        lost = rate * restart_s
        interval = None
    else:
        interval = math.sqrt(2 * checkpoint_s / rate)
        lost = checkpoint_s / interval + rate * (interval / 2 + restart_s)
    if not math.isfinite(lost) or (interval is not None and not math.isfinite(interval)):
        return Goodput(interval_s=None, lost_fraction=math.inf, feasible=False,
                       reason=f"a checkpoint would take {checkpoint_s:,.3g} s to write: the "
                              "job cannot make progress")
    if lost >= 1:
        return Goodput(interval_s=interval, lost_fraction=lost, feasible=False,
                       reason=f"checkpointing and restarts would take {lost:.0%} of the time: "
                              "the job cannot make progress")
    return Goodput(interval_s=interval, lost_fraction=lost, feasible=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class CloudLine:
    """One offer applied to a job."""

    instances: int
    rounded_up: bool
    """The GPU count was rounded up to whole instances."""
    billed_hours: Decimal
    """Wall-clock hours including the goodput loss."""
    gpu_hours: Decimal
    """Instances × GPUs per instance × billed hours."""
    total: Decimal


def instances_for(num_gpus: int, gpus_per_instance: float) -> tuple[int, bool]:
    """Whole instances that hold ``num_gpus`` GPUs, and whether that rounds up."""
    needed = exact(num_gpus) / exact(gpus_per_instance)
    whole = int(needed.to_integral_value(rounding=ROUND_CEILING))
    return whole, Decimal(whole) != needed


def cloud_line(
    *, num_gpus: int, gpus_per_instance: float, wall_s: float, lost_fraction: float,
    price_per_instance_hour: Decimal,
) -> CloudLine:
    """instances × hours × (1 + lost) × price (MODEL.md section 7)."""
    instances, rounded = instances_for(num_gpus, gpus_per_instance)
    hours, total = billed(instances, wall_s, 1 + exact(lost_fraction), price_per_instance_hour)
    return CloudLine(
        instances=instances, rounded_up=rounded, billed_hours=hours,
        gpu_hours=hours * instances * exact(gpus_per_instance), total=total,
    )


def billed(instances: int, wall_s: float, factor: Decimal,
           price_per_instance_hour: Decimal) -> tuple[Decimal, Decimal]:
    """(billed hours, total) of ``cloud_line``: hours = wall-clock hours × (1 + lost) and
    total = instances × hours × price, half-even to the cent (MODEL.md section 7). ``factor``
    is ``1 + exact(lost_fraction)``, which a caller pricing one offer at several wall-clocks
    computes once (issue 16)."""
    hours = exact(wall_s) / SECONDS_PER_HOUR_DECIMAL * factor
    return hours, (instances * hours * price_per_instance_hour).quantize(
        CENT, rounding=ROUND_HALF_EVEN)


@dataclass(frozen=True, slots=True, kw_only=True)
class Reservation:
    dedicated_total: Decimal
    """Every hour of every term bought (the job carries the whole commitment)."""
    amortised_total: Decimal
    """The reserved rate for the hours used, divided by the utilisation assumed for the rest of
    the term."""
    terms_bought: int
    utilisation_fraction: Decimal
    break_even_utilisation_fraction: Decimal | None
    """Reserved rate ÷ on-demand rate: below this share of the term in use, on-demand is
    cheaper; None without an on-demand price for the same instance and region."""


def reservation(
    *, instances: int, billed_hours: Decimal, years: int, effective_rate: Decimal,
    on_demand_rate: Decimal | None, utilisation_fraction: Decimal,
) -> Reservation:
    terms, dedicated_total = dedicated(instances, billed_hours, years, effective_rate)
    return Reservation(
        dedicated_total=dedicated_total,
        amortised_total=cents(instances * billed_hours * effective_rate / utilisation_fraction),
        terms_bought=terms, utilisation_fraction=utilisation_fraction,
        break_even_utilisation_fraction=(
            (effective_rate / on_demand_rate).quantize(Decimal("0.0001"))
            if on_demand_rate else None),
    )


def dedicated(instances: int, billed_hours: Decimal, years: int,
              effective_rate: Decimal) -> tuple[int, Decimal]:
    """(terms bought, dedicated total) of ``reservation``: whole terms of ``years`` × 8,760 h
    that cover the billed hours (at least one), every hour of them bought at the effective
    rate, half-even to the cent."""
    term_hours = _TERM_HOURS.get(years) or Decimal(years * HOURS_PER_YEAR)
    terms = max(1, int((billed_hours / term_hours).to_integral_value(rounding=ROUND_CEILING)))
    return terms, (instances * term_hours * terms * effective_rate).quantize(
        CENT, rounding=ROUND_HALF_EVEN)


_TERM_HOURS = MappingProxyType({years: Decimal(years * HOURS_PER_YEAR) for years in (1, 3)})
"""``Decimal(years × 8,760)`` of the reserved terms sold (the same values, made once)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OnPremInputs:
    purchase_price_per_gpu: Decimal
    overhead_fraction: Decimal = DEFAULT_ONPREM_OVERHEAD_FRACTION
    depreciation_years: int = DEFAULT_DEPRECIATION_YEARS
    electricity_per_kwh: Decimal = DEFAULT_ELECTRICITY_USD_PER_KWH
    pue: Decimal = DEFAULT_ONPREM_PUE
    operations_fraction_per_year: Decimal = DEFAULT_OPERATIONS_FRACTION


@dataclass(frozen=True, slots=True, kw_only=True)
class OnPremRate:
    per_gpu_hour: Decimal
    capex_per_gpu_hour: Decimal
    energy_per_gpu_hour: Decimal
    operations_per_gpu_hour: Decimal


def onprem_rate(inputs: OnPremInputs, power_w_per_gpu: float) -> OnPremRate:
    """TCO per GPU-hour: capex (GPU × (1 + overhead)) straight-line over the years, plus
    operations as a yearly share of capex, plus energy (board and host power × PUE × price)."""
    capex = inputs.purchase_price_per_gpu * (1 + inputs.overhead_fraction)
    hours = Decimal(inputs.depreciation_years * HOURS_PER_YEAR)
    capex_hour = capex / hours
    operations_hour = capex * inputs.operations_fraction_per_year / HOURS_PER_YEAR
    energy_hour = exact(power_w_per_gpu) / 1000 * inputs.pue * inputs.electricity_per_kwh
    return OnPremRate(per_gpu_hour=capex_hour + operations_hour + energy_hour,
                      capex_per_gpu_hour=capex_hour, energy_per_gpu_hour=energy_hour,
                      operations_per_gpu_hour=operations_hour)
