"""PostgreSQL stops under a running service and comes back (a private cluster, so the shared
server is never touched): readiness drops within 2 s, estimates keep answering from the cache,
quotes answer 503 problem+json with Retry-After, and everything recovers within 5 s.

It is also killed under a mix of writes (issue 36): offer edits, imports, policies, discount
books and quotes. Every write that got a 2xx is stored as answered, and none answers 500.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.api.schemas.estimate import ESTIMATE_EXAMPLE
from service.catalog.db import make_engine
from service.catalog.keys import create_key
from service.catalog.models import Quote
from service.catalog.seed import seed_catalog
from service.settings import Settings
from tests.databases import upgrade
from tests.faults.conftest import Cluster
from tests.live_server import live_server


def _until(check: object, limit_s: float) -> float:
    """Seconds until ``check()`` is true; fails after ``limit_s``."""
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        try:
            if check():  # type: ignore[operator]
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    pytest.fail(f"not within {limit_s} s")


@pytest.mark.postgres
def test_outage_and_recovery(cluster: Cluster) -> None:
    upgrade(cluster.url)
    engine = make_engine(cluster.url)
    settings = Settings(database_url=cluster.url)
    with Session(engine) as session:
        seed_catalog(session)
        _, key = create_key(session, name="ops", scopes=["quotes:write"],
                            pepper=settings.api_key_pepper.get_secret_value())
        session.commit()
    engine.dispose()
    quote = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 100,
                                        "num_gpus": 8}}, "providers": ["lambda"]}

    def post_quote(client: httpx.Client) -> httpx.Response:
        return client.post("/v1/quotes", json=quote, headers={
            "Authorization": f"Bearer {key}", "Idempotency-Key": uuid.uuid4().hex})

    with live_server(settings) as base, httpx.Client(base_url=base, timeout=10) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.text
        assert client.post("/v1/estimates", json=ESTIMATE_EXAMPLE).status_code == 200
        assert post_quote(client).status_code == 201

        cluster.stop_immediately()
        took = _until(lambda: client.get("/readyz").status_code == 503, 2.0)
        assert took < 2.0
        estimate = client.post("/v1/estimates", json=ESTIMATE_EXAMPLE)
        assert estimate.status_code == 200  # accelerator specs come from the cache
        failed = post_quote(client)
        assert failed.status_code == 503, failed.text
        assert failed.headers["content-type"] == "application/problem+json"
        assert int(failed.headers["retry-after"]) >= 1

        cluster.start()
        recovered = _until(lambda: client.get("/readyz").status_code == 200
                           and post_quote(client).status_code == 201, 5.0)
        assert recovered < 5.0


MIXED_CRASH_AT = 40
"""Acknowledged writes before PostgreSQL is killed."""
MIXED_AFTER_RESTART = 4
"""Acknowledged writes each writer makes once PostgreSQL is back: the run covers the
recovery, whatever the machine's speed."""
MIXED_DEADLINE_S = 180.0
"""A bound on the whole run, so a service that never recovers fails instead of hanging (a
wait, not a speed test: a healthy run takes seconds)."""
ACME = {"provider": "acme", "instance_type": "gpu-8x-h100", "accelerator": "h100-sxm5-80gb",
        "gpus_per_instance": 8, "term": "on_demand", "currency": "USD",
        "price_per_hour": "10.000000", "source": "outage test", "as_of": "2026-11-01",
        "indicative": False}
BOOK_ENTRIES = [{"provider": "acme", "accelerator": "h100-sxm5-80gb", "percent_off": "10",
                 "valid_from": "2026-01-01", "valid_until": "2026-12-31"}]


