"""Price sized jobs against a catalogue version: one line per matching offer, plus on-premises
TCO lines, with goodput, reservations, energy, carbon, budget and deadline checks.

The result is plain JSON-ready data, computed only from its inputs and the stored catalogue
version, so a stored quote can be recomputed years later and compared to the cent.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.catalog.models import Accelerator, CatalogVersionOffer, OfferRevision
from service.catalog.offers import RESERVED_YEARS, Term, micros_to_decimal
from service.core import pricing
from service.core.units import SECONDS_PER_HOUR

ONPREM = "onprem"
ALL_TERMS = (*(t.value for t in Term), ONPREM)


@dataclass(frozen=True, slots=True, kw_only=True)
class SizedJob:
    """A workload on one accelerator and GPU count, before money."""

    accelerator: str
    num_gpus: int
    wall_s: float
    """Wall-clock seconds without failures."""
    checkpoint_bytes: float
    power_w_per_gpu: float
    """Average board plus host power per GPU, before PUE."""
    plan: dict[str, Any] | None = None
    global_batch_seqs: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PricingOptions:
    terms: tuple[str, ...] = ALL_TERMS
    providers: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    budget: Decimal | None = None
    currency: str = "USD"
    deadline_s: float | None = None
    failure_rate_per_gpu_hour: float = pricing.DEFAULT_FAILURE_RATE_PER_GPU_HOUR
    restart_s: float = pricing.DEFAULT_RESTART_S
    checkpoint_bytes_per_s: float = pricing.DEFAULT_CHECKPOINT_BYTES_PER_S
    reserved_utilisation_fraction: Decimal = Decimal(1)
    pue: float = 1.2
    grid_gco2e_per_kwh: float = 480.0
    onprem: dict[str, Any] = field(default_factory=dict)
    """purchase_price_per_gpu (per accelerator id or one for all), overhead_fraction,
    depreciation_years, electricity_per_kwh, pue, operations_fraction_per_year."""


def _money(amount: Decimal) -> str:
    return str(pricing.cents(amount))


def _energy(job: SizedJob, gpu_hours: Decimal, pue: float, intensity: float) -> tuple[str, str]:
    kwh = gpu_hours * pricing.exact(job.power_w_per_gpu) * pricing.exact(pue) / 1000
    co2 = kwh * pricing.exact(intensity) / 1000
    return str(kwh.quantize(Decimal("0.001"))), str(co2.quantize(Decimal("0.001")))


def _checks(line: dict[str, Any], options: PricingOptions) -> None:
    total = Decimal(line["total"]) if line["feasible"] else None
    line["within_budget"] = (
        None if options.budget is None else (total is not None and total <= options.budget))
    line["meets_deadline"] = (
        None if options.deadline_s is None
        else (line["feasible"] and line["wall_clock_s"] <= options.deadline_s))


def _infeasible(reason: str | None) -> dict[str, Any]:
    """The fields of a line that cannot run: no amounts, and why."""
    return {"feasible": False, "infeasible_reason": reason, "total": None,
            "wall_clock_s": None, "billed_hours": None, "gpu_hours": None,
            "goodput_loss_fraction": None, "checkpoint_interval_s": None, "rounded_up": None,
            "energy_kwh": None, "co2e_kg": None}


def _cloud_line(job: SizedJob, offer: OfferRevision, on_demand: Decimal | None,
                options: PricingOptions, version_id: str) -> dict[str, Any]:
    price = micros_to_decimal(offer.effective_price_per_hour_micros)
    instances, _ = pricing.instances_for(job.num_gpus, offer.gpus_per_instance)
    checkpoint_s = job.checkpoint_bytes / options.checkpoint_bytes_per_s
    if offer.term == Term.SPOT.value:
        rate_per_s = (offer.interruption_rate_per_hour or 0.0) * instances / SECONDS_PER_HOUR
        basis = f"spot interruptions {offer.interruption_rate_per_hour:g} per instance-hour " \
                f"({offer.interruption_rate_source})"
    else:
        gpus = instances * offer.gpus_per_instance
        rate_per_s = options.failure_rate_per_gpu_hour * gpus / SECONDS_PER_HOUR
        basis = f"hardware failures {options.failure_rate_per_gpu_hour:g} per GPU-hour"
    loss = pricing.goodput(rate_per_s, checkpoint_s, options.restart_s)
    flags = [f["code"] for f in offer.quality_flags]
    if offer.indicative:
        flags.insert(0, "indicative_price")
    line: dict[str, Any] = {
        "provider": offer.provider_id, "region": offer.region, "zone": offer.zone,
        "instance_type": offer.instance_type, "term": offer.term,
        "payment_option": offer.payment_option, "accelerator": job.accelerator,
        "num_gpus": job.num_gpus, "gpus_per_instance": offer.gpus_per_instance,
        "instances": instances, "currency": offer.currency,
        "unit_price": str(price), "unit": "instance-hour", "offer_id": offer.offer_id,
        "catalog_version": version_id, "flags": flags, "goodput_basis": basis,
        "plan": job.plan, "global_batch_seqs": job.global_batch_seqs,
        "reserved": None, "onprem": None,
    }
    if not loss.feasible:
        line.update(_infeasible(loss.reason))
        _checks(line, options)
        return line
    cost = pricing.cloud_line(num_gpus=job.num_gpus, gpus_per_instance=offer.gpus_per_instance,
                              wall_s=job.wall_s, lost_fraction=loss.lost_fraction,
                              price_per_instance_hour=price)
    total = cost.total
    years = RESERVED_YEARS.get(Term(offer.term))
    if years:
        reserved = pricing.reservation(
            instances=cost.instances, billed_hours=cost.billed_hours, years=years,
            effective_rate=price, on_demand_rate=on_demand,
            utilisation_fraction=options.reserved_utilisation_fraction)
        total = reserved.amortised_total
        line["reserved"] = {
            "dedicated_total": _money(reserved.dedicated_total),
            "amortised_total": _money(reserved.amortised_total),
            "terms_bought": reserved.terms_bought,
            "utilisation_fraction": str(reserved.utilisation_fraction),
            "break_even_utilisation_fraction": (
                str(reserved.break_even_utilisation_fraction)
                if reserved.break_even_utilisation_fraction is not None else None),
        }
    intensity = offer.region_carbon_g_per_kwh
    kwh, co2 = _energy(job, cost.gpu_hours, options.pue,
                       intensity if intensity is not None else options.grid_gco2e_per_kwh)
    line.update({
        "feasible": True, "infeasible_reason": None, "total": _money(total),
        "wall_clock_s": float(cost.billed_hours * pricing.SECONDS_PER_HOUR_DECIMAL),
        "billed_hours": str(cost.billed_hours.quantize(Decimal("0.0001"))),
        "gpu_hours": str(cost.gpu_hours.quantize(Decimal("0.0001"))),
        "goodput_loss_fraction": loss.lost_fraction,
        "checkpoint_interval_s": loss.interval_s, "rounded_up": cost.rounded_up,
        "energy_kwh": kwh, "co2e_kg": co2,
        "carbon_basis": "region" if intensity is not None else "request default",
    })
    _checks(line, options)
    return line


def _onprem_line(job: SizedJob, accelerator: Accelerator | None, options: PricingOptions,
                 version_id: str) -> dict[str, Any]:
    inputs = options.onprem
    prices = inputs.get("purchase_price_per_gpu")
    price: Decimal | None = None
    if isinstance(prices, dict):
        price = Decimal(prices[job.accelerator]) if job.accelerator in prices else None
    elif prices is not None:
        price = Decimal(prices)
    basis = "request"
    if price is None and accelerator is not None and accelerator.purchase_price_usd_micros:
        price = micros_to_decimal(accelerator.purchase_price_usd_micros)
        basis = f"accelerator catalogue (indicative: {accelerator.price_basis})"
    line: dict[str, Any] = {
        "provider": ONPREM, "region": None, "zone": None, "instance_type": None,
        "term": ONPREM, "payment_option": None, "accelerator": job.accelerator,
        "num_gpus": job.num_gpus, "gpus_per_instance": 1.0, "instances": job.num_gpus,
        "currency": options.currency, "unit": "gpu-hour", "offer_id": None,
        "catalog_version": version_id, "flags": [], "plan": job.plan,
        "global_batch_seqs": job.global_batch_seqs, "reserved": None,
        "goodput_basis": f"hardware failures {options.failure_rate_per_gpu_hour:g} per GPU-hour",
    }
    if price is None:
        line.update({**_infeasible(f"no purchase price for {job.accelerator}: give "
                                   "onprem.purchase_price_per_gpu"),
                     "unit_price": None, "onprem": None})
        _checks(line, options)
        return line
    tco = pricing.OnPremInputs(
        purchase_price_per_gpu=price,
        overhead_fraction=Decimal(inputs.get("overhead_fraction",
                                             pricing.DEFAULT_ONPREM_OVERHEAD_FRACTION)),
        depreciation_years=int(inputs.get("depreciation_years",
                                          pricing.DEFAULT_DEPRECIATION_YEARS)),
        electricity_per_kwh=Decimal(inputs.get("electricity_per_kwh",
                                               pricing.DEFAULT_ELECTRICITY_USD_PER_KWH)),
        pue=Decimal(inputs.get("pue", pricing.DEFAULT_ONPREM_PUE)),
        operations_fraction_per_year=Decimal(inputs.get(
            "operations_fraction_per_year", pricing.DEFAULT_OPERATIONS_FRACTION)),
    )
    rate = pricing.onprem_rate(tco, job.power_w_per_gpu)
    failures = options.failure_rate_per_gpu_hour * job.num_gpus / SECONDS_PER_HOUR
    loss = pricing.goodput(failures, job.checkpoint_bytes / options.checkpoint_bytes_per_s,
                           options.restart_s)
    cost = pricing.cloud_line(num_gpus=job.num_gpus, gpus_per_instance=1.0, wall_s=job.wall_s,
                              lost_fraction=loss.lost_fraction,
                              price_per_instance_hour=rate.per_gpu_hour)
    kwh, co2 = _energy(job, cost.gpu_hours, float(tco.pue), options.grid_gco2e_per_kwh)
    line.update({
        "feasible": True, "infeasible_reason": None, "unit_price": str(
            rate.per_gpu_hour.quantize(Decimal("0.000001"))),
        "total": _money(cost.total),
        "wall_clock_s": float(cost.billed_hours * pricing.SECONDS_PER_HOUR_DECIMAL),
        "billed_hours": str(cost.billed_hours.quantize(Decimal("0.0001"))),
        "gpu_hours": str(cost.gpu_hours.quantize(Decimal("0.0001"))),
        "goodput_loss_fraction": loss.lost_fraction, "checkpoint_interval_s": loss.interval_s,
        "rounded_up": False, "energy_kwh": kwh, "co2e_kg": co2, "carbon_basis": "request default",
        "onprem": {
            "purchase_price_per_gpu": str(price), "purchase_price_basis": basis,
            "overhead_fraction": str(tco.overhead_fraction),
            "depreciation_years": tco.depreciation_years,
            "electricity_per_kwh": str(tco.electricity_per_kwh), "pue": str(tco.pue),
            "operations_fraction_per_year": str(tco.operations_fraction_per_year),
            "capex_per_gpu_hour": str(rate.capex_per_gpu_hour.quantize(Decimal("0.000001"))),
            "energy_per_gpu_hour": str(rate.energy_per_gpu_hour.quantize(Decimal("0.000001"))),
            "operations_per_gpu_hour": str(
                rate.operations_per_gpu_hour.quantize(Decimal("0.000001"))),
        },
    })
    _checks(line, options)
    return line


def _sort_key(line: dict[str, Any]) -> tuple[Any, ...]:
    return (not line["feasible"], Decimal(line["total"]) if line["feasible"] else Decimal(0),
            line["wall_clock_s"] or 0.0, line["provider"], line["region"] or "",
            line["zone"] or "", line["instance_type"] or "", line["term"],
            line["payment_option"] or "", line["num_gpus"], line["accelerator"])


def _candidate_offers(session: Session, version_id: str, accelerators: set[str],
                      options: PricingOptions) -> list[OfferRevision]:
    """The version's offers a quote can use (plus on-demand ones, for break-even figures),
    filtered in SQL, in offer-id order."""
    terms = {t for t in options.terms if t != ONPREM} | {Term.ON_DEMAND.value}
    query = (
        select(OfferRevision)
        .join(CatalogVersionOffer, CatalogVersionOffer.revision_id == OfferRevision.id)
        .where(CatalogVersionOffer.version_id == version_id,
               OfferRevision.accelerator_id.in_(accelerators),
               OfferRevision.term.in_(terms),
               OfferRevision.currency == options.currency)
        .order_by(OfferRevision.offer_id)
    )
    if options.providers:
        query = query.where(OfferRevision.provider_id.in_(options.providers))
    if options.regions:
        query = query.where(OfferRevision.region.in_(options.regions))
    return list(session.scalars(query))


def price_jobs(
    session: Session, jobs: Sequence[SizedJob], options: PricingOptions, version_id: str,
) -> dict[str, Any]:
    """Every line for every job, sorted by total, with cheapest, fastest, summary and verdict."""
    revisions = _candidate_offers(session, version_id, {j.accelerator for j in jobs}, options)
    accelerators = {a.id: a for a in session.scalars(
        select(Accelerator).where(Accelerator.id.in_({j.accelerator for j in jobs})))}
    on_demand = {(r.provider_id, r.instance_type, r.region):
                 micros_to_decimal(r.effective_price_per_hour_micros)
                 for r in revisions if r.term == Term.ON_DEMAND.value and r.zone is None}
    lines: list[dict[str, Any]] = []
    for job in jobs:
        for offer in revisions:
            if offer.accelerator_id != job.accelerator or offer.term not in options.terms:
                continue
            if options.providers and offer.provider_id not in options.providers:
                continue
            if options.regions and offer.region not in options.regions:
                continue
            if offer.currency != options.currency:
                continue
            lines.append(_cloud_line(
                job, offer, on_demand.get((offer.provider_id, offer.instance_type, offer.region)),
                options, version_id))
        if ONPREM in options.terms and (not options.providers or ONPREM in options.providers):
            lines.append(_onprem_line(job, accelerators.get(job.accelerator), options,
                                      version_id))
    lines.sort(key=_sort_key)
    feasible = [line for line in lines if line["feasible"]]
    totals = [Decimal(line["total"]) for line in feasible]
    cheapest_per_term: dict[str, Any] = {}
    for line in feasible:
        cheapest_per_term.setdefault(line["term"], line)
    fastest = min(feasible, key=lambda x: (x["wall_clock_s"], _sort_key(x)), default=None)
    in_time = [x for x in feasible if x["meets_deadline"] is not False]
    recommended = in_time[0] if in_time else (feasible[0] if feasible else None)
    verdict, reasons = _verdict(recommended, options)
    return {
        "lines": lines,
        "cheapest": feasible[0] if feasible else None,
        "cheapest_per_term": cheapest_per_term,
        "fastest": fastest,
        "recommended": recommended,
        "summary": {
            "lines": len(lines), "feasible_lines": len(feasible),
            "min_total": _money(min(totals)) if totals else None,
            "median_total": _money(statistics.median(totals)) if totals else None,
            "max_total": _money(max(totals)) if totals else None,
            "currency": options.currency,
        },
        "verdict": verdict,
        "reasons": reasons,
    }


def _verdict(recommended: dict[str, Any] | None,
             options: PricingOptions) -> tuple[str | None, list[str]]:
    if options.budget is None and options.deadline_s is None:
        return None, []
    if recommended is None:
        return "reject", ["no offer can run this workload"]
    reasons: list[str] = []
    where = f"{recommended['provider']} {recommended['region'] or ''} {recommended['term']}"
    if options.budget is not None:
        total = Decimal(recommended["total"])
        if total <= options.budget:
            reasons.append(f"{where.strip()}: {total} {options.currency} is within the budget of "
                           f"{options.budget} {options.currency}")
        else:
            reasons.append(f"{where.strip()}: {total} {options.currency} exceeds the budget of "
                           f"{options.budget} {options.currency} by "
                           f"{total - options.budget} {options.currency}")
    if options.deadline_s is not None:
        seconds = recommended["wall_clock_s"]
        verb = "meets" if seconds <= options.deadline_s else "misses"
        reasons.append(f"{where.strip()}: {seconds / 86400:,.1f} days {verb} the deadline of "
                       f"{options.deadline_s / 86400:,.1f} days")
    ok = (recommended["within_budget"] is not False) and (
        recommended["meets_deadline"] is not False)
    return ("approve" if ok else "reject"), reasons
