"""Foreign-exchange reference rates: the ECB's euro reference rates, versioned like the price
catalogue, and the conversion a quote makes with them (issue 17, decision 68).

The table holds ``rate_per_eur`` (units of a currency per 1 EUR, as the ECB publishes them)
per fixing date. Versions are append-only: version N holds every rate imported by versions
1..N, and a published (date, currency) rate never changes, so an import that disagrees with a
stored rate is refused rather than rewriting history. A quote names the version and the
fixing date it used, so ``verify`` reproduces it to the cent.

Formats read (``parse_ecb_csv``), both from https://www.ecb.europa.eu/stats/eurofxref/:
- ``eurofxref-hist.csv``: ``Date,USD,JPY,...,`` then ``2025-05-09,1.1244,163.18,...,`` with
  ``N/A`` where a currency had no fixing;
- ``eurofxref.csv`` (the latest day): ``Date, USD, JPY, ...`` then ``09 May 2025, 1.1244, ...``.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_DOWN, ROUND_FLOOR, Context, Decimal, InvalidOperation

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.catalog.currencies import is_currency, minor_units
from service.catalog.errors import ConflictError, NotFoundError
from service.catalog.models import CatalogVersionOffer, FxRateRow, FxVersion, OfferRevision

BASE = "EUR"
MAX_FX_DATES = 20_000
"""Fixing dates per import: the ECB history since 1999 is about 6,800."""
MAX_FX_CELLS = 500_000
MAX_RATE_PER_EUR = Decimal("10000000")
"""Above any ECB rate ever published (the highest, IDR and historic TRL, are below 1e7)."""
MAX_RATE_PLACES = 10
ECB_SOURCE = "ECB euro foreign exchange reference rates (www.ecb.europa.eu/stats/eurofxref)"
ECB_RETIRED_CURRENCIES = frozenset(("CYP", "EEK", "HRK", "LTL", "LVL", "MTL", "ROL", "SIT",
                                    "SKK", "TRL"))
"""Columns of eurofxref-hist.csv for currencies the euro or a redenomination replaced (ISO
4217 List Three); their old rates are kept, and no budget can be in them."""
CONVERSION_PRECISION = Context(prec=34)
"""Cross rates are computed with 34 significant digits (IEEE 754 decimal128) before the
converted amount is rounded."""
DOWNWARD = Context(prec=34, rounding=ROUND_FLOOR)
"""The budget's conversion: never rounds a product up."""
UPWARD = Context(prec=34, rounding=ROUND_CEILING)
"""A cost shown in the budget's currency: never rounds a quotient down."""
CENT = Decimal("0.01")


@dataclass(frozen=True, slots=True)
class FxRate:
    date: dt.date
    currency: str
    rate_per_eur: Decimal


@dataclass(frozen=True, slots=True)
class FxProblem:
    row: int
    column: str
    message: str


class RateNotFoundError(NotFoundError):
    """No ECB rate for a currency on or before a day (HTTP 404; a quote answers 422)."""

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)
        self.kind = "ECB reference rate"
        self.identifier = message


class FxImportRejectedError(ValueError):
    """The file cannot be imported; ``problems`` names each bad cell (the first 50)."""

    def __init__(self, problems: list[FxProblem]) -> None:
        self.problems = problems[:50]
        first = problems[0]
        super().__init__(f"row {first.row}, {first.column}: {first.message}"
                         + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))


def _date(text: str) -> dt.date | None:
    text = text.strip()
    for parse in (dt.date.fromisoformat,
                  lambda t: dt.datetime.strptime(t, "%d %B %Y").date()):
        try:
            return parse(text)
        except ValueError:
            continue
    return None


def _rate(text: str) -> Decimal | str | None:
    """The rate, None for the ECB's 'no fixing' (N/A or empty), or why the cell is bad."""
    text = text.strip()
    if text in ("", "N/A"):
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        return "is not a decimal number"
    if not value.is_finite() or value <= 0 or value > MAX_RATE_PER_EUR:
        return f"must be a finite rate > 0 and <= {MAX_RATE_PER_EUR} units per EUR"
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and -exponent > MAX_RATE_PLACES:
        return f"has more than {MAX_RATE_PLACES} decimal places"
    if not all(c.isdigit() or c == "." for c in text):
        return "must be digits with an optional point (no sign or exponent)"
    return value


