"""The versioned price catalogue: reads, imports, edits and exports. Functions take a Session
and never commit; the caller's unit of work makes each write all or nothing.

Every write starts with ``lock_catalog``, which bumps the single ``catalog_state`` row. On
PostgreSQL that row lock serialises writers (the next one waits, then sees the new current
version); on SQLite the write is the transaction's first statement, so it takes the database
write lock through the busy timeout instead of failing to upgrade a read lock ("database is
locked").
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session

from service.catalog.errors import NotFoundError, PreconditionFailedError
from service.catalog.models import (
    Accelerator,
    CatalogState,
    CatalogVersion,
    CatalogVersionOffer,
    InstanceType,
    OfferRevision,
    Provider,
    Region,
)
from service.catalog.offers import (
    COLUMNS,
    FREE_TEXT_COLUMNS,
    MAX_IMPORT_ROWS,
    ImportRejectedError,
    OfferContent,
    OfferRowError,
    PaymentOption,
    QualityFlag,
    Term,
    csv_escape,
    csv_unescape,
    micros_to_text,
    parse_offer,
    parse_offers,
    version_content_hash,
)
from service.catalog.quality import FLAG_CODES, check_offers
from service.catalog.text import text_problem

REPORT_IDS_SHOWN = 50
"""Offer ids listed per flag in a version's data-quality report (the count is always full)."""


class ImportMode(StrEnum):
    REPLACE = "replace"
    """The import is the whole new version."""
    PATCH = "patch"
    """The import's offers are added to, or replace same-id offers of, the current version."""


@dataclass(frozen=True, slots=True)
class OfferFilter:
    accelerator: str | None = None
    provider: str | None = None
    region: str | None = None
    term: Term | None = None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def lock_catalog(session: Session) -> None:
    """Take the catalogue write lock for the rest of the transaction (module docstring)."""
    session.execute(
        update(CatalogState).where(CatalogState.id == 1)
        .values(write_seq=CatalogState.write_seq + 1)
    )


def current_version_id(session: Session) -> str | None:
    return session.scalar(select(CatalogState.current_version_id).where(CatalogState.id == 1))


def get_version(session: Session, version_id: str | None) -> CatalogVersion:
    """A version by id; ``None`` means the current one."""
    wanted = version_id if version_id is not None else current_version_id(session)
    row = session.get(CatalogVersion, wanted) if wanted is not None else None
    if row is None:
        raise NotFoundError("catalog version", version_id or "current")
    return row


def version_identity(session: Session, version_id: str | None) -> tuple[str, str]:
    """(id, content hash) of a version (``None``: the current one) in one query, without
    loading the version row and its report (what a quote records of its version)."""
    query = select(CatalogVersion.id, CatalogVersion.content_hash)
    if version_id is None:
        query = query.join(CatalogState, CatalogState.current_version_id == CatalogVersion.id
                           ).where(CatalogState.id == 1)
    else:
        query = query.where(CatalogVersion.id == version_id)
    row = session.execute(query).first()
    if row is None:
        raise NotFoundError("catalog version", version_id or "current")
    return row.id, row.content_hash


def resolve_version_id(session: Session, version_id: str | None) -> str:
    """The id of a version (``None``: the current one) without loading the version row and
    its reports (one primary-key lookup; the listing routes need only the id)."""
    if version_id is None:  # the current version exists by construction (a foreign key)
        found = current_version_id(session)
    else:
        found = session.scalar(select(CatalogVersion.id).where(CatalogVersion.id == version_id))
    if found is None:
        raise NotFoundError("catalog version", version_id or "current")
    return found


def list_versions(
    session: Session, *, limit: int, before_number: int | None = None
) -> Sequence[CatalogVersion]:
    """Newest first (keyset on ``number``)."""
    query = select(CatalogVersion).order_by(CatalogVersion.number.desc()).limit(limit)
    if before_number is not None:
        query = query.where(CatalogVersion.number < before_number)
    return session.scalars(query).all()


def version_revisions(session: Session, version_id: str) -> Sequence[OfferRevision]:
    """Every offer revision of a version, ordered by offer id."""
    return session.scalars(
        select(OfferRevision)
        .join(CatalogVersionOffer, CatalogVersionOffer.revision_id == OfferRevision.id)
        .where(CatalogVersionOffer.version_id == version_id)
        .order_by(OfferRevision.offer_id)
    ).all()


