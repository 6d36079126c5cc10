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
        if item["as_of"] is None:  # the source gives no date: stale, with no age
            assert (item["age_days"], item["stale"]) == (None, True)
            continue
        as_of = dt.date.fromisoformat(item["as_of"])
        assert item["age_days"] in {(before - as_of).days, (after - as_of).days}
        assert item["stale"] == (item["age_days"] > 180)
    assert any(i["as_of"] is None for i in items)
    # The AWS capacity-block prices are dated 2024-12-31: stale by now.
    blocks = client.get("/v1/offers", params={"term": "capacity_block"}).json()["items"]
    assert blocks
    assert all(b["stale"] and b["age_days"] > 180 for b in blocks)


def test_the_threshold_is_the_setting(strict: TestClient) -> None:
    listed = strict.get("/v1/offers", params={"page_size": 50}).json()["items"]
    assert all(o["stale"] == (o["age_days"] is None or o["age_days"] > 1) for o in listed)
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


def test_an_undated_price_is_never_approved_under_a_price_age_limit(
    client: TestClient, api_key: object, db_session: Session
) -> None:
    """A price with no date at all (no as_of, and no observed_at, as offers stored before
    schema 0013 are; issue 17): under the default policy's max_price_age_s a quote on it
    fails undated_price and is not approved, however large the budget; the same offers dated
    by a refresh approve. (The seed's prices were read on a known day: issue 39,
    tests/api/test_price_dates.py.)"""
    from sqlalchemy import update

    from service.catalog.models import OfferRevision
    from tests.factories import date_offers

    db_session.execute(update(OfferRevision).values(observed_at=None))

    headers = {**api_key("quotes:write"), "Idempotency-Key": "undated-1"}  # type: ignore[operator]
    body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 1000,
                                       "num_gpus": 8}},
            "providers": ["aws"], "terms": ["on_demand"],
            "budget": {"amount": "100000000.00", "currency": "USD"}}
    quote = client.post("/v1/quotes", json=body, headers=headers).json()
    assert quote["verdict"] == "reject"
    line = quote["cheapest"]
    assert "undated_price" in line["flags"]
    assert line["price_as_of"] is None
    assert any(r["code"] == "undated_price" and r["outcome"] == "fail" for r in line["rules"])
    date_offers(db_session, providers=("aws",))
    dated = client.post("/v1/quotes", json=body,
                        headers={**headers, "Idempotency-Key": "undated-2"}).json()
    assert dated["verdict"] == "approve"
    assert "undated_price" not in dated["cheapest"]["flags"]
    assert dated["cheapest"]["price_as_of"] == _today().isoformat()