def parse_ecb_csv(text: str, *, latest_allowed: dt.date) -> list[FxRate]:
    """Every rate of an ECB reference-rate CSV, all or nothing. ``latest_allowed`` (the
    caller's today) refuses fixings from the future."""
    try:
        return _parse_ecb_csv(text, latest_allowed)
    except csv.Error as exc:
        raise FxImportRejectedError([FxProblem(0, "body", f"is not CSV ({exc})")]) from None


def _parse_ecb_csv(text: str, latest_allowed: dt.date) -> list[FxRate]:
    problems: list[FxProblem] = []
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, None)
    if not header or header[0].strip() != "Date":
        raise FxImportRejectedError([FxProblem(1, "Date", "the first column of the header "
                                               "must be Date (the ECB eurofxref format)")])
    columns = [c.strip() for c in header[1:]]
    while columns and columns[-1] == "":
        columns.pop()  # the ECB files end every line with a comma
    for index, code in enumerate(columns):
        if not (is_currency(code) or code in ECB_RETIRED_CURRENCIES) or code == BASE:
            problems.append(FxProblem(1, code[:16] or f"column {index + 2}",
                                      "is not an ISO 4217 currency code other than EUR"))
    if len(set(columns)) != len(columns):
        problems.append(FxProblem(1, "header", "names a currency twice"))
    if problems:
        raise FxImportRejectedError(problems)
    rates: list[FxRate] = []
    seen: set[dt.date] = set()
    for number, cells in enumerate(reader, start=2):
        if not any(c.strip() for c in cells):
            continue
        if number - 1 > MAX_FX_DATES or len(rates) > MAX_FX_CELLS:
            raise FxImportRejectedError([FxProblem(number, "Date", f"the file has more than "
                                                   f"{MAX_FX_DATES} dates; split it")])
        day = _date(cells[0])
        if day is None:
            problems.append(FxProblem(number, "Date", "must be YYYY-MM-DD or '09 May 2025'"))
            continue
        if day > latest_allowed:
            problems.append(FxProblem(number, "Date", f"{day} is after today ({latest_allowed})"))
            continue
        if day in seen:
            problems.append(FxProblem(number, "Date", f"{day} appears twice"))
            continue
        seen.add(day)
        values = cells[1:]
        extra = [v for v in values[len(columns):] if v.strip()]
        if extra:
            problems.append(FxProblem(number, "Date", "has more values than the header has "
                                                      "currencies"))
        for code, cell in zip(columns, values, strict=False):
            value = _rate(cell)
            if isinstance(value, str):
                problems.append(FxProblem(number, code, f"{cell.strip()[:32]!r} {value}"))
            elif value is not None:
                rates.append(FxRate(day, code, value))
    if problems:
        raise FxImportRejectedError(problems)
    if not rates:
        raise FxImportRejectedError([FxProblem(2, "Date", "the file has no rates")])
    return rates


def content_hash(rates: Iterable[FxRate]) -> str:
    """SHA-256 of every rate, sorted: two versions with equal tables have equal hashes."""
    lines = sorted(f"{r.date.isoformat()},{r.currency},{r.rate_per_eur}" for r in rates)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


@dataclass(frozen=True, slots=True, kw_only=True)
class Conversion:
    """A budget converted into the pricing currency with one day's ECB rates."""

    amount: Decimal
    currency: str
    converted: Decimal
    into: str
    rate: Decimal
    """Units of ``into`` per 1 ``currency``: rate_per_eur(into) / rate_per_eur(currency)."""
    rate_date: dt.date
    rates_per_eur: Mapping[str, Decimal]
    version: str

    def in_budget_currency(self, amount: Decimal) -> Decimal:
        """``amount`` of the pricing currency shown in the budget's currency, with the same
        cross rate, rounded up to the budget currency's minor unit (ISO 4217): a line's cost
        is never shown smaller than it is. Because the budget is rounded down on the way in,
        a line the verdict finds within budget never shows more than the budget."""
        exponent = Decimal(1).scaleb(-minor_units(self.currency))
        # Rounded up at the 34th digit too, so no intermediate rounding can shrink it.
        return UPWARD.divide(amount, self.rate).quantize(exponent, rounding=ROUND_CEILING)

    def describe(self) -> str:
        return (f"{self.amount:,.2f} {self.currency} at {self.rate.normalize():f} {self.into} "
                f"per {self.currency} (ECB reference rates of {self.rate_date.isoformat()}, "
                f"FX table {self.version})")