class _Mixed:
    """The shared state of the mixed-write run: what was acknowledged, and when to crash."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.lock = threading.Lock()
        self.statuses: Counter[str] = Counter()
        self.acknowledged: dict[str, list[Any]] = {}
        self.crashed, self.restarted = threading.Event(), threading.Event()
        self.deadline = time.monotonic() + MIXED_DEADLINE_S

    def answered(self, kind: str, response: httpx.Response | None, record: Any = None) -> bool:
        """Count an answer (None: a transport error); keep ``record`` if it is a 2xx."""
        status = "transport" if response is None else str(response.status_code)
        with self.lock:
            self.statuses[f"{kind} {status}"] += 1
            if response is None or not response.is_success:
                return False
            self.acknowledged.setdefault(kind, []).append(record)
            total = sum(len(v) for v in self.acknowledged.values())
        if total == MIXED_CRASH_AT:
            threading.Thread(target=self._crash_and_restart).start()
        return True

    def _crash_and_restart(self) -> None:
        self.cluster.stop_immediately()
        self.crashed.set()
        time.sleep(1.0)
        self.cluster.start()
        self.restarted.set()

    def writer(self, write: Callable[[httpx.Client, int], bool], base: str) -> None:
        """Run ``write(client, i)`` until this writer made MIXED_AFTER_RESTART acknowledged
        writes after the restart."""
        after = 0
        with httpx.Client(base_url=base, timeout=15) as client:
            for i in itertools.count():
                if time.monotonic() > self.deadline:
                    return
                restarted = self.restarted.is_set()
                try:
                    ok = write(client, i)
                except httpx.TransportError:
                    ok = False
                after += ok and restarted
                if after >= MIXED_AFTER_RESTART:
                    return
                if not ok:
                    time.sleep(0.05)


def _send(client: httpx.Client, method: str, url: str, **kwargs: Any) -> httpx.Response | None:
    try:
        return client.request(method, url, **kwargs)
    except httpx.TransportError:
        return None


@pytest.mark.postgres
def test_a_crash_under_mixed_writes_loses_no_acknowledged_write(cluster: Cluster) -> None:
    """Offer edits, imports, policies and discount books (created and revised) and quotes,
    one writer each, while PostgreSQL is killed (``stop -m immediate``) and restarted: every
    2xx is stored as answered, no quote key is stored twice, and nothing answers 500."""
    upgrade(cluster.url)
    engine = make_engine(cluster.url)
    settings = Settings(database_url=cluster.url, search_workers=0)
    with Session(engine) as session:
        seed_catalog(session)
        _, key = create_key(session, name="mixed", scopes=[
            "catalog:write", "policies:write", "discounts:write", "quotes:write"],
            pepper=settings.api_key_pepper.get_secret_value())
        session.commit()
    engine.dispose()
    auth = {"Authorization": f"Bearer {key}"}
    run = _Mixed(cluster)
    quote = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 100,
                                        "num_gpus": 8}}, "providers": ["acme"]}

    with live_server(settings) as base, httpx.Client(base_url=base, timeout=30) as client:
        # A small catalogue, so that each edit and import (a new version) is cheap.
        small = client.post("/v1/catalog/imports", headers=auth, json={
            "offers": [{**ACME, "region": f"r{i}"} for i in range(20)]})
        assert small.status_code == 201, small.text
        offer_id = client.get("/v1/offers", params={"provider": "acme", "region": "r0"}
                              ).json()["items"][0]["id"]
        etag = [client.get(f"/v1/offers/{offer_id}").headers["etag"]]

        def edit_offer(mine: httpx.Client, i: int) -> bool:
            if etag[0] == "":
                got = _send(mine, "GET", f"/v1/offers/{offer_id}")
                if got is None or got.status_code != 200:
                    return False
                etag[0] = got.headers["etag"]
            price = f"{20 + i / 100:.6f}"
            answer = _send(mine, "PUT", f"/v1/offers/{offer_id}", headers={
                **auth, "If-Match": etag[0]}, json={**{k: ACME[k] for k in (
                    "source", "as_of", "indicative")}, "price_per_hour": price})
            ok = answer is not None and answer.status_code == 200
            etag[0] = answer.headers["etag"] if ok and answer is not None else ""
            return run.answered("offer-edit", answer, ok and answer is not None and (
                answer.json()["catalog_version"], answer.headers["etag"], price))

        def import_offers(mine: httpx.Client, i: int) -> bool:
            answer = _send(mine, "POST", "/v1/catalog/imports", params={
                "mode": "patch", "note": f"mixed-{i}"}, headers=auth,
                json={"offers": [{**ACME, "region": f"imp-{i}"}]})
            location = answer.headers.get("location") if answer is not None else None
            return run.answered("import", answer, (location, f"mixed-{i}"))

        def document(path: str, kind: str, content: dict[str, Any]) -> Callable[
                [httpx.Client, int], bool]:
            def write(mine: httpx.Client, i: int) -> bool:
                name = f"mixed-{i}"
                made = _send(mine, "POST", path, headers=auth, json={
                    "name": name, "description": f"{name} r1", **content})
                if not run.answered(f"{kind}-create", made, (name, 1, f"{name} r1")):
                    return False
                assert made is not None
                revised = _send(mine, "PUT", f"{path}/{name}", headers={
                    **auth, "If-Match": made.headers["etag"]},
                    json={"description": f"{name} r2", **content})
                return run.answered(f"{kind}-revise", revised, (name, 2, f"{name} r2"))
            return write

        def create_quote(mine: httpx.Client, i: int) -> bool:
            answer = _send(mine, "POST", "/v1/quotes", json=quote, headers={
                **auth, "Idempotency-Key": f"mixed-{i}"})
            quote_id = answer.headers.get("location", "").rsplit("/", 1)[-1] \
                if answer is not None else None
            return run.answered("quote", answer, (f"mixed-{i}", quote_id))

        writers = [edit_offer, import_offers,
                   document("/v1/policies", "policy", {"rules": {}}),
                   document("/v1/discount-books", "discount-book", {"entries": BOOK_ENTRIES}),
                   create_quote]
        threads = [threading.Thread(target=run.writer, args=(w, base)) for w in writers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert run.crashed.is_set(), run.statuses
        assert run.restarted.is_set(), run.statuses
        assert time.monotonic() < run.deadline, f"no recovery: {run.statuses}"

        lost: list[Any] = []
        for version, tag, price in run.acknowledged.get("offer-edit", []):
            got = client.get(f"/v1/offers/{offer_id}", params={"version": version})
            if got.status_code != 200 or got.headers["etag"] != tag \
                    or got.json()["price_per_hour"] != price:
                lost.append(("offer-edit", version, tag, price))
        for location, note in run.acknowledged.get("import", []):
            got = client.get(location)
            if got.status_code != 200 or got.json()["note"] != note:
                lost.append(("import", location))
        for kind, path in (("policy", "/v1/policies"), ("discount-book", "/v1/discount-books")):
            for name, revision, text in (run.acknowledged.get(f"{kind}-create", [])
                                         + run.acknowledged.get(f"{kind}-revise", [])):
                got = client.get(f"{path}/{name}", params={"revision": revision})
                if got.status_code != 200 or got.json()["description"] != text:
                    lost.append((kind, name, revision))
    stored = _quotes_by_key(cluster.url)
    quotes = run.acknowledged.get("quote", [])
    lost += [("quote", k, q) for k, q in quotes if stored.get(k) != [q]]
    doubled = [k for k, ids in stored.items() if len(ids) > 1]
    acknowledged = sum(len(v) for v in run.acknowledged.values())
    fivexx = {k: n for k, n in run.statuses.items()
              if k.rsplit(" ", 1)[1].startswith("5") and not k.endswith(" 503")}
    print(f"mixed writes through a PostgreSQL crash: {acknowledged} acknowledged "
          f"({ {k: len(v) for k, v in run.acknowledged.items()} }), lost {len(lost)}, "
          f"doubled {len(doubled)}; {dict(run.statuses)}")
    assert fivexx == {}, run.statuses
    assert any(k.endswith((" 503", " transport")) for k in run.statuses)  # the crash was seen
    assert {k.rsplit(" ", 1)[1] for k in run.statuses} <= {
        "200", "201", "412", "503", "transport"}, run.statuses
    assert len(run.acknowledged) == 7, run.acknowledged.keys()  # every kind got through
    assert lost == [], lost[:5]
    assert doubled == []


def _quotes_by_key(url: str) -> dict[str, list[str]]:
    engine = make_engine(url)
    with Session(engine) as session:
        rows = session.execute(select(Quote.idempotency_key, Quote.id)
                               .where(Quote.idempotency_key.startswith("mixed-"))).all()
    engine.dispose()
    found: dict[str, list[str]] = {}
    for key, quote_id in rows:
        found.setdefault(key, []).append(quote_id)
    return found