def list_offers(
    session: Session, version_id: str, offer_filter: OfferFilter, *, limit: int,
    after: tuple[int, str] | None = None,
) -> Sequence[OfferRevision]:
    """Offers of a version, cheapest per GPU-hour first, ties by id (keyset pagination)."""
    query = (
        select(OfferRevision)
        .join(CatalogVersionOffer, CatalogVersionOffer.revision_id == OfferRevision.id)
        .where(CatalogVersionOffer.version_id == version_id)
    )
    if offer_filter.accelerator is not None:
        query = query.where(OfferRevision.accelerator_id == offer_filter.accelerator)
    if offer_filter.provider is not None:
        query = query.where(OfferRevision.provider_id == offer_filter.provider)
    if offer_filter.region is not None:
        query = query.where(OfferRevision.region == offer_filter.region)
    if offer_filter.term is not None:
        query = query.where(OfferRevision.term == offer_filter.term.value)
    if after is not None:
        price, offer_id = after
        query = query.where(
            (OfferRevision.price_per_gpu_hour_micros > price)
            | ((OfferRevision.price_per_gpu_hour_micros == price)
               & (OfferRevision.offer_id > offer_id))
        )
    query = query.order_by(OfferRevision.price_per_gpu_hour_micros, OfferRevision.offer_id)
    return session.scalars(query.limit(limit)).all()


def get_offer(session: Session, offer_id: str, version_id: str) -> OfferRevision:
    row = session.scalar(
        select(OfferRevision)
        .join(CatalogVersionOffer, CatalogVersionOffer.revision_id == OfferRevision.id)
        .where(CatalogVersionOffer.version_id == version_id,
               CatalogVersionOffer.offer_id == offer_id)
    )
    if row is None:
        raise NotFoundError("offer", offer_id)
    return row


def revision_content(row: OfferRevision) -> OfferContent:
    return OfferContent(
        provider=row.provider_id, region=row.region, zone=row.zone,
        instance_type=row.instance_type, accelerator=row.accelerator_id,
        gpus_per_instance=row.gpus_per_instance, vcpus=row.vcpus, memory_gib=row.memory_gib,
        gpu_memory_gib=row.gpu_memory_gib, interconnect=row.interconnect,
        nvlink_domain=row.nvlink_domain, inter_node_gbps=row.inter_node_gbps,
        fabric_source=row.fabric_source, term=Term(row.term),
        payment_option=PaymentOption(row.payment_option) if row.payment_option else None,
        currency=row.currency, price_per_hour_micros=row.price_per_hour_micros,
        upfront_fee_micros=row.upfront_fee_micros,
        interruption_rate_per_hour=row.interruption_rate_per_hour,
        interruption_rate_source=row.interruption_rate_source,
        region_carbon_g_per_kwh=row.region_carbon_g_per_kwh,
        region_carbon_source=row.region_carbon_source, source=row.source, as_of=row.as_of,
        indicative=row.indicative, notes=row.notes, observed_at=row.observed_at,
    )


def accelerator_memory(session: Session) -> dict[str, float]:
    rows = session.execute(select(Accelerator.id, Accelerator.memory_gib))
    return {row[0]: row[1] for row in rows}


def _register(session: Session, offers: Sequence[OfferContent], now: dt.datetime) -> None:
    """Create providers, regions and instance types the offers name; refresh their facts."""
    known_providers = set(session.scalars(select(Provider.id)))
    for provider in sorted({o.provider for o in offers} - known_providers):
        session.add(Provider(id=provider, created_at=now))
    session.flush()
    regions = {(r.provider_id, r.code): r for r in session.scalars(select(Region))}
    types = {(t.provider_id, t.name): t for t in session.scalars(select(InstanceType))}
    for offer in offers:
        region = regions.get((offer.provider, offer.region))
        if region is None:
            region = Region(provider_id=offer.provider, code=offer.region)
            session.add(region)
            regions[(offer.provider, offer.region)] = region
        if offer.region_carbon_g_per_kwh is not None:
            region.carbon_g_per_kwh = offer.region_carbon_g_per_kwh
            region.carbon_source = offer.region_carbon_source
        facts = {"accelerator_id": offer.accelerator, "gpus_per_instance": offer.gpus_per_instance,
                 "vcpus": offer.vcpus, "memory_gib": offer.memory_gib,
                 "gpu_memory_gib": offer.gpu_memory_gib, "interconnect": offer.interconnect}
        instance = types.get((offer.provider, offer.instance_type))
        if instance is None:
            instance = InstanceType(provider_id=offer.provider, name=offer.instance_type, **facts)
            session.add(instance)
            types[(offer.provider, offer.instance_type)] = instance
        else:
            for key, value in facts.items():
                if value is not None and getattr(instance, key) != value:
                    setattr(instance, key, value)
    session.flush()


