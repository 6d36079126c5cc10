"""Price offers as plain values: the import/export format, row validation, derived prices,
stable ids and content hashes.

One format serves CSV and JSON imports and exports (``COLUMNS``). Money is parsed as
``Decimal`` and kept as integer micro-units of the offer's currency; it is never a float.
Derived columns (``effective_price_per_hour``, ``price_per_gpu_hour``, ``quality_flags``) are
written by exports, accepted by imports and always recomputed, so an export imports back
unchanged.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypeVar

from service.catalog.currencies import is_currency
from service.catalog.seed_facts import (
    default_interruption_rate,
    instance_fabric,
    instance_protocol,
)
from service.core import quote as core_quote
from service.core.quote import OFFER_TERM_NAMES
from service.core.units import HOURS_PER_YEAR

MICROS = Decimal(1_000_000)
_CONTROL_CHARACTER = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")
"""A C0 control character other than tab, line feed and carriage return (a row's text field
refuses it). One regular-expression scan, not a Python loop over the characters: the seed's
2,953 offers made 5.4 million generator steps on every refresh."""
_LONE_CARRIAGE_RETURN = re.compile("\r(?!\n)")
MAX_PRICE_PER_HOUR = Decimal(1_000_000)
MAX_UPFRONT_FEE = Decimal(10_000_000_000)
MAX_IMPORT_ROWS = 20_000
MIN_GPUS_PER_INSTANCE = 0.0625
"""The smallest GPU share sold: 1/16 (Azure NVv4 sells 1/8 of an MI25, AWS g6f 1/4 of an L4);
a smaller value is a unit error, and 1e-300 overflowed the per-GPU price (issue 14)."""
MAX_GPUS_PER_INSTANCE = 16_384
"""Largest instance: a TPU slice is one instance, and the largest single-ICI slice we know of is
a TPU v5p pod of 8,960 chips (Google Cloud TPU v5p system architecture page)."""


E = TypeVar("E", bound=StrEnum)


class Term(StrEnum):
    ON_DEMAND = "on_demand"
    SPOT = "spot"
    RESERVED_1Y = "reserved_1y"
    RESERVED_3Y = "reserved_3y"
    CAPACITY_BLOCK = "capacity_block"


if tuple(Term) != OFFER_TERM_NAMES:  # pragma: no cover - a check at import
    raise AssertionError(f"catalogue terms {tuple(Term)} are not the core's {OFFER_TERM_NAMES}")

RESERVED_YEARS: Mapping[Term, int] = MappingProxyType(
    {Term(term.value): years for term, years in core_quote.RESERVED_YEARS.items()})
"""The core's reservation years (``service.core.quote.RESERVED_YEARS``), by this enum."""


class PaymentOption(StrEnum):
    NO_UPFRONT = "no_upfront"
    PARTIAL_UPFRONT = "partial_upfront"
    ALL_UPFRONT = "all_upfront"
    SAVINGS_PLAN_NO_UPFRONT = "savings_plan_no_upfront"
    """AWS EC2 Instance Savings Plan paid by the hour (imported from AWS's Savings Plans
    price list; reserved terms only)."""
    SAVINGS_PLAN_ALL_UPFRONT = "savings_plan_all_upfront"



CONTENT_COLUMNS = (
    "provider", "region", "zone", "instance_type", "accelerator", "gpus_per_instance", "vcpus",
    "memory_gib", "gpu_memory_gib", "interconnect", "nvlink_domain", "inter_node_gbps",
    "fabric_source", "term", "payment_option", "currency",
    "price_per_hour", "upfront_fee", "interruption_rate_per_hour", "interruption_rate_source",
    "region_carbon_g_per_kwh", "region_carbon_source", "source", "as_of", "indicative", "notes",
    "observed_at",
)
"""What an offer is: hashed, imported, exported. ``observed_at`` is last so that files written
before it (issue 39) keep their column order; a row without it is dated by its import."""
DERIVED_COLUMNS = ("effective_price_per_hour", "price_per_gpu_hour", "quality_flags")
COLUMNS = ("id", *CONTENT_COLUMNS, *DERIVED_COLUMNS)
"""The CSV header of exports and the accepted keys of import rows, in this order."""

