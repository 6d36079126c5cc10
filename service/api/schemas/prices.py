"""Price catalogue requests and responses. Money is a decimal string in ``currency``."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from service.api.schemas.common import NoteText, RequestModel, TextRule
from service.catalog.models import CatalogVersion, OfferRevision
from service.catalog.offers import MAX_PRICE_PER_HOUR, PaymentOption, Term, micros_to_text

DecimalString = Annotated[
    str, StringConstraints(pattern=r"^[0-9]{1,13}(\.[0-9]{1,6})?$", max_length=20)
]
"""A non-negative decimal with at most 6 places, as a string (JSON numbers lose cents)."""


def _at_most(limit: Decimal, unit: str) -> AfterValidator:
    def check(value: str) -> str:
        if Decimal(value) > limit:
            raise ValueError(f"must be at most {limit:f} {unit}")
        return value
    return AfterValidator(check)


MAX_PRICE_PER_GPU_HOUR = MAX_PRICE_PER_HOUR
"""1,000,000 per GPU-hour: the import's cap per instance-hour (``MAX_PRICE_PER_HOUR``), far
above any GPU's price (a few to tens of USD). A request's price per GPU-hour is bounded so
that every cost made from it stays within the 28 digits of Decimal arithmetic (issue 36: a
price of 10^13 with a tiny load overflowed the cost per million tokens)."""
MAX_PURCHASE_PRICE = Decimal(10_000_000)
"""10,000,000 per accelerator: over 100 times the price of any GPU sold (an H100 lists at
25,000-40,000 USD), and within the integer micro-units the database stores (a price of
10^13 overflowed the 64-bit column, issue 36)."""
MAX_ELECTRICITY_PER_KWH = Decimal(1_000)
"""1,000 per kWh: 10,000 times an industrial tariff (about 0.10 USD/kWh)."""
PricePerGpuHour = Annotated[DecimalString, _at_most(MAX_PRICE_PER_GPU_HOUR, "per GPU-hour")]
PurchasePrice = Annotated[DecimalString, _at_most(MAX_PURCHASE_PRICE, "per accelerator")]
ElectricityPrice = Annotated[DecimalString, _at_most(MAX_ELECTRICITY_PER_KWH, "per kWh")]


def as_utc(moment: dt.datetime) -> dt.datetime:
    """SQLite returns naive datetimes; everything stored is UTC."""
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


class QualityFlagOut(BaseModel):
    code: str = Field(examples=["spot_above_on_demand"],
                      description="One of spot_above_on_demand, spot_not_discounted, "
                                  "reserved_above_on_demand, price_outlier, "
                                  "missing_on_demand, gpu_memory_mismatch.")
    detail: str


OFFER_EXAMPLE: dict[str, Any] = {
    "id": "off_3f0c2b6e9c1d4a7b8e5f6a1b", "catalog_version": "cv_000001", "revision": 412,
    "provider": "aws", "region": "us-east-1", "zone": None, "instance_type": "p5.48xlarge",
    "accelerator": "h100-sxm5-80gb", "gpus_per_instance": 8.0, "vcpus": 192.0,
    "memory_gib": 2048.0, "gpu_memory_gib": 80.0, "interconnect": None, "gpus_per_node": 8.0,
    "nvlink_domain": 8, "inter_node_gbps": 3200.0,
    "fabric_source": "Amazon EC2 P5 instances (aws.amazon.com/ec2/instance-types/p5)",
    "term": "on_demand",
    "payment_option": None, "currency": "USD", "price_per_hour": "55.040000",
    "upfront_fee": "0.000000", "effective_price_per_hour": "55.040000",
    "price_per_gpu_hour": "6.880000", "interruption_rate_per_hour": None,
    "interruption_rate_source": None, "region_carbon_g_per_kwh": None,
    "region_carbon_source": None, "source": "SkyPilot catalog v8 aws/vms.csv",
    "as_of": None, "age_days": None, "stale": True, "observed_at": "2026-11-22",
    "observed_age_days": 4, "indicative": False, "notes": "", "quality_flags": [],
}


class OfferOut(BaseModel):
    """One price offer as a catalogue version holds it."""

    model_config = ConfigDict(json_schema_extra={"examples": [OFFER_EXAMPLE]})

    id: str = Field(description="Stable across versions: derived from provider, instance "
                                "type, region, zone, term and payment option.")
    catalog_version: str
    revision: int = Field(description="The stored revision; the ETag names it.")
    provider: str
    region: str
    zone: str | None
    instance_type: str
    accelerator: str
    gpus_per_instance: float = Field(description="May be fractional (AWS g6f: 0.25).")
    vcpus: float | None
    memory_gib: float | None
    gpu_memory_gib: float | None = Field(description="Memory per GPU as the source states it.")
    interconnect: str | None
    gpus_per_node: float = Field(description="GPUs in one instance (one node of the job).")
    nvlink_domain: int | None = Field(
        description="GPUs of one instance that share NVLink/NVSwitch; null when not "
                    "documented. A plan's TP × CP group must fit in it.")
    inter_node_gbps: float | None = Field(
        description="One instance's back-end network for GPU traffic between instances, "
                    "Gbit/s; null when not documented (the offer then hosts one instance).")
    fabric_source: str | None = Field(description="The provider document for the fabric.")
    term: Term
    payment_option: PaymentOption | None
    currency: str = Field(description="ISO 4217.")
    price_per_hour: str = Field(description="Per instance-hour.")
    upfront_fee: str
    effective_price_per_hour: str = Field(
        description="price_per_hour + upfront_fee ÷ hours of the term.")
    price_per_gpu_hour: str = Field(
        description="effective_price_per_hour ÷ gpus_per_instance, half-even to 6 places.")
    interruption_rate_per_hour: float | None = Field(
        description="Spot only: interruptions per instance-hour.")
    interruption_rate_source: str | None
    region_carbon_g_per_kwh: float | None
    region_carbon_source: str | None
    source: str
    as_of: dt.date | None = Field(description=(
        "The date the price held; null when its source gives no date (imported as "
        "\"unknown\"). An undated offer is stale and fails a policy's max_price_age_s."))
    age_days: int | None = Field(description="Days from as_of to today (UTC) when answered; "
                                              "null when as_of is unknown.")
    stale: bool = Field(description="age_days is over CQ_STALE_AFTER_DAYS (default 180), or "
                                    "as_of is unknown: re-check the price before relying on "
                                    "it.")
    observed_at: dt.date | None = Field(
        examples=["2026-11-22"],
        description=(
            "The day this catalogue read the price, apart from as_of (when the provider "
            "published it): the seed file's copy day (service/catalog/seed/prices/README.md), "
            "or the day of the import, refresh or edit that brought it. null when that day was "
            "not recorded (offers stored before schema 0013). A quote on a price whose as_of "
            "is unknown warns (price_date_unknown_observed) while observed_at is within the "
            "policy's max_observed_age_days and fails after."))
    observed_age_days: int | None = Field(
        examples=[4],
        description="Days from observed_at to today (UTC) when answered; null when "
                    "observed_at is unknown.")
    indicative: bool = Field(description="True when the price is an estimate, not a list "
                                         "price (derived reserved rates, third-party quotes).")
    notes: str
    quality_flags: list[QualityFlagOut]

    @classmethod
    def from_row(cls, row: OfferRevision, version_id: str, *, today: dt.date,
                 stale_after_days: int) -> OfferOut:
        """The stored revision as answered on ``today`` (its age and staleness)."""
        age_days = None if row.as_of is None else (today - row.as_of).days
        return cls(
            age_days=age_days, stale=age_days is None or age_days > stale_after_days,
            observed_at=row.observed_at,
            observed_age_days=None if row.observed_at is None else (
                today - row.observed_at).days,
            id=row.offer_id, catalog_version=version_id, revision=row.id,
            provider=row.provider_id, region=row.region, zone=row.zone,
            instance_type=row.instance_type, accelerator=row.accelerator_id,
            gpus_per_instance=row.gpus_per_instance, vcpus=row.vcpus,
            memory_gib=row.memory_gib, gpu_memory_gib=row.gpu_memory_gib,
            interconnect=row.interconnect, gpus_per_node=row.gpus_per_instance,
            nvlink_domain=row.nvlink_domain, inter_node_gbps=row.inter_node_gbps,
            fabric_source=row.fabric_source, term=Term(row.term),
            payment_option=PaymentOption(row.payment_option) if row.payment_option else None,
            currency=row.currency, price_per_hour=micros_to_text(row.price_per_hour_micros),
            upfront_fee=micros_to_text(row.upfront_fee_micros),
            effective_price_per_hour=micros_to_text(row.effective_price_per_hour_micros),
            price_per_gpu_hour=micros_to_text(row.price_per_gpu_hour_micros),
            interruption_rate_per_hour=row.interruption_rate_per_hour,
            interruption_rate_source=row.interruption_rate_source,
            region_carbon_g_per_kwh=row.region_carbon_g_per_kwh,
            region_carbon_source=row.region_carbon_source, source=row.source,
            as_of=row.as_of, indicative=row.indicative, notes=row.notes,
            quality_flags=[QualityFlagOut(**flag) for flag in row.quality_flags],
        )


class OfferUpdate(RequestModel):
    """The editable part of an offer (``PUT /v1/offers/{id}``). Identity fields (provider,
    instance type, region, zone, term, payment option) and instance facts cannot change:
    import a new offer instead. Omitted optional fields are cleared."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, json_schema_extra={
        "examples": [{
            "price_per_hour": "52.000000", "source": "AWS price list, re-read 2026-11-20",
            "as_of": "2026-11-20", "indicative": False, "note": "AWS price cut",
            "observed_at": "2026-11-20",
        }]})

    price_per_hour: DecimalString
    upfront_fee: DecimalString | None = None
    interruption_rate_per_hour: float | None = Field(default=None, ge=0, le=1, strict=True)
    interruption_rate_source: Annotated[str, TextRule(max_length=2000)] | None = None
    region_carbon_g_per_kwh: float | None = Field(default=None, ge=0, le=2000, strict=True)
    region_carbon_source: Annotated[str, TextRule(max_length=2000)] | None = None
    source: Annotated[str, TextRule(min_length=1, max_length=2000)]
    as_of: str | None = Field(pattern=r"^(\d{4}-\d{2}-\d{2}|unknown)$",
                              examples=["2026-11-20"],
                              description="Date the price held, YYYY-MM-DD; \"unknown\" or "
                                          "null when the source gives none (never a stand-in "
                                          "date).")
    indicative: bool = Field(strict=True)
    notes: Annotated[str, TextRule(max_length=4000)] = ""
    observed_at: str | None = Field(
        default=None, pattern=r"^(\d{4}-\d{2}-\d{2}|unknown)$", examples=["2026-11-20"],
        description="The day the price was read, YYYY-MM-DD, not after today (UTC); omitted: "
                    "the edit's day (an edit restates the price); \"unknown\" when the day is "
                    "not known.")
    note: NoteText = Field(default="", description="Why the price changed; stored on the new "
                                                    "version (no control characters).")

    def changes(self) -> dict[str, Any]:
        """The edited columns in the import format."""
        values = self.model_dump(exclude={"note", "observed_at"})
        if self.observed_at is not None:
            values["observed_at"] = self.observed_at
        values["indicative"] = "true" if self.indicative else "false"
        values["upfront_fee"] = self.upfront_fee or "0"
        values["as_of"] = self.as_of or "unknown"
        return values


