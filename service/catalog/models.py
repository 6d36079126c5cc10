"""ORM tables. Datasheet units stay in the column names; money is integer micro-USD."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

BigId = BigInteger().with_variant(Integer, "sqlite")
"""64-bit surrogate keys; SQLite only auto-increments an ``INTEGER PRIMARY KEY``."""

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Accelerator(Base):
    """One accelerator's datasheet facts, each row with its source and date."""

    __tablename__ = "accelerators"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    vendor: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(128))
    memory_gib: Mapped[float] = mapped_column(Float)
    hbm_tbytes_per_s: Mapped[float] = mapped_column(Float)
    fp32_tflops: Mapped[float | None] = mapped_column(Float)
    tf32_tflops: Mapped[float | None] = mapped_column(Float)
    bf16_tflops: Mapped[float | None] = mapped_column(Float)
    fp16_tflops: Mapped[float | None] = mapped_column(Float)
    fp8_tflops: Mapped[float | None] = mapped_column(Float)
    tdp_w: Mapped[float] = mapped_column(Float)
    scaleup_domain_size: Mapped[int] = mapped_column(Integer)
    scaleup_gbytes_per_s: Mapped[float] = mapped_column(Float)
    scaleout_gbits_per_s: Mapped[float] = mapped_column(Float)
    purchase_price_usd_micros: Mapped[int | None] = mapped_column(BigInteger)
    price_basis: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text)
    as_of: Mapped[dt.date] = mapped_column(Date)
    notes: Mapped[str] = mapped_column(Text, default="")


class Provider(Base):
    """A seller of accelerator time: a cloud, a neocloud, or an organisation's own ``onprem``.
    Registered by the first import that names it."""

    __tablename__ = "providers"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class Region(Base):
    """A provider's region; the grid carbon intensity is the latest one imported (each offer
    revision keeps its own copy, so old versions do not change)."""

    __tablename__ = "regions"

    provider_id: Mapped[str] = mapped_column(ForeignKey("providers.id"), primary_key=True)
    code: Mapped[str] = mapped_column(String(64), primary_key=True)
    carbon_g_per_kwh: Mapped[float | None] = mapped_column(Float)
    carbon_source: Mapped[str | None] = mapped_column(Text)


class InstanceType(Base):
    """A provider's machine shape. Facts are the latest imported; offers snapshot them."""

    __tablename__ = "instance_types"

    provider_id: Mapped[str] = mapped_column(ForeignKey("providers.id"), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    accelerator_id: Mapped[str] = mapped_column(ForeignKey("accelerators.id"))
    gpus_per_instance: Mapped[float] = mapped_column(Float)
    vcpus: Mapped[float | None] = mapped_column(Float)
    memory_gib: Mapped[float | None] = mapped_column(Float)
    gpu_memory_gib: Mapped[float | None] = mapped_column(Float)
    interconnect: Mapped[str | None] = mapped_column(Text)


class OfferRevision(Base):
    """One immutable state of one offer. Versions point at revisions; nothing updates a row.

    Money is integer micro-units of ``currency``. ``offer_id`` is derived from the offer's
    natural key, so the same offer keeps its id across versions, imports and exports."""

    __tablename__ = "offer_revisions"
    __table_args__ = (
        ForeignKeyConstraint(
            ["provider_id", "region"], ["regions.provider_id", "regions.code"],
            name="fk_offer_revisions_region_regions",
        ),
        ForeignKeyConstraint(
            ["provider_id", "instance_type"],
            ["instance_types.provider_id", "instance_types.name"],
            name="fk_offer_revisions_instance_type_instance_types",
        ),
        Index("ix_offer_revisions_offer_id_content_hash", "offer_id", "content_hash"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    offer_id: Mapped[str] = mapped_column(String(40))
    content_hash: Mapped[str] = mapped_column(String(64))
    provider_id: Mapped[str] = mapped_column(ForeignKey("providers.id"))
    region: Mapped[str] = mapped_column(String(64))
    zone: Mapped[str | None] = mapped_column(String(64))
    instance_type: Mapped[str] = mapped_column(String(128))
    accelerator_id: Mapped[str] = mapped_column(ForeignKey("accelerators.id"))
    gpus_per_instance: Mapped[float] = mapped_column(Float)
    vcpus: Mapped[float | None] = mapped_column(Float)
    memory_gib: Mapped[float | None] = mapped_column(Float)
    gpu_memory_gib: Mapped[float | None] = mapped_column(Float)
    interconnect: Mapped[str | None] = mapped_column(Text)
    nvlink_domain: Mapped[int | None] = mapped_column(Integer)
    inter_node_gbps: Mapped[float | None] = mapped_column(Float)
    fabric_source: Mapped[str | None] = mapped_column(Text)
    term: Mapped[str] = mapped_column(String(32))
    payment_option: Mapped[str | None] = mapped_column(String(32))
    currency: Mapped[str] = mapped_column(String(3))
    price_per_hour_micros: Mapped[int] = mapped_column(BigInteger)
    upfront_fee_micros: Mapped[int] = mapped_column(BigInteger)
    effective_price_per_hour_micros: Mapped[int] = mapped_column(BigInteger)
    price_per_gpu_hour_micros: Mapped[int] = mapped_column(BigInteger)
    interruption_rate_per_hour: Mapped[float | None] = mapped_column(Float)
    interruption_rate_source: Mapped[str | None] = mapped_column(Text)
    region_carbon_g_per_kwh: Mapped[float | None] = mapped_column(Float)
    region_carbon_source: Mapped[str | None] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text)
    as_of: Mapped[dt.date | None] = mapped_column(Date, nullable=True)
    """When the provider published the price; NULL when the source gives no date (shown as
    ``unknown``)."""
    observed_at: Mapped[dt.date | None] = mapped_column(Date, nullable=True)
    """When this catalogue read the price (the seed file's copy day, an import's or a
    refresh's day); NULL for revisions stored before schema 0013, whose day was not recorded
    (issue 39)."""
    indicative: Mapped[bool] = mapped_column(Boolean)
    notes: Mapped[str] = mapped_column(Text)
    quality_flags: Mapped[list[dict[str, str]]] = mapped_column(JSON)


class CatalogVersion(Base):
    """An immutable set of offer revisions, made by one import or one edit."""

    __tablename__ = "catalog_versions"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, unique=True)
    parent_id: Mapped[str | None] = mapped_column(ForeignKey("catalog_versions.id"))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    created_by: Mapped[str] = mapped_column(String(128))
    note: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(16))
    content_hash: Mapped[str] = mapped_column(String(64))
    offer_count: Mapped[int] = mapped_column(Integer)
    report: Mapped[dict[str, Any]] = mapped_column(JSON)


