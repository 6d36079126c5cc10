"""Data-quality checks run over a whole catalogue version at every import and edit.

They flag, never drop: each flag is stored with its offer revision and shown by the API, and
the version keeps a report of the counts. The problems they catch are the ones documented in
the research data (``seed/prices/README.md``): GCP A100-80GB on-demand below its own spot
price, GCP per-GPU prices 2.3× apart between regions, AWS p5e with no on-demand price, spot
equal to on-demand in some AWS zones, and RunPod's memory written as MiB when it meant GB;
and (issue 39) GCP committed-use rates above the on-demand rate of the same machine and region,
where the on-demand row is the one that is wrong (``docs/catalog.md``, "GCP A3 on-demand"), so
such an on-demand row is flagged too, on its own data (``on_demand_below_committed``;
``docs/data-quality.md``: SkyPilot's GCP fetcher priced the GPUs at the DWS flex-start SKU).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence

from service.catalog.offers import RESERVED_YEARS, OfferContent, QualityFlag, Term, micros_to_text

OUTLIER_FACTOR = 2.5
"""A per-GPU price more than this factor above or below its group median is an outlier
(issue 3's rule)."""
OUTLIER_MIN_GROUP = 3
"""A median of fewer offers says nothing about which one is wrong."""
MEMORY_TOLERANCE_FRACTION = 0.10
"""Stated GPU memory may differ from the datasheet by rounding (GB vs GiB is 7%), not more."""

SPOT_ABOVE_ON_DEMAND = "spot_above_on_demand"
SPOT_NOT_DISCOUNTED = "spot_not_discounted"
RESERVED_ABOVE_ON_DEMAND = "reserved_above_on_demand"
"""A reserved or committed-use price (``reserved_1y``, ``reserved_3y``; the effective rate, its
up-front fee spread over the term) dearer per GPU-hour than the on-demand price of the same
provider, region, instance type and currency. A commitment is sold as a discount on on-demand
(AWS Reserved Instances and Savings Plans, GCP committed-use discounts, Azure reservations), so
one of the two prices is wrong. Capacity blocks are not checked: they are priced on their own
market, not as a discount."""
ON_DEMAND_BELOW_COMMITTED = "on_demand_below_committed"
"""An on-demand price cheaper per GPU-hour than a real (not indicative) reserved or
committed-use price (``reserved_1y``, ``reserved_3y``, effective rate) of the same provider,
accelerator, region and currency, whichever machine type it is on. A commitment is a discount
on on-demand of at least 30 % (GCP's A3 1-year discount is 31 %), far more than the few per cent
a GPU-hour costs more or less between machine types of one accelerator, so no right on-demand
price is below one: the on-demand price is the likely wrong one (seed: the GCP A3 rows whose GPU
part is the DWS flex-start SKU, ``docs/data-quality.md``). Indicative commitments are not
compared: the seed derives them from the on-demand price itself."""
PRICE_OUTLIER = "price_outlier"
MISSING_ON_DEMAND = "missing_on_demand"
GPU_MEMORY_MISMATCH = "gpu_memory_mismatch"
FLAG_CODES = (SPOT_ABOVE_ON_DEMAND, SPOT_NOT_DISCOUNTED, RESERVED_ABOVE_ON_DEMAND,
              ON_DEMAND_BELOW_COMMITTED, PRICE_OUTLIER, MISSING_ON_DEMAND, GPU_MEMORY_MISMATCH)


def _instance_key(offer: OfferContent) -> tuple[str, str, str, str]:
    return offer.provider, offer.instance_type, offer.region, offer.currency


def check_offers(
    offers: Sequence[OfferContent], accelerator_memory_gib: Mapping[str, float]
) -> dict[str, tuple[QualityFlag, ...]]:
    """Flags per offer id (offers without flags are absent)."""
    flags: dict[str, list[QualityFlag]] = defaultdict(list)
    on_demand: dict[tuple[str, str, str, str], OfferContent] = {}
    for offer in offers:
        if offer.term is Term.ON_DEMAND and offer.zone is None:
            on_demand[_instance_key(offer)] = offer
    for offer in offers:
        if offer.term is Term.ON_DEMAND and offer.zone is not None:
            on_demand.setdefault(_instance_key(offer), offer)

    for offer in offers:
        base = on_demand.get(_instance_key(offer))
        if base is None:
            flags[offer.offer_id].append(QualityFlag(
                code=MISSING_ON_DEMAND,
                detail=f"no on-demand price for {offer.instance_type} in {offer.region}, so "
                       "this price cannot be checked against one",
            ))
        elif offer.term is Term.SPOT:
            spot, od = offer.price_per_gpu_hour_micros, base.price_per_gpu_hour_micros
            if spot > od:
                flags[offer.offer_id].append(QualityFlag(
                    code=SPOT_ABOVE_ON_DEMAND,
                    detail=f"spot {micros_to_text(spot)} is above on-demand "
                           f"{micros_to_text(od)} per GPU-hour",
                ))
            elif spot == od:
                flags[offer.offer_id].append(QualityFlag(
                    code=SPOT_NOT_DISCOUNTED,
                    detail="spot equals on-demand: no useful spot market here",
                ))
        elif offer.term in RESERVED_YEARS:
            committed, od = offer.price_per_gpu_hour_micros, base.price_per_gpu_hour_micros
            if committed > od:
                flags[offer.offer_id].append(QualityFlag(
                    code=RESERVED_ABOVE_ON_DEMAND,
                    detail=f"{offer.term.value} {micros_to_text(committed)} per GPU-hour "
                           f"(effective) is above on-demand {micros_to_text(od)} "
                           f"({committed / od:.2f}x): a commitment is a discount on "
                           "on-demand, so one of the two prices is wrong",
                ))

    _flag_on_demand_below_committed(offers, flags)

    groups: dict[tuple[str, str, str, str, str], list[OfferContent]] = defaultdict(list)
    for offer in offers:
        payment = offer.payment_option.value if offer.payment_option else ""
        groups[(offer.provider, offer.accelerator, offer.term.value, payment,
                offer.currency)].append(offer)
    for (provider, accelerator, term, _, _), members in groups.items():
        if len(members) < OUTLIER_MIN_GROUP:
            continue
        median = statistics.median(m.price_per_gpu_hour_micros for m in members)
        for offer in members:
            price = offer.price_per_gpu_hour_micros
            if price > OUTLIER_FACTOR * median or price * OUTLIER_FACTOR < median:
                flags[offer.offer_id].append(QualityFlag(
                    code=PRICE_OUTLIER,
                    detail=f"{micros_to_text(price)} per GPU-hour is more than "
                           f"{OUTLIER_FACTOR}x from the median {micros_to_text(round(median))} "
                           f"of {len(members)} {provider} {accelerator} {term} offers",
                ))

    for offer in offers:
        expected = accelerator_memory_gib.get(offer.accelerator)
        if expected and offer.gpus_per_instance < 1:
            expected *= offer.gpus_per_instance  # a slice states the slice's memory (AWS g6f)
        stated = offer.gpu_memory_gib
        if expected and stated is not None and (
            abs(stated - expected) > MEMORY_TOLERANCE_FRACTION * expected
        ):
            flags[offer.offer_id].append(QualityFlag(
                code=GPU_MEMORY_MISMATCH,
                detail=f"states {stated:g} GiB per GPU; {offer.accelerator} has "
                       f"{expected:g} GiB (a unit error, or a different accelerator)",
            ))
    return {offer_id: tuple(found) for offer_id, found in flags.items()}


def _flag_on_demand_below_committed(offers: Sequence[OfferContent],
                                    flags: dict[str, list[QualityFlag]]) -> None:
    """``ON_DEMAND_BELOW_COMMITTED``: each on-demand offer against the dearest real commitment
    (per GPU-hour, effective) of its provider, accelerator, region and currency."""
    dearest: dict[tuple[str, str, str, str], OfferContent] = {}
    for offer in offers:
        if offer.term in RESERVED_YEARS and not offer.indicative:
            key = (offer.provider, offer.accelerator, offer.region, offer.currency)
            held = dearest.get(key)
            if held is None or (offer.price_per_gpu_hour_micros, offer.offer_id) > (
                    held.price_per_gpu_hour_micros, held.offer_id):
                dearest[key] = offer
    for offer in offers:
        if offer.term is not Term.ON_DEMAND:
            continue
        committed = dearest.get((offer.provider, offer.accelerator, offer.region, offer.currency))
        if committed is None:
            continue
        od, rate = offer.price_per_gpu_hour_micros, committed.price_per_gpu_hour_micros
        if od < rate:
            flags[offer.offer_id].append(QualityFlag(
                code=ON_DEMAND_BELOW_COMMITTED,
                detail=f"on-demand {micros_to_text(od)} per GPU-hour is below the "
                       f"{committed.term.value} {micros_to_text(rate)} (effective) of "
                       f"{committed.instance_type} in {offer.region} ({od / rate:.2f}x): a "
                       "commitment is a discount on on-demand, so this on-demand price is "
                       "likely too low",
            ))
