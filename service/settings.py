"""Settings: the only module that reads the environment (prefix ``CQ_``)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Service configuration. Every field can be set as ``CQ_<NAME>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="CQ_", extra="ignore", frozen=True)

    data_dir: Path = Field(
        default=Path("data"), description="Directory for the embedded SQLite database."
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
        description="Wall-clock limit of one parallelism search (it then answers with what it "
                    "has, marked truncated), and of all the searches of one quote, verify, "
                    "requote or budget plan (refused with 503 search-deadline: a quote is "
                    "never built from a partial search).",
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
        description="Largest search space accepted; bigger requests get 422 before any work.",
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
    body_timeout_s: float = Field(
        default=10.0, gt=0, le=600,
        description="Seconds a request body may take to arrive (408 after); the body is read "
                    "before the request takes an in-flight slot.")
    default_policy: str | None = Field(
        default=None, pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$",
        description="The stored policy (its newest revision) that judges quotes naming none; "
                    "unset: the built-in default (docs/policies.md).")
    catalog_cache_ttl_s: float = Field(
        default=60.0, ge=0.0, le=86_400.0,
        description="Seconds the in-process accelerator cache serves before re-reading.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(default="info")

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
