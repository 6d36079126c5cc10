"""Stale offers (issue 17): an offer whose as_of is more than CQ_STALE_AFTER_DAYS before
today is listed with stale: true and its age; the portal says so where it prices with one."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from service.api.deps import get_session
from service.main import create_app, dispose
from service.settings import Settings
from tests.api.test_ui import FORM


def _today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def _client(engine: Engine, session: Session, days: int) -> TestClient:
    app = create_app(Settings(database_url=engine.url.render_as_string(hide_password=False),
                              stale_after_days=days))
    app.dependency_overrides[get_session] = lambda: session
    return TestClient(app, raise_server_exceptions=False)


@pytest.fixture
def strict(migrated_engine: Engine, db_session: Session) -> Iterator[TestClient]:
    """Offers are stale after one day."""
    client = _client(migrated_engine, db_session, 1)
    yield client
    dispose(client.app)  # type: ignore[arg-type]


def test_every_listed_offer_states_its_age_and_whether_it_is_stale(client: TestClient) -> None:
    before = _today()
    items = client.get("/v1/offers", params={"page_size": 200}).json()["items"]
    after = _today()
    assert items
    for item in items:
        as_of = dt.date.fromisoformat(item["as_of"])
        assert item["age_days"] in {(before - as_of).days, (after - as_of).days}
        assert item["stale"] == (item["age_days"] > 180)
    # The AWS capacity-block prices are dated 2024-12-31: stale by now.
    blocks = client.get("/v1/offers", params={"term": "capacity_block"}).json()["items"]
    assert blocks
    assert all(b["stale"] for b in blocks)


def test_the_threshold_is_the_setting(strict: TestClient) -> None:
    listed = strict.get("/v1/offers", params={"page_size": 50}).json()["items"]
    assert all(o["stale"] == (o["age_days"] > 1) for o in listed)
    assert any(o["stale"] for o in listed)
    one = strict.get(f"/v1/offers/{listed[0]['id']}").json()
    assert one["stale"] == listed[0]["stale"]


def test_the_portal_says_when_the_price_it_used_is_stale(strict: TestClient) -> None:
    html = strict.post("/ui", data={**FORM, "action": "estimate"}).text
    assert "the cheapest on-demand offer" in html
    assert "stale:" in html
    assert "re-check the price" in html


def test_an_offer_exactly_at_the_threshold_is_not_stale_and_a_day_older_is(
    strict: TestClient, api_key: object
) -> None:
    """The boundary of ``age_days > CQ_STALE_AFTER_DAYS`` (1 day here), on one edited offer."""
    headers = api_key("catalog:write")  # type: ignore[operator]
    offer = strict.get("/v1/offers", params={"page_size": 1}).json()["items"][0]
    for age, stale in ((1, False), (2, True)):
        etag = strict.get(f"/v1/offers/{offer['id']}").headers["etag"]
        today = _today()
        as_of = (today - dt.timedelta(days=age)).isoformat()
        edit = strict.put(f"/v1/offers/{offer['id']}", headers={**headers, "If-Match": etag},
                          json={"price_per_hour": offer["price_per_hour"], "source": "test",
                                "as_of": as_of, "indicative": False})
        assert edit.status_code == 200, edit.text
        listed = strict.get("/v1/offers", params={"page_size": 200}).json()["items"]
        if _today() != today:
            continue  # midnight (UTC) passed during the step: the ages moved on by a day
        assert edit.json()["age_days"] == age
        assert edit.json()["stale"] is stale
        assert {o["id"]: o["stale"] for o in listed}[offer["id"]] is stale