ROUNDING = ("the cross rate is rate_per_eur(pricing currency) / rate_per_eur(budget "
            "currency) at 34 significant digits; the converted budget is rounded down to the "
            "cent (ROUND_DOWN), so rounding never enlarges a budget; a line's amounts shown in the "
            "budget's currency are divided by the same rate and rounded up to that currency's "
            "minor unit (ROUND_CEILING), so rounding never shrinks a cost")


def convert(amount: Decimal, currency: str, into: str, day_rates: Mapping[str, Decimal],
            rate_date: dt.date, version: str) -> Conversion:
    """``amount`` of ``currency`` in ``into``, with the rates of one fixing day (EUR is 1)."""
    per_eur = {BASE: Decimal(1), **day_rates}
    rate = CONVERSION_PRECISION.divide(per_eur[into], per_eur[currency])
    # Rounded down at the 34th digit as well as to the cent: a product that rounded up at the
    # 34th digit could cross a cent boundary and enlarge the budget (found by the property
    # test of in_budget_currency).
    converted = DOWNWARD.multiply(amount, rate).quantize(CENT, rounding=ROUND_DOWN)
    return Conversion(amount=amount, currency=currency, converted=converted, into=into,
                      rate=rate, rate_date=rate_date,
                      rates_per_eur={c: per_eur[c] for c in sorted({currency, into})},
                      version=version)


# -- the stored table ------------------------------------------------------------------------

SEED_FILE = "prices/fx_reference_rates.csv"
LOOKBACK_FIXINGS = 40
"""Fixings read per currency when looking for the latest day all requested currencies share
(the ECB fixes every TARGET business day; 40 covers any holiday gap)."""


def version_id(number: int) -> str:
    return f"fx_{number:06d}"


def get_fx_version(session: Session, wanted: str | None) -> FxVersion:
    """A version by id; ``None`` means the newest."""
    if wanted is None:
        row = session.scalar(select(FxVersion).order_by(FxVersion.number.desc()).limit(1))
    else:
        row = session.get(FxVersion, wanted)
    if row is None:
        raise NotFoundError("FX table version", wanted or "current")
    return row


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportOutcome:
    version: FxVersion
    added: int
    unchanged: int


def import_rates(session: Session, rates: list[FxRate], *, created_by: str, note: str,
                 source: str, now: dt.datetime) -> ImportOutcome:
    """Add ``rates`` as a new version, all or nothing. A rate equal to a stored one is
    unchanged; one that differs is a conflict (a published rate never changes), and nothing
    is stored. Nothing new: no version is made. Flushes only; the caller commits."""
    days = [r.date for r in rates]
    stored = {(row.date, row.currency): Decimal(row.rate_per_eur) for row in session.scalars(
        select(FxRateRow).where(FxRateRow.date >= min(days), FxRateRow.date <= max(days),
                                FxRateRow.currency.in_({r.currency for r in rates})))}
    conflicts = [r for r in rates if (r.date, r.currency) in stored
                 and stored[(r.date, r.currency)] != r.rate_per_eur]
    if conflicts:
        first = conflicts[0]
        raise ConflictError(
            f"{len(conflicts)} rates differ from stored ones, for example {first.currency} on "
            f"{first.date}: {first.rate_per_eur} against the stored "
            f"{stored[(first.date, first.currency)]}; a published ECB rate never changes, so "
            "nothing was imported")
    new = [r for r in rates if (r.date, r.currency) not in stored]
    current = session.scalar(select(FxVersion).order_by(FxVersion.number.desc()).limit(1))
    if not new:
        if current is None:  # pragma: no cover - rates exist only with a version
            raise ConflictError("no FX version holds the stored rates")
        return ImportOutcome(version=current, added=0, unchanged=len(rates))
    number = (current.number if current else 0) + 1
    total = (current.rate_count if current else 0) + len(new)
    first_day = min(r.date for r in new)
    last_day = max(r.date for r in new)
    version = FxVersion(
        id=version_id(number), number=number, created_at=now, created_by=created_by,
        note=note, source=source, added=len(new), rate_count=total,
        first_date=min(first_day, current.first_date) if current else first_day,
        last_date=max(last_day, current.last_date) if current else last_day)
    session.add(version)
    try:
        session.flush()
        session.add_all(FxRateRow(version_number=number, date=r.date, currency=r.currency,
                                  rate_per_eur=str(r.rate_per_eur)) for r in new)
        session.flush()
    except IntegrityError:
        raise ConflictError("another FX import committed first; send the file again") from None
    return ImportOutcome(version=version, added=len(new), unchanged=len(rates) - len(new))