class QualityCount(BaseModel):
    count: int
    offer_ids: list[str] = Field(description="The first 50 flagged offers.")


class QualityReport(BaseModel):
    flagged_offers: int
    flags: dict[str, QualityCount]


class VersionChanges(BaseModel):
    added: int
    changed: int
    removed: int
    unchanged: int


class CatalogVersionOut(BaseModel):
    """An immutable catalogue version."""

    id: str = Field(examples=["cv_000002"])
    number: int
    parent_id: str | None
    created_at: dt.datetime
    created_by: str = Field(description="API key name, or 'seed'.")
    note: str
    kind: str = Field(description="seed, import-replace, import-patch or edit.")
    content_hash: str = Field(description="SHA-256 over the offers' content: equal content, "
                                          "equal hash.")
    offer_count: int
    current: bool

    @classmethod
    def from_row(cls, row: CatalogVersion, current_id: str | None) -> CatalogVersionOut:
        return cls(
            id=row.id, number=row.number, parent_id=row.parent_id,
            created_at=as_utc(row.created_at),
            created_by=row.created_by, note=row.note, kind=row.kind,
            content_hash=row.content_hash, offer_count=row.offer_count,
            current=row.id == current_id,
        )


class CatalogVersionDetail(CatalogVersionOut):
    """A version with its counts and data-quality report."""

    by_provider: dict[str, int]
    by_term: dict[str, int]
    indicative: int
    changes: VersionChanges
    quality: QualityReport

    @classmethod
    def from_row(cls, row: CatalogVersion, current_id: str | None) -> CatalogVersionDetail:
        base = CatalogVersionOut.from_row(row, current_id).model_dump()
        return cls(**base, **row.report)
