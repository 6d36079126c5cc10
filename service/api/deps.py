"""FastAPI dependencies: settings, database session (one per request, committed once) and the
accelerator cache that lets pure-compute routes survive a database outage."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Annotated, TypeVar, cast

from fastapi import Depends, Request
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from service.catalog.changes import GenerationCache
from service.catalog.db import unit_of_work
from service.catalog.errors import CommitFailedError, NotFoundError
from service.catalog.mapping import accelerator_to_spec
from service.catalog.repository import list_accelerators
from service.core.errors import InvalidSpecError
from service.core.specs import AcceleratorSpec
from service.settings import Settings

T = TypeVar("T")


class AcceleratorCache:
    """All accelerator specs, re-read at most every ``ttl_s``; serves the last good copy when
    the database cannot be reached."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = factory
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._specs: dict[str, AcceleratorSpec] | None = None
        self._last: dict[str, AcceleratorSpec] | None = None
        self._loaded_at = 0.0
        self.generation = 0
        """Counts the loads whose specs differed from the load before."""
        self.hits = 0
        self.misses = 0
        """Reads answered from memory, and reads that went to the database (metrics)."""

    def _load(self) -> dict[str, AcceleratorSpec]:
        with unit_of_work(self._factory) as session:
            return {row.id: accelerator_to_spec(row) for row in list_accelerators(session)}

    def all(self) -> dict[str, AcceleratorSpec]:
        with self._lock:
            specs = self._specs
            if specs is None or self._clock() - self._loaded_at >= self._ttl_s:
                self.misses += 1
                try:
                    specs = self._load()
                except Exception:
                    if specs is None:
                        raise
                else:
                    if specs != self._last:
                        self.generation += 1
                        self._last = specs
                    self._specs, self._loaded_at = specs, self._clock()
            else:
                self.hits += 1
            return specs

    def fresh(self) -> bool:
        """Whether ``all()`` would answer from memory, without a database read (so an
        ``async def`` endpoint may call it on the event loop)."""
        return self._specs is not None and self._clock() - self._loaded_at < self._ttl_s

    def _expire(self) -> None:
        """Read the database again on the next use, keeping the last good copy."""
        with self._lock:
            self._loaded_at = -float("inf")

    def get(self, accelerator_id: str) -> AcceleratorSpec:
        spec = self.all().get(accelerator_id)
        if spec is None and self._specs is not None:
            # Another replica may have stored it since the last read: read once more before
            # calling it unknown (an accelerator, once stored, never changes).
            self._expire()
            spec = self.all().get(accelerator_id)
        if spec is None:
            raise NotFoundError("accelerator", accelerator_id)
        return spec

    def require(self, accelerator_id: str, field: str) -> AcceleratorSpec:
        """The spec a request body names; an unknown id is invalid input (422) naming
        ``field``, since the body, not the URL, refers to something that does not exist."""
        try:
            return self.get(accelerator_id)
        except NotFoundError:
            known = ", ".join(sorted(self.all()))
            raise InvalidSpecError(f"not an accelerator of the catalogue; known: {known}",
                                   field=field) from None

    def invalidate(self) -> None:
        with self._lock:
            self._specs = None


async def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def settings_of(request: Request) -> Settings:
    """``get_settings`` for a route that declares no dependency (an estimate: each declared
    dependency cost it about 15 us of FastAPI's solving, issue 38), honouring an override of
    ``get_settings`` as a declared one would (the tests set limits that way)."""
    override = request.app.dependency_overrides.get(get_settings)
    if override is not None:
        return cast(Settings, override())
    settings: Settings = request.app.state.settings
    return settings


def get_session(request: Request) -> Iterator[Session]:
    """One session per request; what a read or a failed request leaves is rolled back or
    committed after the answer. Writes do not rely on that: they ``commit_before_answer``."""
    factory: sessionmaker[Session] = request.app.state.session_factory
    with unit_of_work(factory) as session:
        yield session


def _session_override(request: Request) -> Callable[[], object] | None:
    override: Callable[[], object] | None = request.app.dependency_overrides.get(get_session)
    return override


@contextmanager
def request_session(request: Request) -> Iterator[Session]:
    """A session for code that needs one only sometimes (a cache miss), outside dependency
    injection, so a hit opens none. Honours an override of ``get_session`` (the tests run
    each request inside their own transaction)."""
    override = _session_override(request)
    if override is None:
        factory: sessionmaker[Session] = request.app.state.session_factory
        with unit_of_work(factory) as session:
            yield session
        return
    produced = override()
    if isinstance(produced, Session):
        yield produced
        return
    generator = cast(Iterator[Session], produced)
    session = next(generator)
    try:
        yield session
    finally:
        next(generator, None)


def state_cache(request: Request) -> GenerationCache | None:
    """The cache of the current catalogue version and verified keys, or None where sessions
    are overridden: their uncommitted writes reach no change feed."""
    if _session_override(request) is not None:
        return None
    cache: GenerationCache = request.app.state.state_cache
    return cache


async def held(request: Request, key: Hashable, read: Callable[[Session], T], *,
               keep: Callable[[T], bool] = lambda _: True) -> T:
    """``read(session)``, answered from the state cache while no writer has changed the
    catalogue state or the API keys since it was read (``service/catalog/changes.py``); a miss
    reads in the thread pool and stores what ``keep`` accepts, under the generation taken
    before the read."""
    cache = state_cache(request)
    found, value, generation = cache.get(key) if cache else (False, None, None)
    if found:
        return cast(T, value)

    def run() -> T:
        with request_session(request) as session:
            return read(session)

    fresh = await run_in_threadpool(run)
    if cache is not None and keep(fresh):
        cache.put(key, fresh, generation)
    return fresh


def commit_before_answer(session: Session) -> None:
    """Commit a write before its 2xx is sent (a FastAPI dependency's clean-up runs after the
    answer: issue 14 lost acknowledged catalogue writes that way). A failed commit is a 503
    (``CommitFailedError``), never a 2xx."""
    try:
        session.commit()
    except SQLAlchemyError as exc:
        session.rollback()
        raise CommitFailedError(type(exc).__name__) from exc


async def get_accelerators(request: Request) -> AcceleratorCache:
    """No I/O here (the cache reads lazily), so no thread-pool hand-off for the dependency."""
    cache: AcceleratorCache = request.app.state.accelerators
    return cache


SettingsDep = Annotated[Settings, Depends(get_settings)]
SessionDep = Annotated[Session, Depends(get_session)]
AcceleratorsDep = Annotated[AcceleratorCache, Depends(get_accelerators)]