def rates_on(session: Session, currencies: Iterable[str], day: dt.date,
             version: FxVersion) -> tuple[dt.date, dict[str, Decimal]]:
    """The latest fixing on or before ``day`` at which every currency has a rate, in the
    table as of ``version``; EUR needs none. Raises NotFoundError naming what is missing."""
    wanted = sorted(set(currencies) - {BASE})
    if not wanted:
        return day, {}
    found: dict[str, dict[dt.date, Decimal]] = {}
    for code in wanted:
        rows = session.execute(
            select(FxRateRow.date, FxRateRow.rate_per_eur)
            .where(FxRateRow.currency == code, FxRateRow.date <= day,
                   FxRateRow.version_number <= version.number)
            .order_by(FxRateRow.date.desc()).limit(LOOKBACK_FIXINGS)).all()
        if not rows:
            raise RateNotFoundError(f"no ECB reference rate for {code} on or before "
                                    f"{day.isoformat()} in FX table {version.id}")
        found[code] = {row[0]: Decimal(row[1]) for row in rows}
    common = set.intersection(*(set(v) for v in found.values()))
    if not common:
        raise RateNotFoundError(f"no ECB fixing has rates for all of {', '.join(wanted)} on "
                                f"or before {day.isoformat()} in FX table {version.id}")
    fixing = max(common)
    return fixing, {code: found[code][fixing] for code in wanted}


def known_currencies(session: Session, version: FxVersion) -> list[str]:
    rows = session.scalars(select(FxRateRow.currency).distinct()
                           .where(FxRateRow.version_number <= version.number))
    return sorted({BASE, *rows})


def seed_fx(session: Session, rows: Iterable[Mapping[str, str]], now: dt.datetime,
            ) -> FxVersion | None:
    """Version 1 from the seed file (long format: date, currency, rate_per_eur) when the
    table is empty; flushes only."""
    if session.scalar(select(func.count()).select_from(FxVersion)):
        return None
    rates = [FxRate(dt.date.fromisoformat(r["date"]), r["currency"], Decimal(r["rate_per_eur"]))
             for r in rows]
    outcome = import_rates(session, rates, created_by="seed", now=now,
                           note="seed: ECB reference rates, month-ends 2023-01 to 2025-05",
                           source=f"{ECB_SOURCE}; via h0tbird/eurofxref eurofxref-hist.csv "
                                  "@1be77cd4 (seed/prices/README.md)")
    return outcome.version


def offer_currencies(session: Session, version_id: str,
                     accelerators: Iterable[str]) -> list[str]:
    """The currencies the version's offers of ``accelerators`` are priced in, sorted: a quote
    loads each, so an offer in another currency than the pricing one is listed, not lost
    (issue 39: offers priced in CNY vanished from a USD quote without a reason)."""
    return sorted(session.scalars(
        select(OfferRevision.currency).distinct()
        .join(CatalogVersionOffer, CatalogVersionOffer.revision_id == OfferRevision.id)
        .where(CatalogVersionOffer.version_id == version_id,
               OfferRevision.accelerator_id.in_(set(accelerators)))))