def _flag_dicts(flags: Sequence[QualityFlag]) -> list[dict[str, str]]:
    return [{"code": f.code, "detail": f.detail} for f in flags]


def _revision_values(offer: OfferContent, flags: Sequence[QualityFlag]) -> dict[str, Any]:
    return {
        "offer_id": offer.offer_id, "content_hash": offer.content_hash,
        "provider_id": offer.provider, "region": offer.region, "zone": offer.zone,
        "instance_type": offer.instance_type, "accelerator_id": offer.accelerator,
        "gpus_per_instance": offer.gpus_per_instance, "vcpus": offer.vcpus,
        "memory_gib": offer.memory_gib, "gpu_memory_gib": offer.gpu_memory_gib,
        "interconnect": offer.interconnect, "nvlink_domain": offer.nvlink_domain,
        "inter_node_gbps": offer.inter_node_gbps, "fabric_source": offer.fabric_source,
        "term": offer.term.value,
        "payment_option": offer.payment_option.value if offer.payment_option else None,
        "currency": offer.currency, "price_per_hour_micros": offer.price_per_hour_micros,
        "upfront_fee_micros": offer.upfront_fee_micros,
        "effective_price_per_hour_micros": offer.effective_price_per_hour_micros,
        "price_per_gpu_hour_micros": offer.price_per_gpu_hour_micros,
        "interruption_rate_per_hour": offer.interruption_rate_per_hour,
        "interruption_rate_source": offer.interruption_rate_source,
        "region_carbon_g_per_kwh": offer.region_carbon_g_per_kwh,
        "region_carbon_source": offer.region_carbon_source, "source": offer.source,
        "as_of": offer.as_of, "indicative": offer.indicative, "notes": offer.notes,
        "observed_at": offer.observed_at, "quality_flags": _flag_dicts(flags),
    }


def commit_version(
    session: Session, offers: Sequence[OfferContent], *, created_by: str, note: str, kind: str,
) -> CatalogVersion:
    """Store ``offers`` as a new version and make it current. Call ``lock_catalog`` first.

    Unchanged offers (same content and flags as in the parent) keep their revision, so an
    edit of one offer stores one new revision plus the membership rows."""
    now = _now()
    parent_id = current_version_id(session)
    flags = check_offers(offers, accelerator_memory(session))
    _register(session, offers, now)
    parent: dict[str, OfferRevision] = (
        {row.offer_id: row for row in version_revisions(session, parent_id)} if parent_id else {}
    )
    membership: dict[str, int] = {}
    new_rows: list[dict[str, Any]] = []
    changes = Counter[str]()
    for offer in offers:
        offer_flags = _flag_dicts(flags.get(offer.offer_id, ()))
        old = parent.get(offer.offer_id)
        if old is not None and old.content_hash == offer.content_hash and (
            old.quality_flags == offer_flags
        ) and old.observed_at == offer.observed_at:  # a 0013 downgrade keeps hashes, not days
            membership[offer.offer_id] = old.id
            changes["unchanged"] += 1
            continue
        changes["changed" if old is not None else "added"] += 1
        new_rows.append(_revision_values(offer, flags.get(offer.offer_id, ())))
    changes["removed"] = len(set(parent) - {o.offer_id for o in offers})
    if new_rows:
        # One INSERT per page of rows, not per row. The ORM's bulk insert leaves out each
        # row's None columns (so that defaults apply; offer_revisions has none), which split
        # the rows into one statement per distinct set of None columns: in practice one per
        # row, each result spliced onto all the rows before it (2,953 offers: about 4.3
        # million row copies, most of a 3 s refresh on SQLite). render_nulls sends the NULLs,
        # so every row has the same statement and SQLAlchemy's insertmanyvalues pages them.
        # Each returned row names its offer, so the order of the rows does not matter (and
        # sort_by_parameter_order, with no sentinel column, would page them one by one).
        inserted = session.execute(
            insert(OfferRevision).returning(OfferRevision.offer_id, OfferRevision.id),
            new_rows, execution_options={"render_nulls": True},
        )
        membership.update({row[0]: row[1] for row in inserted})

    number = (session.scalar(select(func.max(CatalogVersion.number))) or 0) + 1
    version = CatalogVersion(
        id=f"cv_{number:06d}", number=number, parent_id=parent_id, created_at=now,
        created_by=created_by, note=note, kind=kind,
        content_hash=version_content_hash(offers), offer_count=len(offers),
        report=_report(offers, flags, changes),
    )
    session.add(version)
    session.flush()
    if membership:
        session.execute(insert(CatalogVersionOffer), [
            {"version_id": version.id, "offer_id": offer_id, "revision_id": revision_id}
            for offer_id, revision_id in sorted(membership.items())
        ])
    session.execute(
        update(CatalogState).where(CatalogState.id == 1).values(current_version_id=version.id)
    )
    return version