FREE_TEXT_COLUMNS = ("interconnect", "interruption_rate_source", "region_carbon_source",
                     "fabric_source", "source", "notes")
"""Columns a person writes; the only ones a spreadsheet could run as a formula."""
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")
"""A cell starting with one of these is run as a formula by spreadsheets (OWASP, CSV
Injection)."""


def csv_escape(text: str) -> str:
    """A free-text cell as CSV exports write it: a leading formula character (or an
    apostrophe, so that the escape can be undone exactly) gets an apostrophe in front, which
    spreadsheets show as text."""
    return "'" + text if text.startswith((*FORMULA_PREFIXES, "'")) else text


def csv_unescape(text: str) -> str:
    """The inverse of ``csv_escape``, applied by CSV imports: one leading apostrophe goes."""
    return text[1:] if text.startswith("'") else text


SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$")
CURRENCY = re.compile(r"^[A-Z]{3}$")
ASCII_DECIMAL = re.compile(r"^[0-9]{1,13}(\.[0-9]{1,6})?$", re.ASCII)

class OfferRowError(ValueError):
    """One bad field in one import row (1-based data row number)."""

    def __init__(self, row: int, field_name: str, message: str, code: str = "invalid") -> None:
        super().__init__(f"row {row}, {field_name}: {message}")
        self.row = row
        self.field = field_name
        self.message = message
        self.code = code


class ImportRejectedError(ValueError):
    """An import with at least one bad row; nothing of it is stored."""

    def __init__(self, errors: Sequence[OfferRowError]) -> None:
        shown = "; ".join(str(e) for e in errors[:5])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        super().__init__(f"{len(errors)} invalid field(s): {shown}{more}")
        self.errors = list(errors)


