"""The change feed's promise: a value held in memory is never served after any writer, on any
connection or replica, changed the catalogue state or an API key, once that change has
committed (and, across processes on PostgreSQL, its NOTIFY has arrived)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text, update
from sqlalchemy.orm import Session

from service.catalog.changes import ChangeFeed, GenerationCache
from service.catalog.db import make_engine
from service.catalog.keys import create_key, revoke_key
from service.catalog.migrate import downgrade
from service.catalog.models import CatalogState
from service.main import create_app, dispose
from service.settings import Settings
from tests.conftest import BACKENDS
from tests.databases import migrate_and_seed

PEPPER = Settings().api_key_pepper.get_secret_value()


def eventually(condition: Callable[[], bool], within_s: float = 10.0) -> bool:
    """Polls ``condition``: a NOTIFY crosses processes asynchronously. The bound only stops a
    broken feed from hanging the run; a working one answers in milliseconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@pytest.fixture(params=BACKENDS)
def database_url(request: pytest.FixtureRequest, database_url_factory: object) -> str:
    url: str = database_url_factory(request.param)  # type: ignore[operator]
    migrate_and_seed(url)
    return url


@pytest.fixture
def feed(database_url: str) -> Iterator[ChangeFeed]:
    feed = ChangeFeed(database_url)
    feed.start()
    assert eventually(lambda: feed.generation() is not None), "the feed never went live"
    yield feed
    feed.stop()


def _write(url: str, statement: str) -> None:
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text(statement))
    finally:
        engine.dispose()


class TestFeed:
    def test_a_commit_on_another_connection_changes_the_generation(
        self, feed: ChangeFeed, database_url: str
    ) -> None:
        before = feed.generation()
        _write(database_url, "UPDATE catalog_state SET write_seq = write_seq + 1")
        assert eventually(lambda: feed.generation() != before)

    def test_a_rolled_back_write_is_not_a_change_on_postgresql(
        self, feed: ChangeFeed, database_url: str
    ) -> None:
        if feed.backend != "postgresql":
            pytest.skip("SQLite's data_version counts commits only; nothing to tell apart")
        before = feed.generation()
        engine = make_engine(database_url)
        try:
            with engine.connect() as conn:
                conn.execute(text("UPDATE catalog_state SET write_seq = write_seq + 1"))
                conn.rollback()
            time.sleep(0.2)
            assert feed.generation() == before
        finally:
            engine.dispose()
        # A commit afterwards proves the listener was alive and would have seen the first.
        _write(database_url, "UPDATE catalog_state SET write_seq = write_seq + 1")
        assert eventually(lambda: feed.generation() != before)

    def test_a_commit_to_another_table_is_not_a_change(
        self, feed: ChangeFeed, database_url: str
    ) -> None:
        """A stored quote changes neither the catalogue state nor a key (decision 166): on
        SQLite it moves ``data_version`` but not the triggers' count."""
        _write(database_url, "CREATE TABLE IF NOT EXISTS feed_scratch (x INTEGER)")
        before = feed.generation()
        for _ in range(3):
            _write(database_url, "INSERT INTO feed_scratch VALUES (1)")
            assert feed.generation() == before
        if feed.backend == "postgresql":
            time.sleep(0.2)  # a NOTIFY, had one been sent, would have arrived
            assert feed.generation() == before
        # The feed was watching: a write to a watched table moves the generation.
        _write(database_url, "UPDATE catalog_state SET write_seq = write_seq + 1")
        assert eventually(lambda: feed.generation() != before)

    @pytest.mark.parametrize("table", ["catalog_state", "api_keys"])
    def test_every_kind_of_write_to_a_watched_table_is_a_change(
        self, feed: ChangeFeed, database_url: str, table: str
    ) -> None:
        _key(database_url, "quotes:read")  # at least one key row to update and delete
        statements = {
            "catalog_state": ["UPDATE catalog_state SET write_seq = write_seq + 1",
                              "DELETE FROM catalog_state",
                              "INSERT INTO catalog_state (id, current_version_id, write_seq) "
                              "SELECT 1, id, 1 FROM catalog_versions LIMIT 1"],
            "api_keys": ["UPDATE api_keys SET team = 'changed'", "DELETE FROM api_keys",
                         "INSERT INTO api_keys (id, name, secret_hash, scopes, created_at) "
                         "VALUES ('k1', 'k1', 'x', 'quotes:read', '2026-11-27')"],
        }[table]
        for statement in statements:
            before = feed.generation()
            _write(database_url, statement)
            assert eventually(lambda b=before: feed.generation() != b), statement

    def test_without_the_counter_every_sqlite_commit_is_a_change(
        self, database_url: str
    ) -> None:
        """A database still at 0010 (a replica started before the migration ran): caching
        is less effective, never stale."""
        if not database_url.startswith("sqlite"):
            pytest.skip("PostgreSQL has no counter table")
        downgrade(database_url, "0010")
        feed = ChangeFeed(database_url)
        feed.start()
        try:
            _write(database_url, "CREATE TABLE IF NOT EXISTS feed_scratch (x INTEGER)")
            before = feed.generation()
            _write(database_url, "INSERT INTO feed_scratch VALUES (1)")
            assert feed.generation() != before
        finally:
            feed.stop()

    def test_a_listener_that_loses_its_connection_caches_nothing_until_it_is_back(
        self, feed: ChangeFeed, database_url: str
    ) -> None:
        if feed.backend != "postgresql":
            pytest.skip("SQLite has no connection to lose")
        cache = GenerationCache(feed)
        _, _, generation = cache.get("current")
        cache.put("current", "cv_000001", generation)
        _write(database_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE application_name = 'cq-change-feed' "
                             "AND datname = current_database()")
        assert eventually(lambda: not feed.live)
        # A change while nobody listens: its NOTIFY is lost, the entry must still go.
        _write(database_url, "UPDATE catalog_state SET write_seq = write_seq + 1")
        assert eventually(lambda: feed.live)
        assert cache.get("current")[0] is False

    def test_a_listener_that_cannot_hear_itself_is_never_live(self, database_url: str) -> None:
        """Connected but deaf (a transaction-mode pooler does not carry LISTEN): simulated by
        pinging another channel. Nothing may be served from memory then (decision 60)."""
        if not database_url.startswith("postgresql"):
            pytest.skip("SQLite has no listener")
        deaf = ChangeFeed(database_url)
        deaf.ping_channel = "cq_nobody_listens"
        deaf.start()
        try:
            healthy = ChangeFeed(database_url)
            healthy.start()
            assert eventually(lambda: healthy.generation() is not None)  # the same database
            healthy.stop()
            time.sleep(0.5)
            assert deaf.generation() is None
        finally:
            deaf.stop()

    def test_a_stopped_or_in_memory_feed_caches_nothing(self) -> None:
        memory = ChangeFeed("sqlite://")
        memory.start()
        assert memory.generation() is None
        cache = GenerationCache(memory)
        _, _, generation = cache.get("k")
        cache.put("k", 1, generation)
        assert cache.get("k")[0] is False