class CatalogVersionOffer(Base):
    """Membership: which revision of each offer a version holds."""

    __tablename__ = "catalog_version_offers"

    version_id: Mapped[str] = mapped_column(ForeignKey("catalog_versions.id"), primary_key=True)
    offer_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    revision_id: Mapped[int] = mapped_column(ForeignKey("offer_revisions.id"))


class CatalogState(Base):
    """The single row that names the current version. Every catalogue write first bumps
    ``write_seq``: that row lock serialises writers on PostgreSQL and takes SQLite's write lock
    before anything is read, so a writer never has to upgrade a read lock."""

    __tablename__ = "catalog_state"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    current_version_id: Mapped[str | None] = mapped_column(ForeignKey("catalog_versions.id"))
    write_seq: Mapped[int] = mapped_column(BigInteger)


class SchemaCompatibility(Base):
    """One row per migration from 0014 on: the oldest code (its ``SCHEMA_HEAD``) that still runs
    correctly on the schema that migration leaves (``service.catalog.migrate.readiness``;
    ``deploy/README.md``, "Rolling releases: expand, then contract")."""

    __tablename__ = "schema_compatibility"

    revision: Mapped[str] = mapped_column(String(32), primary_key=True)
    oldest_compatible_code: Mapped[str] = mapped_column(String(32))


class ApiKey(Base):
    """An API key: ``cq_<id>_<secret>``. Only an HMAC-SHA256 of the whole key is stored."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    scopes: Mapped[str] = mapped_column(String(512))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    team: Mapped[str | None] = mapped_column(String(128))
    """Keys of one team read each other's quotes (issue 14: object-level authorisation)."""