def _report(
    offers: Sequence[OfferContent], flags: Mapping[str, Sequence[QualityFlag]],
    changes: Counter[str],
) -> dict[str, Any]:
    by_code: dict[str, list[str]] = {code: [] for code in FLAG_CODES}
    for offer_id in sorted(flags):
        for flag in flags[offer_id]:
            by_code[flag.code].append(offer_id)
    return {
        "by_provider": dict(sorted(Counter(o.provider for o in offers).items())),
        "by_term": dict(sorted(Counter(o.term.value for o in offers).items())),
        "indicative": sum(o.indicative for o in offers),
        "changes": {k: changes[k] for k in ("added", "changed", "removed", "unchanged")},
        "quality": {
            "flagged_offers": len(flags),
            "flags": {code: {"count": len(ids), "offer_ids": ids[:REPORT_IDS_SHOWN]}
                      for code, ids in by_code.items()},
        },
    }


def check_row_text(rows: Sequence[Mapping[str, Any]]) -> None:
    """The one rule for stored text (``service/catalog/text.py``) on every string of every
    import or refresh row, its column names included: ImportRejectedError naming each row
    and column, before anything is parsed or hashed (issue 36: a lone surrogate in ``source``
    failed the content hash with a 500; a NUL failed PostgreSQL)."""
    errors: list[OfferRowError] = []
    for number, values in enumerate(rows, start=1):
        if not isinstance(values, Mapping):
            continue  # parse_offers names it
        for name, value in values.items():
            if not isinstance(name, str) or text_problem(name, max_length=64) is not None:
                errors.append(OfferRowError(number, "row", "has a column name that is not "
                                            "text of at most 64 characters without control "
                                            "characters", "invalid_column_name"))
                continue
            problem = text_problem(value) if isinstance(value, str) else None
            if problem is not None:
                errors.append(OfferRowError(number, name, problem.message, problem.code))
    if errors:
        raise ImportRejectedError(errors)


NUMBER_COLUMNS = ("gpus_per_instance", "vcpus", "memory_gib", "gpu_memory_gib", "nvlink_domain",
                  "inter_node_gbps", "interruption_rate_per_hour", "region_carbon_g_per_kwh")
"""Columns a JSON export writes as JSON numbers (``export_json``)."""


def check_json_types(rows: Sequence[Mapping[str, Any]]) -> None:
    """A JSON import's numeric columns are JSON numbers (or null), as its export writes them
    and as the README says: a numeric string such as ``"8"`` is refused like everywhere else
    in the API (CSV cells are text, so CSV imports are not checked). Money columns stay
    decimal strings (JSON numbers there are read exactly, ``docs/catalog.md``)."""
    errors = [OfferRowError(number, name, "must be a JSON number, not a string",
                            "float_type")
              for number, values in enumerate(rows, start=1) if isinstance(values, Mapping)
              for name in NUMBER_COLUMNS if isinstance(values.get(name), str)]
    if errors:
        raise ImportRejectedError(errors)


def accelerator_ids(session: Session) -> set[str]:
    return set(session.scalars(select(Accelerator.id)))


def import_offers(
    session: Session, rows: Sequence[Mapping[str, Any]], *, mode: ImportMode, created_by: str,
    note: str, observed_on: dt.date | None = None,
) -> CatalogVersion:
    """Validate every row (all or nothing), then store a new current version. Rows that
    state no ``observed_at`` were read on ``observed_on``: the day the caller says, else the
    day of the import (UTC, the clock that stamps the version's ``created_at``)."""
    check_row_text(rows)
    lock_catalog(session)
    offers = parse_offers(rows, accelerator_ids(session),
                          observed_on=observed_on or _now().date())
    if mode is ImportMode.PATCH:
        current = current_version_id(session)
        merged = {o.offer_id: o for o in (
            revision_content(r) for r in (version_revisions(session, current) if current else ())
        )}
        merged.update((o.offer_id, o) for o in offers)
        offers = [merged[k] for k in sorted(merged)]
    return commit_version(session, offers, created_by=created_by, note=note,
                          kind=f"import-{mode.value}")


