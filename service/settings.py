"""Settings: the only module that reads the environment (prefix ``CQ_``; OpenTelemetry's
standard ``OTEL_*`` variables keep their names)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def default_data_dir() -> Path:
    """Where the embedded SQLite database lives unless ``CQ_DATA_DIR`` or ``CQ_DATABASE_URL``
    says otherwise: ``$XDG_DATA_HOME/computequote``, else ``~/.local/share/computequote``. One
    place whatever the working directory, so ``make run``, ``cq keys`` and ``cq --local`` share
    a database from any directory (issue 18)."""
    base = os.environ.get("XDG_DATA_HOME")
    return (Path(base) if base else Path.home() / ".local" / "share") / "computequote"


class Settings(BaseSettings):
    """Service configuration. Every field can be set as ``CQ_<NAME>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="CQ_", extra="ignore", frozen=True)

    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Directory for the embedded SQLite database (default: "
                    "$XDG_DATA_HOME/computequote, else ~/.local/share/computequote).",
    )
    database_url: str | None = Field(
        default=None,
        description=(
            "SQLAlchemy URL. Default: sqlite:///<data_dir>/computequote.sqlite3. For PostgreSQL "
            "use postgresql+psycopg://user:password@host:5432/dbname."
        ),
    )
    max_body_bytes: int = Field(
        default=64 * 1024, ge=1024, le=64 * 1024 * 1024,
        description="Largest accepted request body for compute endpoints, in bytes.",
    )
    max_import_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, le=256 * 1024 * 1024,
        description="Largest accepted body for POST /v1/catalog/imports, in bytes.",
    )
    api_key_pepper: SecretStr = Field(
        default=SecretStr("computequote-dev-pepper"),
        description=(
            "Server-side secret mixed into every stored API-key hash. Set a long random value "
            "in production (from a Secret); changing it invalidates every key."
        ),
    )
    require_read_auth: bool = Field(
        default=False,
        description="When true, reads need a key with catalog:read (or quotes:read).",
    )
    search_deadline_s: float = Field(
        default=10.0, gt=0.0, le=600.0,
        description="Safety net on the wall clock of one parallelism search and of all the "
                    "searches of one quote, verify, requote or budget plan: past it the "
                    "request is refused with 503 search-deadline and Retry-After, never "
                    "answered from a partial search (the work is bounded in candidates). "
                    "The wait for a free search worker counts against it: past it the "
                    "request is refused with 503 search-queue-timeout and Retry-After.",
    )
    search_workers: int = Field(
        default=2, ge=0, le=64,
        description="Worker processes for plan searches (0: run them in the request thread).",
    )
    stale_after_days: int = Field(
        default=180, ge=1, le=36_500,
        description="An offer whose as_of is more than this many days before today (UTC) is "
                    "listed with stale: true (the built-in quote policy's max_price_age_s is "
                    "the same 180 days).",
    )
    warm_up: bool = Field(
        default=True,
        description="At start-up, wait for the search workers, then send one plan search and "
                    "one estimate through the app in process; /readyz answers 503 "
                    "warming-up until that is done (at most 60 s), so the first real search "
                    "is a warm one.",
    )
    search_max_candidates: int = Field(
        default=50_000_000, ge=1, le=1_000_000_000,
        description="Largest search space accepted, in candidates; bigger requests get 422 "
                    "before any work. A plan search never exceeds MAX_SEARCH_CANDIDATES "
                    "(40,000,000, service/api/schemas/plans.py) whatever this says; quotes "
                    "and budget plans count all their searches against this figure.",
    )
    search_memory_bytes: int = Field(
        default=2 * 1024**3, ge=0, le=1024**4,
        description="Address-space cap of each search worker process (0: none); a search "
                    "that would grow past it is refused with 503 instead of risking the "
                    "replica. Searches run inline (CQ_SEARCH_WORKERS=0) are not capped.",
    )
    db_pool_size: int = Field(
        default=10, ge=1, le=200, description="PostgreSQL connections kept per replica.")
    db_pool_overflow: int = Field(
        default=30, ge=0, le=500,
        description="Extra PostgreSQL connections per replica under load (the thread pool runs "
                    "40 requests at once).")
    max_in_flight: int = Field(
        default=32, ge=1, le=100_000,
        description="Requests one replica runs at once; beyond it requests are shed at once as "
                    "503 with Retry-After (probes and /metrics are never shed).")
    quote_ttl_days: int = Field(
        default=30, ge=1, le=3650, description="Days until a stored quote's expires_at.",
    )
    quote_link_ttl_s: int = Field(
        default=900, ge=60, le=3600,
        description="Seconds a portal link to a stored quote's page (/ui/quotes/{id}?t=...) "
                    "stays valid: the page a quote is made on signs it, so the link opens "
                    "without the key for this long, then asks for the key.")
    max_reasonable_train_days: float = Field(
        default=365.0, gt=0.0, le=36_500.0,
        description="An estimate or plan whose training takes longer than this many days of "
                    "wall-clock time is still answered, with an 'impractical wall-clock' "
                    "warning: nobody would run it.")
    body_timeout_s: float = Field(
        default=10.0, gt=0, le=600,
        description="Seconds a request body may take to arrive (408 after); the body is read "
                    "before the request takes an in-flight slot.")
    head_timeout_s: float = Field(
        default=10.0, gt=0, le=600,
        description="Seconds a request head (request line and headers) may take to arrive, "
                    "from the connection opening or from the first byte of the next request "
                    "on a kept-alive connection; then 408 and the connection closes (a "
                    "connection that sent nothing is closed silently). Enforced by the server "
                    "protocol service.api.connections:HttpProtocol (uvicorn --http).")
    max_connections_per_client: int = Field(
        default=128, ge=0, le=1_000_000,
        description="Open connections one client address (the socket's peer) may hold; one "
                    "more is answered 503 with Retry-After and closed (0: no limit). Behind "
                    "a proxy the peer is the proxy: set this above the proxy's connections "
                    "to one replica (or 0) and limit per client at the proxy "
                    "(deploy/README.md).")
    default_policy: str | None = Field(
        default=None, pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$",
        description="The stored policy (its newest revision) that judges quotes naming none; "
                    "unset: the built-in default (docs/policies.md).")
    catalog_cache_ttl_s: float = Field(
        default=60.0, ge=0.0, le=86_400.0,
        description="Seconds the in-process accelerator cache serves before re-reading.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(default="info")

    # OpenTelemetry tracing (service/api/tracing.py): the specification's own variable
    # names, without the CQ_ prefix, so a standard deployment's settings just work.
    otel_sdk_disabled: bool = Field(
        default=False, validation_alias="OTEL_SDK_DISABLED",
        description="'true' turns tracing off whatever else is set (any other value is "
                    "false, as the OpenTelemetry specification says).")
    otel_traces_exporter: Literal["otlp", "console", "none"] | None = Field(
        default=None, validation_alias="OTEL_TRACES_EXPORTER",
        description="otlp or console turns tracing on; none keeps it off; unset: on with "
                    "otlp once an OTLP endpoint is set, else off.")
    otel_exporter_otlp_endpoint: str | None = Field(
        default=None, max_length=2048,
        validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                                      "OTEL_EXPORTER_OTLP_ENDPOINT"),
        description="Where spans go (the exporter itself reads it, and the other "
                    "OTEL_EXPORTER_OTLP_* variables); setting it turns tracing on.")
    otel_exporter_otlp_protocol: Literal["http/protobuf"] = Field(
        default="http/protobuf",
        validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                                      "OTEL_EXPORTER_OTLP_PROTOCOL"),
        description="Only http/protobuf is shipped (the specification's default); grpc is "
                    "refused at start-up rather than silently sent elsewhere.")
    otel_service_name: str = Field(
        default="computequote", min_length=1, max_length=255,
        validation_alias="OTEL_SERVICE_NAME", description="The spans' service.name.")

    @field_validator("otel_sdk_disabled", mode="before")
    @classmethod
    def _spec_boolean(cls, value: object) -> bool:
        """Only "true" (any case) is true; anything else, empty included, is false."""
        return value is True or (isinstance(value, str) and value.strip().lower() == "true")

    @field_validator("otel_traces_exporter", "otel_exporter_otlp_endpoint",
                     "otel_exporter_otlp_protocol", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str):
            value = value.strip()
            if not value:
                return cls.model_fields[info.field_name or ""].default
            if info.field_name == "otel_traces_exporter":
                return value.lower()
            if info.field_name == "otel_exporter_otlp_protocol" and value != "http/protobuf":
                raise ValueError(
                    f"OTEL_EXPORTER_OTLP_PROTOCOL (or _TRACES_PROTOCOL) is {value!r}: only "
                    "http/protobuf is shipped; point it at the collector's HTTP port (4318)")
        return value

    @property
    def traces_exporter(self) -> Literal["otlp", "console"] | None:
        """The span exporter the service runs, or None: tracing off (the default)."""
        if self.otel_sdk_disabled or self.otel_traces_exporter == "none":
            return None
        if self.otel_traces_exporter is not None:
            return self.otel_traces_exporter
        return "otlp" if self.otel_exporter_otlp_endpoint else None

    @field_validator("database_url")
    @classmethod
    def _known_driver(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("sqlite", "postgresql")):
            raise ValueError("CQ_DATABASE_URL must be a sqlite:// or postgresql:// URL")
        return value

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'computequote.sqlite3'}"