class Quote(Base):
    """An immutable priced quote. ``response`` holds the exact JSON body first answered, so an
    idempotent replay is byte for byte; ``request`` is the canonical request it came from."""

    __tablename__ = "quotes"
    __table_args__ = (
        UniqueConstraint("principal", "idempotency_key", name="uq_quotes_principal_idempotency"),
        Index("ix_quotes_created_at_id", "created_at", "id"),
        Index("ix_quotes_team_created_at", "team", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    principal: Mapped[str] = mapped_column(String(128), index=True)
    idempotency_key: Mapped[str] = mapped_column(String(255))
    request_hash: Mapped[str] = mapped_column(String(64))
    request_id: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    catalog_version_id: Mapped[str] = mapped_column(ForeignKey("catalog_versions.id"))
    catalog_content_hash: Mapped[str] = mapped_column(String(64))
    estimator_version: Mapped[str] = mapped_column(String(128))
    verdict: Mapped[str | None] = mapped_column(String(16), index=True)
    requote_of: Mapped[str | None] = mapped_column(ForeignKey("quotes.id"))
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    response: Mapped[str] = mapped_column(Text)
    lines: Mapped[str | None] = mapped_column(Text)
    """Every line, as JSON text, for quotes stored before ``lines_zstd`` (schema 0010); None
    for newer quotes and for quotes stored before lines were paged, whose response holds them
    all."""
    lines_zstd: Mapped[bytes | None] = mapped_column(LargeBinary)
    """Every line (the response holds the best line per provider and term): the UTF-8 JSON
    text ``{"lines":[...]}``, compressed with zstd (``service.catalog.quotes.pack_lines``;
    decision 163). None for quotes stored before schema 0010."""
    policy_name: Mapped[str | None] = mapped_column(String(64))
    policy_revision: Mapped[int | None] = mapped_column(Integer)
    """The policy revision the verdict was judged by; None for the built-in default."""
    team: Mapped[str | None] = mapped_column(String(128))
    """The creating key's team when the quote was made: its members may read the quote."""


class PolicyRevision(Base):
    """One immutable revision of a named procurement policy. The newest revision is the
    policy; quotes name the revision they were judged by, so ``verify`` re-judges alike."""

    __tablename__ = "policy_revisions"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    created_by: Mapped[str] = mapped_column(String(128))
    description: Mapped[str] = mapped_column(Text)
    rules: Mapped[dict[str, Any]] = mapped_column(JSON)


class FxVersion(Base):
    """One append-only version of the FX reference-rate table (``service/catalog/fx.py``):
    version N holds every rate imported by versions 1..N."""

    __tablename__ = "fx_versions"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    created_by: Mapped[str] = mapped_column(String(128))
    note: Mapped[str] = mapped_column(Text)
    source: Mapped[str] = mapped_column(Text)
    added: Mapped[int] = mapped_column(Integer)
    """Rates this version added."""
    rate_count: Mapped[int] = mapped_column(Integer)
    """Rates in the whole table at this version."""
    first_date: Mapped[dt.date] = mapped_column(Date)
    last_date: Mapped[dt.date] = mapped_column(Date)


class FxRateRow(Base):
    """One published reference rate: units of ``currency`` per 1 EUR on ``date``, exact as
    published (text, so both backends keep every digit)."""

    __tablename__ = "fx_rates"
    __table_args__ = (
        UniqueConstraint("date", "currency"),
        Index("ix_fx_rates_currency_date", "currency", "date"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    version_number: Mapped[int] = mapped_column(ForeignKey("fx_versions.number"))
    date: Mapped[dt.date] = mapped_column(Date)
    currency: Mapped[str] = mapped_column(String(3))
    rate_per_eur: Mapped[str] = mapped_column(String(40))


class DiscountBookRevision(Base):
    """One immutable revision of an organisation's discount book (``core/discounts.py``);
    the newest revision is the book, and a quote names the revision it priced with."""

    __tablename__ = "discount_book_revisions"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, primary_key=True)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    created_by: Mapped[str] = mapped_column(String(128))
    description: Mapped[str] = mapped_column(Text)
    entries: Mapped[list[dict[str, Any]]] = mapped_column(JSON)


class UserCalibration(Base):
    """One immutable calibration fitted on a user's measured runs (issue 37,
    ``service/core/user_calibration.py``). ``revision`` counts the principal's calibrations
    of the same ``name``; estimates, plans and quotes name the id and record the revision.
    ``fit`` holds what ``user_calibration.apply`` needs (factors and bands); ``response`` the
    exact JSON body first answered (an idempotent replay is byte for byte)."""

    __tablename__ = "user_calibrations"
    __table_args__ = (
        UniqueConstraint("principal", "name", "revision",
                         name="uq_user_calibrations_principal_name_revision"),
        UniqueConstraint("principal", "idempotency_key",
                         name="uq_user_calibrations_principal_idempotency"),
        Index("ix_user_calibrations_created_at_id", "created_at", "id"),
        Index("ix_user_calibrations_team_created_at", "team", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    principal: Mapped[str] = mapped_column(String(128), index=True)
    team: Mapped[str | None] = mapped_column(String(128))
    name: Mapped[str] = mapped_column(String(64))
    revision: Mapped[int] = mapped_column(Integer)
    idempotency_key: Mapped[str | None] = mapped_column(String(255))
    request_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    base_calibration_version: Mapped[str] = mapped_column(String(64))
    estimator_version: Mapped[str] = mapped_column(String(128))
    runs_used: Mapped[int] = mapped_column(Integer)
    fit: Mapped[dict[str, Any]] = mapped_column(JSON)
    response: Mapped[str] = mapped_column(Text)
    runs_zstd: Mapped[bytes] = mapped_column(LargeBinary)
    """The runs as sent (canonical JSON), zstd-compressed: what the fit was made from."""


class Portfolio(Base):
    """An immutable commitment portfolio plan (issue 44, docs/portfolio.md): ``response``
    holds the exact JSON body first answered; ``request`` the canonical request, which
    ``verify`` solves again on the stored catalogue version and policy revision."""

    __tablename__ = "portfolios"
    __table_args__ = (
        UniqueConstraint("principal", "idempotency_key",
                         name="uq_portfolios_principal_idempotency"),
        Index("ix_portfolios_created_at_id", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    principal: Mapped[str] = mapped_column(String(128), index=True)
    team: Mapped[str | None] = mapped_column(String(128))
    idempotency_key: Mapped[str] = mapped_column(String(255))
    request_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    catalog_version_id: Mapped[str] = mapped_column(ForeignKey("catalog_versions.id"))
    estimator_version: Mapped[str] = mapped_column(String(128))
    policy_name: Mapped[str | None] = mapped_column(String(64))
    policy_revision: Mapped[int | None] = mapped_column(Integer)
    verdict: Mapped[str] = mapped_column(String(16))
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    response: Mapped[str] = mapped_column(Text)