EDITABLE_COLUMNS = (
    "price_per_hour", "upfront_fee", "interruption_rate_per_hour", "interruption_rate_source",
    "region_carbon_g_per_kwh", "region_carbon_source", "source", "as_of", "indicative", "notes",
    "observed_at",
)
"""What ``PUT /v1/offers/{id}`` may change; the rest is the offer's identity and facts."""


def edit_offer(
    session: Session, offer_id: str, *, expected_revision_id: int,
    changes: Mapping[str, Any], created_by: str, note: str, observed_on: dt.date | None = None,
) -> tuple[CatalogVersion, OfferRevision]:
    """Change one offer of the current version, if it is still at ``expected_revision_id``
    (the revision the client's If-Match named; ``If-Match: *`` is refused before this). An
    edit restates the price, so it was read on the edit's day (``observed_on``, else today
    UTC) unless ``changes`` state ``observed_at`` (``unknown`` included)."""
    lock_catalog(session)
    current = get_version(session, None)
    revisions = version_revisions(session, current.id)
    by_id = {r.offer_id: r for r in revisions}
    old = by_id.get(offer_id)
    if old is None:
        raise NotFoundError("offer", offer_id)
    if old.id != expected_revision_id:
        raise PreconditionFailedError(
            f"offer {offer_id} has changed (now revision {old.id}); GET it again and retry"
        )
    kept = {k: v for k, v in revision_content(old).canonical().items() if k != "observed_at"}
    values = {**kept, **changes}
    try:
        edited = parse_offer(1, values, accelerator_ids(session),
                             observed_on=observed_on or _now().date())
    except ImportRejectedError as exc:
        raise ImportRejectedError([
            OfferRowError(0, e.field, e.message, e.code) for e in exc.errors
        ]) from None
    offers = [edited if r.offer_id == offer_id else revision_content(r) for r in revisions]
    version = commit_version(session, offers, created_by=created_by, note=note, kind="edit")
    return version, get_offer(session, offer_id, version.id)


# --- export --------------------------------------------------------------------------------


def export_row(row: OfferRevision) -> dict[str, str]:
    content = revision_content(row)
    return {
        "id": row.offer_id, **content.canonical(),
        "effective_price_per_hour": micros_to_text(row.effective_price_per_hour_micros),
        "price_per_gpu_hour": micros_to_text(row.price_per_gpu_hour_micros),
        "quality_flags": ";".join(f["code"] for f in row.quality_flags),
    }


def export_csv(rows: Sequence[OfferRevision]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        values = export_row(row)
        writer.writerow({k: csv_escape(v) if k in FREE_TEXT_COLUMNS else v
                         for k, v in values.items()})
    return buffer.getvalue()


def export_json(version: CatalogVersion, rows: Sequence[OfferRevision]) -> str:
    offers = []
    for row in rows:
        item: dict[str, Any] = {k: (v if v != "" else None) for k, v in export_row(row).items()}
        for name in NUMBER_COLUMNS:
            item[name] = getattr(row, name)
        item["indicative"] = row.indicative
        item["quality_flags"] = row.quality_flags
        offers.append(item)
    document = {"catalog_version": version.id, "content_hash": version.content_hash,
                "offers": offers}
    return json.dumps(document, indent=1, sort_keys=False) + "\n"


def parse_csv(text: str) -> list[dict[str, str]]:
    """CSV rows as dicts; a header naming an unknown column fails every row (422). Rows are
    counted as they are read and the import is refused at ``MAX_IMPORT_ROWS`` + 1, so an
    8 MiB body of one-character rows never becomes millions of dicts (issue 14: 3.7 GB)."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows: list[dict[str, str]] = []
    try:
        for line in reader:
            if None in line:
                raise ImportRejectedError([OfferRowError(
                    reader.line_num, "row", "has more values than the header has columns",
                    "too_many_values")])
            if len(rows) == MAX_IMPORT_ROWS:
                raise ImportRejectedError([OfferRowError(
                    0, "offers", f"at most {MAX_IMPORT_ROWS} rows per import", "too_long")])
            for name in FREE_TEXT_COLUMNS:  # undo the export's formula escape
                if isinstance(line.get(name), str):
                    line[name] = csv_unescape(line[name])
            rows.append(line)
    except csv.Error as exc:
        raise ImportRejectedError([OfferRowError(
            reader.line_num, "body", f"is not valid CSV: {exc}", "csv_invalid")]) from None
    return rows
