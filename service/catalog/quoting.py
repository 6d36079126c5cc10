"""What a quote reads from the catalogue: the version's offers as ``PriceOffer`` values (only
the columns pricing needs, no ORM entity per offer) and on-premises purchase prices. Pricing,
policy rules and the verdict are in ``service/core/quote.py``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.catalog.mapping import offer_to_price
from service.catalog.models import Accelerator, CatalogVersionOffer, OfferRevision
from service.catalog.offers import micros_to_decimal
from service.core import pricing
from service.core.quote import OnPremInputs, PriceOffer, Term

ONPREM = Term.ONPREM.value

_COLUMNS = (
    OfferRevision.offer_id, OfferRevision.provider_id, OfferRevision.region,
    OfferRevision.zone, OfferRevision.instance_type, OfferRevision.accelerator_id,
    OfferRevision.term, OfferRevision.payment_option, OfferRevision.currency,
    OfferRevision.effective_price_per_hour_micros, OfferRevision.gpus_per_instance,
    OfferRevision.nvlink_domain, OfferRevision.inter_node_gbps, OfferRevision.fabric_source,
    OfferRevision.interconnect,
    OfferRevision.interruption_rate_per_hour, OfferRevision.interruption_rate_source,
    OfferRevision.region_carbon_g_per_kwh, OfferRevision.as_of, OfferRevision.indicative,
    OfferRevision.source, OfferRevision.quality_flags, OfferRevision.observed_at,
)


def load_offers(
    session: Session, version_id: str, accelerators: Iterable[str], *, terms: Iterable[str],
    providers: Iterable[str] = (), regions: Iterable[str] = (), currency: str = "USD",
) -> list[PriceOffer]:
    """The version's offers a quote can use, filtered in SQL, in offer-id order; each carries
    the on-demand rate of the same instance and region (for break-even figures)."""
    wanted = {t for t in terms if t != ONPREM}
    query = (
        select(*_COLUMNS)
        .join(CatalogVersionOffer, CatalogVersionOffer.revision_id == OfferRevision.id)
        .where(CatalogVersionOffer.version_id == version_id,
               OfferRevision.accelerator_id.in_(set(accelerators)),
               OfferRevision.term.in_(wanted | {Term.ON_DEMAND.value}),
               OfferRevision.currency == currency)
        .order_by(OfferRevision.offer_id)
    )
    providers, regions = set(providers), set(regions)
    if providers:
        query = query.where(OfferRevision.provider_id.in_(providers))
    if regions:
        query = query.where(OfferRevision.region.in_(regions))
    rows = session.execute(query).all()
    on_demand = {(r.provider_id, r.instance_type, r.region):
                 micros_to_decimal(r.effective_price_per_hour_micros)
                 for r in rows if r.term == Term.ON_DEMAND.value and r.zone is None}
    return [offer_to_price(r, on_demand.get((r.provider_id, r.instance_type, r.region)))
            for r in rows if r.term in wanted]


def onprem_inputs(session: Session, accelerator_id: str,
                  request: Mapping[str, Any]) -> OnPremInputs:
    """Purchase price (the request's, else the catalogue's indicative one) and TCO inputs."""
    prices = request.get("purchase_price_per_gpu")
    price: Decimal | None = None
    if isinstance(prices, dict):
        price = Decimal(prices[accelerator_id]) if accelerator_id in prices else None
    elif prices is not None:
        price = Decimal(prices)
    basis = "request"
    if price is None:
        row = session.get(Accelerator, accelerator_id)
        if row is not None and row.purchase_price_usd_micros:
            price = micros_to_decimal(row.purchase_price_usd_micros)
            basis = f"accelerator catalogue (indicative: {row.price_basis})"
    if price is None:
        return OnPremInputs(purchase_price_per_gpu=None, basis="none", tco=None)
    tco = pricing.OnPremInputs(
        purchase_price_per_gpu=price,
        overhead_fraction=Decimal(request.get("overhead_fraction",
                                              pricing.DEFAULT_ONPREM_OVERHEAD_FRACTION)),
        depreciation_years=int(request.get("depreciation_years",
                                           pricing.DEFAULT_DEPRECIATION_YEARS)),
        electricity_per_kwh=Decimal(request.get("electricity_per_kwh",
                                                pricing.DEFAULT_ELECTRICITY_USD_PER_KWH)),
        pue=Decimal(request.get("pue", pricing.DEFAULT_ONPREM_PUE)),
        operations_fraction_per_year=Decimal(request.get(
            "operations_fraction_per_year", pricing.DEFAULT_OPERATIONS_FRACTION)),
    )
    return OnPremInputs(purchase_price_per_gpu=price, basis=basis, tco=tco,
                        indicative=basis != "request")