class TestGenerationCache:
    def test_an_entry_read_before_a_change_is_never_served_after_it(
        self, feed: ChangeFeed, database_url: str
    ) -> None:
        cache = GenerationCache(feed)
        found, _, generation = cache.get("current")
        assert not found
        # The read happens here; a writer commits before the reader stores what it read.
        _write(database_url, "UPDATE catalog_state SET write_seq = write_seq + 1")
        assert eventually(lambda: feed.generation() != generation)
        cache.put("current", "stale", generation)
        assert cache.get("current")[0] is False

    def test_an_entry_is_served_until_a_change(self, feed: ChangeFeed,
                                               database_url: str) -> None:
        cache = GenerationCache(feed)
        _, _, generation = cache.get("current")
        cache.put("current", "cv_000001", generation)
        assert cache.get("current")[:2] == (True, "cv_000001")
        _write(database_url, "UPDATE catalog_state SET write_seq = write_seq + 1")
        assert eventually(lambda: cache.get("current")[0] is False)

    def test_it_is_bounded(self, feed: ChangeFeed) -> None:
        cache = GenerationCache(feed, max_entries=3)
        for i in range(10):
            _, _, generation = cache.get(i)
            cache.put(i, i, generation)
        assert [cache.get(i)[0] for i in range(10)] == [False] * 7 + [True] * 3


@pytest.fixture
def replicas(database_url: str) -> Iterator[tuple[TestClient, TestClient]]:
    """Two replicas of the service on one database, each with its lifespan (and feed) up."""
    apps = [create_app(Settings(database_url=database_url)) for _ in range(2)]
    with TestClient(apps[0]) as one, TestClient(apps[1]) as two:
        yield one, two
    for app in apps:
        dispose(app)


def _key(database_url: str, *scopes: str) -> tuple[str, dict[str, str]]:
    engine = make_engine(database_url)
    try:
        with Session(engine) as session:
            row, key = create_key(session, name=f"feed-{time.monotonic_ns()}",
                                  scopes=list(scopes), pepper=PEPPER)
            session.commit()
            return row.name, {"Authorization": f"Bearer {key}"}
    finally:
        engine.dispose()


