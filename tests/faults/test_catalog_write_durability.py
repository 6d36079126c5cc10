"""Catalogue and policy writes: a 2xx means committed (issue 14, defect 1).

- Read-your-writes: 200 consecutive edit-then-read pairs over real HTTP on each backend; the
  read right after a 200 must see the write (before the fix the session committed after the
  answer was sent, and 6-52 % of such reads missed it).
- A failure injected at commit answers 503, never a 2xx, and stores nothing: offer edits,
  imports, policies and FX imports (SQLite), and discount books, accelerators, refreshes and
  policy revisions (issue 36, on both backends).
- A replica killed with SIGKILL as soon as the answer's first byte arrives loses nothing
  (before the fix, 11 of 14 acknowledged writes were lost).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from service.api.schemas.catalog import ACCELERATOR_EXAMPLE
from service.catalog.db import make_engine
from service.main import create_app, dispose
from service.settings import Settings
from tests.factories import seeded_database_with_key
from tests.live_server import live_server, server_process

BACKENDS = [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]
SCOPES = ["catalog:write", "policies:write"]
IMPORTERS = Path(__file__).parents[1] / "data" / "importers"


FX_IMPORT = b"Date,USD,\n2025-06-02,1.1444,\n"


def _fx_fixing(client: httpx.Client | TestClient) -> str:
    answer = client.get("/v1/fx-rates", params={"date": "2025-06-30", "currency": ["USD"]})
    fixing: str = answer.json()["fixing_date"]
    return fixing


def _edit(price: str) -> dict[str, Any]:
    return {"price_per_hour": price, "source": "durability test", "as_of": "2026-11-20",
            "indicative": False}


def _small_catalogue(client: httpx.Client | TestClient, auth: dict[str, str]) -> None:
    """Replace the seed with 30 offers, so each edit (a new version) is cheap."""
    offers = [{"provider": "acme", "region": f"r{i}", "instance_type": "gpu-8x-h100",
               "accelerator": "h100-sxm5-80gb", "gpus_per_instance": 8, "term": "on_demand",
               "currency": "USD", "price_per_hour": "10.000000", "source": "test",
               "as_of": "2026-11-01", "indicative": False} for i in range(30)]
    created = client.post("/v1/catalog/imports", json={"offers": offers}, headers=auth)
    assert created.status_code == 201, created.text


def _an_offer(client: httpx.Client | TestClient) -> tuple[str, str]:
    page = client.get("/v1/offers", params={"provider": "acme", "term": "on_demand",
                                           "page_size": 1}).json()
    offer_id = page["items"][0]["id"]
    return offer_id, client.get(f"/v1/offers/{offer_id}").headers["etag"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_hundred_writes_are_each_read_back_at_once(
    database_url_factory: Callable[[str], str], backend: str,
) -> None:
    url = database_url_factory(backend)
    key = seeded_database_with_key(url, name="writer", scopes=SCOPES)
    auth = {"Authorization": f"Bearer {key}"}
    missed: list[int] = []
    with live_server(Settings(database_url=url, search_workers=0)) as base, \
            httpx.Client(base_url=base, timeout=30) as client:
        _small_catalogue(client, auth)
        offer_id, etag = _an_offer(client)
        for i in range(200):
            price = Decimal("50.00") + Decimal(i) / 100
            put = client.put(f"/v1/offers/{offer_id}", json=_edit(str(price)),
                             headers={**auth, "If-Match": etag})
            assert put.status_code == 200, put.text
            etag = put.headers["etag"]
            got = client.get(f"/v1/offers/{offer_id}")
            if Decimal(got.json()["price_per_hour"]) != price or got.headers["etag"] != etag:
                missed.append(i)
        policy = client.post("/v1/policies", json={"name": "ryw", "rules": {}}, headers=auth)
        assert policy.status_code == 201
        assert client.get("/v1/policies/ryw").status_code == 200
    print(f"read-your-writes ({backend}): 200 pairs, {len(missed)} missed")
    assert missed == []


class _FailingCommit(Session):
    def commit(self) -> None:
        raise OperationalError("COMMIT", {}, Exception("injected at commit"))


@pytest.fixture
def failing_app(database_url_factory: Callable[[str], str]) -> Iterator[tuple[Any, str]]:
    url = database_url_factory("sqlite")
    key = seeded_database_with_key(url, name="writer", scopes=SCOPES)
    app = create_app(Settings(database_url=url, search_workers=0))
    yield app, key
    dispose(app)


def test_a_failure_at_commit_is_503_and_stores_nothing(failing_app: tuple[Any, str]) -> None:
    app, key = failing_app
    auth = {"Authorization": f"Bearer {key}"}
    good = app.state.session_factory
    with TestClient(app) as client:
        _small_catalogue(client, auth)
        offer_id, etag = _an_offer(client)
        before = client.get(f"/v1/offers/{offer_id}").json()
        versions = len(client.get("/v1/catalog/versions").json()["items"])
        app.state.session_factory = sessionmaker(bind=make_engine(
            str(app.state.settings.resolved_database_url)), class_=_FailingCommit,
            expire_on_commit=False)
        answers = [
            client.put(f"/v1/offers/{offer_id}", json=_edit("99.99"),
                       headers={**auth, "If-Match": etag}),
            client.post("/v1/catalog/imports?mode=patch", headers={
                **auth, "content-type": "application/json"},
                content=b'{"offers": []}'),
            client.post("/v1/policies", json={"name": "lost", "rules": {}}, headers=auth),
            client.post("/v1/fx-rates/imports", content=FX_IMPORT,
                        headers={**auth, "content-type": "text/csv"}),
        ]
        app.state.session_factory = good
        assert answers[0].status_code == 503, answers[0].text
        assert answers[0].headers["content-type"] == "application/problem+json"
        assert answers[0].headers["retry-after"] == "1"
        assert answers[1].status_code in (422, 503)  # an empty import is refused first
        assert answers[2].status_code == 503
        assert client.get(f"/v1/offers/{offer_id}").json() == before
        assert len(client.get("/v1/catalog/versions").json()["items"]) == versions
        assert client.get("/v1/policies/lost").status_code == 404
        assert answers[3].status_code == 503, answers[3].text
        assert _fx_fixing(client) == "2025-05-09"  # the seed's last fixing: nothing stored


def _failing_commits(app: Any) -> sessionmaker[Session]:
    engine = make_engine(str(app.state.settings.resolved_database_url))
    app.state.test_engines = [*getattr(app.state, "test_engines", []), engine]
    return sessionmaker(bind=engine, class_=_FailingCommit, expire_on_commit=False)


def _is_503(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.headers["retry-after"] == "1"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failure_at_commit_of_books_accelerators_refreshes_is_503_and_stores_nothing(
    database_url_factory: Callable[[str], str], backend: str,
) -> None:
    url = database_url_factory(backend)
    key = seeded_database_with_key(url, name="writer", scopes=[*SCOPES, "discounts:write"])
    auth = {"Authorization": f"Bearer {key}"}
    book = {"entries": [{"provider": "aws", "accelerator": "h100-sxm5-80gb",
                         "percent_off": "18", "valid_from": "2026-01-01",
                         "valid_until": "2026-12-31"}]}
    app = create_app(Settings(database_url=url, search_workers=0))
    try:
        with TestClient(app) as client:
            good = app.state.session_factory
            made = client.post("/v1/discount-books", json={"name": "kept", **book}, headers=auth)
            policy = client.post("/v1/policies", json={"name": "kept", "rules": {}},
                                 headers=auth)
            assert made.status_code == policy.status_code == 201
            before = client.get("/v1/catalog/versions").json()["items"]
            app.state.session_factory = _failing_commits(app)
            answers = {
                "book create": client.post("/v1/discount-books",
                                           json={"name": "lost", **book}, headers=auth),
                "book revise": client.put("/v1/discount-books/kept", json=book, headers={
                    **auth, "If-Match": made.headers["etag"]}),
                "policy revise": client.put("/v1/policies/kept", json={"rules": {}}, headers={
                    **auth, "If-Match": policy.headers["etag"]}),
                "accelerator": client.post("/v1/accelerators", json=ACCELERATOR_EXAMPLE,
                                           headers=auth),
                "refresh": client.post(
                    "/v1/catalog/refreshes", params={"format": "aws"},
                    content=(IMPORTERS / "aws_ec2_offer.json").read_bytes(),
                    headers={**auth, "content-type": "application/json"}),
            }
            app.state.session_factory = good
            for what, answer in answers.items():
                print(f"commit fails, {what} ({backend}): {answer.status_code}")
                _is_503(answer)
            assert client.get("/v1/discount-books/lost").status_code == 404
            assert client.get("/v1/discount-books/kept").headers["etag"] == made.headers["etag"]
            assert client.get("/v1/policies/kept").headers["etag"] == policy.headers["etag"]
            accelerator = f"/v1/accelerators/{ACCELERATOR_EXAMPLE['id']}"
            assert client.get(accelerator).status_code == 404
            assert client.get("/v1/catalog/versions").json()["items"] == before
            # and the same writes, committed, are stored: the 503s were the commit's
            assert client.post("/v1/accelerators", json=ACCELERATOR_EXAMPLE,
                               headers=auth).status_code == 201
    finally:
        for engine in getattr(app.state, "test_engines", []):
            engine.dispose()
        dispose(app)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_replica_killed_at_the_first_byte_of_the_answer_loses_nothing(
    database_url_factory: Callable[[str], str], backend: str,
) -> None:
    url = database_url_factory(backend)
    key = seeded_database_with_key(url, name="writer", scopes=SCOPES)
    auth = {"Authorization": f"Bearer {key}"}
    env = {"CQ_DATABASE_URL": url, "CQ_SEARCH_WORKERS": "0", "CQ_LOG_LEVEL": "warning"}
    acknowledged: dict[str, tuple[Decimal, str]] = {}
    for i in range(1):
        with server_process(env) as server, httpx.Client(base_url=server.url,
                                                         timeout=30) as client:
            if i == 0:
                _small_catalogue(client, auth)
            offer_id, etag = _an_offer(client)
            price = Decimal("70.00") + i
            with client.stream("PUT", f"/v1/offers/{offer_id}", json=_edit(str(price)),
                               headers={**auth, "If-Match": etag}) as response:
                status = response.status_code  # the status line: the answer's first bytes
                server.kill9()
            assert status == 200
            acknowledged[offer_id] = (price, response.headers["etag"])
        with server_process(env) as again:
            got = httpx.get(f"{again.url}/v1/offers/{offer_id}", timeout=30)
            assert Decimal(got.json()["price_per_hour"]) == price, f"write {i} lost"
            assert got.headers["etag"] == acknowledged[offer_id][1]
    print(f"kill -9 at the first byte ({backend}): 1 acknowledged, 0 lost")


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_fx_import_killed_at_the_first_byte_of_its_answer_is_kept(
    database_url_factory: Callable[[str], str], backend: str,
) -> None:
    url = database_url_factory(backend)
    key = seeded_database_with_key(url, name="writer", scopes=SCOPES)
    env = {"CQ_DATABASE_URL": url, "CQ_SEARCH_WORKERS": "0", "CQ_LOG_LEVEL": "warning"}
    with server_process(env) as server, httpx.Client(base_url=server.url, timeout=30) as client:
        with client.stream("POST", "/v1/fx-rates/imports", content=FX_IMPORT, headers={
                "Authorization": f"Bearer {key}", "content-type": "text/csv"}) as response:
            status = response.status_code
            server.kill9()
        assert status == 201
    with server_process(env) as again, httpx.Client(base_url=again.url, timeout=30) as client:
        assert _fx_fixing(client) == "2025-06-02"