@dataclass(frozen=True, slots=True, kw_only=True)
class QualityFlag:
    code: str
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class OfferContent:
    """Everything an offer states. Money in micro-units of ``currency``."""

    provider: str
    region: str
    zone: str | None
    instance_type: str
    accelerator: str
    gpus_per_instance: float
    vcpus: float | None
    memory_gib: float | None
    gpu_memory_gib: float | None
    interconnect: str | None
    nvlink_domain: int | None
    """GPUs of one instance that share NVLink/NVSwitch (provider documentation)."""
    inter_node_gbps: float | None
    """One instance's back-end network for GPU traffic between instances, Gbit/s."""
    fabric_source: str | None
    term: Term
    payment_option: PaymentOption | None
    currency: str
    price_per_hour_micros: int
    upfront_fee_micros: int
    interruption_rate_per_hour: float | None
    interruption_rate_source: str | None
    region_carbon_g_per_kwh: float | None
    region_carbon_source: str | None
    source: str
    as_of: dt.date | None
    """The date the price held; None when its source gives none (written ``unknown``, never a
    stand-in date; issue 17)."""
    indicative: bool
    notes: str
    observed_at: dt.date | None = None
    """The day this catalogue read the price: the seed file's copy day, or the day of the
    import or refresh that brought it (``parse_offers``' ``observed_on``). None when that day
    was not recorded (revisions stored before schema 0013). Apart from ``as_of``: a price read
    yesterday may have been published at an unknown date (issue 39)."""

    @property
    def offer_id(self) -> str:
        """Stable id from the natural key: the same offer has it in every version."""
        key = "|".join((self.provider, self.instance_type, self.region, self.zone or "",
                        self.term.value, self.payment_option.value if self.payment_option else ""))
        return "off_" + hashlib.sha256(key.encode()).hexdigest()[:24]

    @property
    def effective_price_per_hour_micros(self) -> int:
        """Hourly price plus the up-front fee spread over the term (AWS's effective rate)."""
        years = RESERVED_YEARS.get(self.term)
        if not years or not self.upfront_fee_micros:
            return self.price_per_hour_micros
        spread = Decimal(self.upfront_fee_micros) / (years * HOURS_PER_YEAR)
        return self.price_per_hour_micros + int(spread.to_integral_value(ROUND_HALF_EVEN))

    @property
    def price_per_gpu_hour_micros(self) -> int:
        """Effective instance price ÷ GPUs per instance (MODEL.md §7), half-even to the micro."""
        per_gpu = Decimal(self.effective_price_per_hour_micros) / Decimal(
            repr(self.gpus_per_instance)
        )
        return int(per_gpu.to_integral_value(ROUND_HALF_EVEN))

    def canonical(self) -> dict[str, str]:
        """The content columns as canonical strings: the basis of hashes and CSV exports."""
        values = {name: _text(getattr(self, _attr(name))) if not name.endswith(_MONEY_SUFFIXES)
                  else micros_to_text(getattr(self, _attr(name))) for name in CONTENT_COLUMNS}
        if self.as_of is None:
            values["as_of"] = UNKNOWN_DATE
        if self.observed_at is None:
            values["observed_at"] = UNKNOWN_DATE
        return values

    @property
    def content_hash(self) -> str:
        """SHA-256 of the canonical columns. An unknown ``observed_at`` is left out, so a
        revision stored before the column (schema 0013) keeps the hash it was stored with,
        and so do the catalogue versions and quotes that name it."""
        values = self.canonical()
        if self.observed_at is None:
            del values["observed_at"]
        return hashlib.sha256(
            json.dumps(values, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()


_MONEY_SUFFIXES = ("price_per_hour", "upfront_fee")
UNKNOWN_DATE = "unknown"
"""What ``as_of`` says when the source gives no date (import, export and the API)."""


def _attr(column: str) -> str:
    if column.endswith(_MONEY_SUFFIXES):
        return column + "_micros"
    return column


def micros_to_text(micros: int) -> str:
    """Integer micro-units as a decimal string with six places: 55040000 -> '55.040000'."""
    return str((Decimal(micros) / MICROS).quantize(Decimal("0.000001")))


def micros_to_decimal(micros: int) -> Decimal:
    return (Decimal(micros) / MICROS).quantize(Decimal("0.000001"))


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def version_content_hash(offers: Iterable[OfferContent]) -> str:
    """SHA-256 over the offers' content hashes in id order: equal content, equal hash."""
    digest = hashlib.sha256()
    for offer_id, content_hash in sorted((o.offer_id, o.content_hash) for o in offers):
        digest.update(f"{offer_id}:{content_hash}\n".encode())
    return digest.hexdigest()


# --- parsing -------------------------------------------------------------------------------


@dataclass(slots=True)
class _RowParser:
    row: int
    values: Mapping[str, Any]
    errors: list[OfferRowError] = field(default_factory=list)

    def fail(self, name: str, message: str, code: str = "invalid") -> None:
        self.errors.append(OfferRowError(self.row, name, message, code))

    def raw(self, name: str) -> Any:
        value = self.values.get(name)
        if isinstance(value, str):
            value = value.strip()
            return value or None
        return value

    def text(self, name: str, *, required: bool, max_length: int,
             pattern: re.Pattern[str] | None = None) -> str | None:
        value = self.raw(name)
        if value is None:
            if required:
                self.fail(name, "is required", "missing")
            return None
        if not isinstance(value, str):
            self.fail(name, "must be a string", "string_type")
            return None
        if len(value) > max_length:
            self.fail(name, f"must be at most {max_length} characters", "string_too_long")
            return None
        if _CONTROL_CHARACTER.search(value) or _LONE_CARRIAGE_RETURN.search(value):
            self.fail(name, "must not contain control characters (a carriage return only "
                            "before a line feed)", "string_control_character")
            return None
        if pattern is not None and not pattern.match(value):
            self.fail(name, f"must match {pattern.pattern}", "string_pattern_mismatch")
            return None
        return value

    def number(self, name: str, *, required: bool, low: float, high: float,
               low_inclusive: bool = False) -> float | None:
        value = self.raw(name)
        if value is None:
            if required:
                self.fail(name, "is required", "missing")
            return None
        if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
            self.fail(name, "must be a number", "float_type")
            return None
        try:
            number = float(value)
        except (ValueError, OverflowError):
            self.fail(name, "must be a number", "float_parsing")
            return None
        if not math.isfinite(number):
            self.fail(name, "must be a finite number", "finite_number")
            return None
        too_low = number < low if low_inclusive else number <= low
        if too_low or number > high:
            bound = ">=" if low_inclusive else ">"
            self.fail(name, f"must be {bound} {low:g} and <= {high:g}", "out_of_range")
            return None
        return number

    def money(self, name: str, *, required: bool, high: Decimal) -> int | None:
        value = self.raw(name)
        if value is None:
            if required:
                self.fail(name, "is required", "missing")
            return None
        if isinstance(value, bool | float):
            self.fail(name, "must be a decimal string such as \"12.50\", not a float",
                      "decimal_type")
            return None
        try:
            amount = Decimal(str(value))
        except InvalidOperation:
            self.fail(name, "must be a decimal number", "decimal_parsing")
            return None
        if not amount.is_finite():
            self.fail(name, "must be a finite decimal", "finite_number")
            return None
        if amount < 0 or amount > high:
            self.fail(name, f"must be >= 0 and <= {high}", "out_of_range")
            return None
        micros = amount * MICROS
        if micros != micros.to_integral_value():
            self.fail(name, "must have at most 6 decimal places", "decimal_max_places")
            return None
        if not ASCII_DECIMAL.match(str(value)):
            self.fail(name, "must be digits 0-9 with an optional point (no exponent, sign or "
                            "other script's digits)", "decimal_parsing")
            return None
        return int(micros)

    def choice(self, name: str, enum: type[E], *, required: bool) -> E | None:
        value = self.text(name, required=required, max_length=32)
        if value is None:
            return None
        try:
            return enum(value)
        except ValueError:
            allowed = ", ".join(e.value for e in enum)
            self.fail(name, f"must be one of {allowed}", "enum")
            return None

    def boolean(self, name: str) -> bool | None:
        value = self.raw(name)
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in {"true", "false"}:
            return value.lower() == "true"
        self.fail(name, "must be true or false", "bool_type")
        return None

    def date(self, name: str) -> dt.date | None:
        value = self.text(name, required=True, max_length=10)
        if value is None:
            return None
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            self.fail(name, f"must be a date YYYY-MM-DD or {UNKNOWN_DATE}", "date_parsing")
            return None


def with_sourced_facts(offer: OfferContent, *, replace_legacy_rates: bool = False,
                       ) -> OfferContent:
    """The offer with what the seed's sourced facts know and it leaves out: the instance's
    fabric when it gives none, its fabric protocol as ``interconnect`` when it states none
    (``seed_facts.instance_protocol``), and a spot interruption rate when it gives none (or, with
    ``replace_legacy_rates``, when its rate is an unlabelled ``default:`` from before the
    sourced table)."""
    changes: dict[str, Any] = {}
    if offer.interconnect is None:
        protocol = instance_protocol(offer.provider, offer.instance_type)
        if protocol is not None:
            changes.update(interconnect=protocol)
    if offer.nvlink_domain is None and offer.inter_node_gbps is None:
        known = instance_fabric(offer.provider, offer.instance_type)
        if known is not None:
            changes.update(nvlink_domain=known[0], inter_node_gbps=known[1],
                           fabric_source=known[2])
    legacy = replace_legacy_rates and (offer.interruption_rate_source or "").startswith(
        "default:")
    if offer.term is Term.SPOT and (offer.interruption_rate_per_hour is None or legacy):
        rate, source = default_interruption_rate(offer.provider, offer.instance_type,
                                                 offer.region)
        changes.update(interruption_rate_per_hour=rate, interruption_rate_source=source)
    return dataclasses.replace(offer, **changes) if changes else offer


def parse_offer(row: int, values: Mapping[str, Any], accelerators: set[str], *,
                observed_on: dt.date | None = None) -> OfferContent:
    """Validate one import row; raises ImportRejectedError with every bad field of the row.
    A row that states no ``observed_at`` was read on ``observed_on`` (the import's day; None:
    unknown); ``unknown`` keeps it unknown, and a stated day after ``observed_on`` is
    refused (nobody reads a price in the future)."""
    p = _RowParser(row, values)
    unknown = sorted(set(values) - set(COLUMNS))
    for name in unknown:
        p.fail(str(name)[:64], "is not a column of the offer format", "extra_forbidden")
    provider = p.text("provider", required=True, max_length=64, pattern=SLUG)
    region = p.text("region", required=True, max_length=64, pattern=NAME)
    zone = p.text("zone", required=False, max_length=64, pattern=NAME)
    instance_type = p.text("instance_type", required=True, max_length=128, pattern=NAME)
    accelerator = p.text("accelerator", required=True, max_length=64)
    if accelerator is not None and accelerator not in accelerators:
        p.fail("accelerator", "is not an accelerator id of the catalogue (GET /v1/accelerators)",
               "unknown_accelerator")
    gpus = p.number("gpus_per_instance", required=True, low=MIN_GPUS_PER_INSTANCE,
                    high=MAX_GPUS_PER_INSTANCE, low_inclusive=True)
    vcpus = p.number("vcpus", required=False, low=0, high=100_000)
    memory_gib = p.number("memory_gib", required=False, low=0, high=1_000_000)
    gpu_memory_gib = p.number("gpu_memory_gib", required=False, low=0, high=10_000)
    interconnect = p.text("interconnect", required=False, max_length=2000)
    nvlink_domain = p.number("nvlink_domain", required=False, low=1,
                             high=MAX_GPUS_PER_INSTANCE, low_inclusive=True)
    if nvlink_domain is not None and nvlink_domain != int(nvlink_domain):
        p.fail("nvlink_domain", "must be a whole number of GPUs", "int_from_float")
    inter_node = p.number("inter_node_gbps", required=False, low=0, high=1_000_000,
                          low_inclusive=True)
    fabric_source = p.text("fabric_source", required=False, max_length=2000)
    term = p.choice("term", Term, required=True)
    payment = p.choice("payment_option", PaymentOption, required=False)
    currency = p.text("currency", required=True, max_length=3, pattern=CURRENCY)
    if currency is not None and not is_currency(currency):
        p.fail("currency", "must be an ISO 4217 currency code in use (XXX and XTS are not)",
               "currency")
        currency = None
    price = p.money("price_per_hour", required=True, high=MAX_PRICE_PER_HOUR)
    upfront = p.money("upfront_fee", required=False, high=MAX_UPFRONT_FEE) or 0
    rate = p.number("interruption_rate_per_hour", required=False, low=0, high=1,
                    low_inclusive=True)
    rate_source = p.text("interruption_rate_source", required=False, max_length=2000)
    carbon = p.number("region_carbon_g_per_kwh", required=False, low=0, high=2000,
                      low_inclusive=True)
    carbon_source = p.text("region_carbon_source", required=False, max_length=2000)
    source = p.text("source", required=True, max_length=2000)
    as_of_text = p.text("as_of", required=True, max_length=10)
    as_of = None if as_of_text in (None, UNKNOWN_DATE) else p.date("as_of")
    indicative = p.boolean("indicative")
    notes = p.text("notes", required=False, max_length=4000) or ""
    observed_text = p.text("observed_at", required=False, max_length=10)
    observed_at = (observed_on if observed_text is None
                   else None if observed_text == UNKNOWN_DATE else p.date("observed_at"))
    if (observed_text not in (None, UNKNOWN_DATE) and observed_at is not None
            and observed_on is not None and observed_at > observed_on):
        p.fail("observed_at", f"must not be after the import's day ({observed_on.isoformat()})",
               "date_in_future")

    if term is not None:
        if term in RESERVED_YEARS and payment is None:
            p.fail("payment_option", "is required for reserved terms", "missing")
        if term in (Term.ON_DEMAND, Term.SPOT) and payment is not None:
            p.fail("payment_option", "applies only to reserved and capacity_block terms",
                   "not_applicable")
        if term not in RESERVED_YEARS and upfront:
            p.fail("upfront_fee", "applies only to reserved terms", "not_applicable")
        if term is not Term.SPOT and rate is not None:
            p.fail("interruption_rate_per_hour", "applies only to spot offers", "not_applicable")
        if price == 0 and not upfront:
            p.fail("price_per_hour", "must be > 0 unless an up-front fee is given",
                   "greater_than")
    if (nvlink_domain is not None or inter_node is not None) and fabric_source is None:
        p.fail("fabric_source", "is required when nvlink_domain or inter_node_gbps is given",
               "missing")
    if (nvlink_domain is not None and gpus is not None and gpus >= 1
            and nvlink_domain > gpus):
        p.fail("nvlink_domain", "must be at most gpus_per_instance", "out_of_range")
    if carbon is not None and carbon_source is None:
        p.fail("region_carbon_source", "is required when region_carbon_g_per_kwh is given",
               "missing")
    if (p.errors or provider is None or region is None or instance_type is None
            or accelerator is None or gpus is None or term is None or currency is None
            or price is None or source is None or as_of_text is None
            or (as_of is None and as_of_text != UNKNOWN_DATE) or indicative is None
            or (observed_at is None and observed_text not in (None, UNKNOWN_DATE))):
        raise ImportRejectedError(p.errors)
    offer = with_sourced_facts(OfferContent(
        provider=provider, region=region, zone=zone, instance_type=instance_type,
        accelerator=accelerator, gpus_per_instance=gpus, vcpus=vcpus, memory_gib=memory_gib,
        gpu_memory_gib=gpu_memory_gib, interconnect=interconnect,
        nvlink_domain=int(nvlink_domain) if nvlink_domain is not None else None,
        inter_node_gbps=inter_node, fabric_source=fabric_source, term=term,
        payment_option=payment, currency=currency, price_per_hour_micros=price,
        upfront_fee_micros=upfront, interruption_rate_per_hour=rate,
        interruption_rate_source=rate_source, region_carbon_g_per_kwh=carbon,
        region_carbon_source=carbon_source, source=source, as_of=as_of,
        indicative=indicative, notes=notes, observed_at=observed_at,
    ))
    given_id = p.raw("id")
    if given_id is not None and given_id != offer.offer_id:
        raise ImportRejectedError([OfferRowError(
            row, "id", f"does not match the offer's natural key (expected {offer.offer_id}); "
            "ids are derived from provider, instance_type, region, zone, term and "
            "payment_option", "id_mismatch")])
    return offer


def parse_offers(rows: Sequence[Mapping[str, Any]], accelerators: set[str], *,
                 observed_on: dt.date | None = None) -> list[OfferContent]:
    """Validate every row; all or nothing. Duplicate natural keys are errors too. A row that
    states no ``observed_at`` was read on ``observed_on`` (``parse_offer``)."""
    if not rows:
        raise ImportRejectedError([OfferRowError(
            0, "offers", "an import needs at least one offer (an empty replace would empty "
            "the catalogue)", "too_short")])
    if len(rows) > MAX_IMPORT_ROWS:
        raise ImportRejectedError([OfferRowError(
            0, "offers", f"at most {MAX_IMPORT_ROWS} rows per import", "too_long")])
    errors: list[OfferRowError] = []
    offers: list[OfferContent] = []
    first_row: dict[str, int] = {}
    for index, values in enumerate(rows, start=1):
        if not isinstance(values, Mapping):
            errors.append(OfferRowError(index, "row", "must be an object", "dict_type"))
            continue
        try:
            offer = parse_offer(index, values, accelerators, observed_on=observed_on)
        except ImportRejectedError as exc:
            errors.extend(exc.errors)
            continue
        seen = first_row.setdefault(offer.offer_id, index)
        if seen != index:
            errors.append(OfferRowError(index, "id", f"duplicates row {seen} (same provider, "
                                        "instance_type, region, zone, term, payment_option)",
                                        "duplicate"))
            continue
        offers.append(offer)
    if errors:
        raise ImportRejectedError(errors)
    return offers