class TestReplicas:
    def test_a_key_revoked_outside_the_service_stops_working_on_every_replica(
        self, replicas: tuple[TestClient, TestClient], database_url: str
    ) -> None:
        name, headers = _key(database_url, "quotes:read")
        for client in replicas:  # each replica verifies the key once and holds it
            assert client.get("/v1/quotes", headers=headers).status_code == 200
            assert client.get("/v1/quotes", headers=headers).status_code == 200
        engine = make_engine(database_url)
        try:
            with Session(engine) as session:  # what `cq keys revoke` does
                revoke_key(session, name)
                session.commit()
        finally:
            engine.dispose()
        for client in replicas:
            assert eventually(
                lambda c=client: c.get("/v1/quotes", headers=headers).status_code == 401)
            assert client.get("/v1/quotes", headers=headers).status_code == 401

    def test_a_new_current_version_is_listed_by_the_replica_that_did_not_write_it(
        self, replicas: tuple[TestClient, TestClient], database_url: str
    ) -> None:
        writer, reader = replicas
        path = "/v1/offers?accelerator=h100-sxm5-80gb&page_size=5"
        first = reader.get(path)
        assert first.status_code == 200
        assert reader.get(path).content == first.content  # served from memory
        _, headers = _key(database_url, "catalog:write")
        imported = writer.post(
            "/v1/catalog/imports", params={"mode": "patch"}, headers=headers,
            json={"offers": [{
                "provider": "acme", "region": "eu-1", "instance_type": "gpu-8x-h100",
                "accelerator": "h100-sxm5-80gb", "gpus_per_instance": 8, "term": "on_demand",
                "currency": "USD", "price_per_hour": "0.80", "source": "test",
                "as_of": "2026-11-01", "indicative": False}]})
        assert imported.status_code == 201, imported.text
        new_version = imported.json()["id"]
        # The writing replica sees its own commit at once, without waiting for any NOTIFY.
        items = writer.get(path).json()["items"]
        assert {o["catalog_version"] for o in items} == {new_version}
        assert eventually(lambda: {
            o["catalog_version"] for o in reader.get(path).json()["items"]} == {new_version})

    def test_a_replica_whose_feed_is_down_reads_the_database(
        self, replicas: tuple[TestClient, TestClient], database_url: str
    ) -> None:
        _, reader = replicas
        reader.app.state.changes.stop()  # type: ignore[attr-defined]
        path = "/v1/offers?accelerator=h100-sxm5-80gb&page_size=5"
        assert reader.get(path).status_code == 200
        engine = make_engine(database_url)
        try:
            with engine.begin() as conn:
                conn.execute(update(CatalogState).values(write_seq=CatalogState.write_seq))
        finally:
            engine.dispose()
        cache = reader.app.state.state_cache  # type: ignore[attr-defined]
        hits = cache.hits
        assert reader.get(path).status_code == 200
        assert cache.hits == hits  # nothing was served from memory


def test_a_replica_reuses_a_versions_quote_offers_and_a_new_version_is_priced_at_once(
    replicas: tuple[TestClient, TestClient], database_url: str
) -> None:
    """The quote-offer cache is keyed by the (immutable) version: a repeated quote reads no
    offers, and a quote after an import prices the new version's offers."""
    client, _ = replicas
    _, headers = _key(database_url, "quotes:write", "catalog:write")
    body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 1000,
                                       "num_gpus": 8}},
            "terms": ["on_demand"], "providers": ["acme", "aws"]}

    def quote(key: str) -> dict[str, object]:
        answer = client.post("/v1/quotes", json=body,
                             headers={**headers, "Idempotency-Key": key})
        assert answer.status_code == 201, answer.text
        return answer.json()  # type: ignore[no-any-return]

    cache = client.app.state.quote_offers  # type: ignore[attr-defined]
    first = quote("q1")
    hits = cache.hits
    second = quote("q2")
    assert cache.hits == hits + 1
    assert second["lines"] == first["lines"]
    assert all(line["provider"] == "aws" for line in first["lines"])  # type: ignore[index]
    imported = client.post(
        "/v1/catalog/imports", params={"mode": "patch"}, headers=headers,
        json={"offers": [{
            "provider": "acme", "region": "eu-1", "instance_type": "gpu-8x-h100",
            "accelerator": "h100-sxm5-80gb", "gpus_per_instance": 8, "term": "on_demand",
            "currency": "USD", "price_per_hour": "0.80", "source": "test",
            "as_of": "2026-11-01", "indicative": False}]})
    assert imported.status_code == 201, imported.text
    third = quote("q3")
    assert third["catalog_version"] == imported.json()["id"]
    assert third["cheapest"]["provider"] == "acme"  # type: ignore[index]


def test_a_stored_quote_leaves_the_verified_key_and_the_current_version_in_memory(
    replicas: tuple[TestClient, TestClient], database_url: str
) -> None:
    """A quote writes only its own row: the next request is answered with the key and the
    current version held in memory, on SQLite too (decision 166), with no read of either."""
    client, _ = replicas
    _, headers = _key(database_url, "quotes:write")
    body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 1000,
                                       "num_gpus": 8}}, "terms": ["on_demand"]}
    assert eventually(lambda: client.app.state.changes.live)  # type: ignore[attr-defined]
    cache = client.app.state.state_cache  # type: ignore[attr-defined]
    for n in range(3):
        misses = cache.misses
        answer = client.post("/v1/quotes", json=body,
                             headers={**headers, "Idempotency-Key": f"held-{n}"})
        assert answer.status_code == 201, answer.text
        if n:
            assert cache.misses == misses, "a stored quote emptied the key or version cache"
