"""The price catalogue over HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from service.api.deps import get_session
from service.main import create_app, dispose
from service.settings import Settings
from tests.api.test_estimates import assert_problem

KeyMaker = Callable[..., dict[str, str]]


def acme(**changes: Any) -> dict[str, Any]:
    offer: dict[str, Any] = {
        "provider": "acme", "region": "eu-1", "instance_type": "gpu-8x-h100",
        "accelerator": "h100-sxm5-80gb", "gpus_per_instance": 8, "term": "on_demand",
        "currency": "USD", "price_per_hour": "20.00", "source": "ACME price list",
        "as_of": "2026-11-01", "indicative": False,
    }
    offer.update(changes)
    return offer


def current(client: TestClient) -> dict[str, Any]:
    versions = client.get("/v1/catalog/versions").json()["items"]
    return next(v for v in versions if v["current"])


class TestListOffers:
    def test_filters_sort_by_per_gpu_price_and_pages_cover_everything_once(
        self, client: TestClient
    ) -> None:
        seen: list[dict[str, Any]] = []
        token = None
        while True:
            params: dict[str, Any] = {"accelerator": "h100-sxm5-80gb", "term": "on_demand",
                                      "page_size": 7}
            if token:
                params["page_token"] = token
            page = client.get("/v1/offers", params=params).json()
            seen += page["items"]
            token = page["next_page_token"]
            if token is None:
                break
        assert len(seen) > 20
        assert len({o["id"] for o in seen}) == len(seen)
        assert {(o["accelerator"], o["term"]) for o in seen} == {("h100-sxm5-80gb", "on_demand")}
        per_gpu = [Decimal(o["price_per_gpu_hour"]) for o in seen]
        assert per_gpu == sorted(per_gpu)
        for offer in seen:
            expected = Decimal(offer["effective_price_per_hour"]) / Decimal(
                str(offer["gpus_per_instance"]))
            assert abs(Decimal(offer["price_per_gpu_hour"]) - expected) <= Decimal("0.000001")
            assert offer["source"]
            assert offer["currency"] == "USD"

    def test_provider_and_region_filters(self, client: TestClient) -> None:
        items = client.get("/v1/offers", params={"provider": "aws", "region": "us-east-1",
                                                 "page_size": 200}).json()["items"]
        assert items
        assert {(o["provider"], o["region"]) for o in items} == {("aws", "us-east-1")}

    @pytest.mark.parametrize(("params", "status", "field"), [
        ({"page_size": 201}, 422, "page_size"),
        ({"term": "weekly"}, 422, "term"),
        ({"version": "cv_1; DROP TABLE offers"}, 422, "version"),
        ({"page_token": "!!!"}, 400, None),
        ({"page_token": "bm90LWEtdG9rZW4"}, 400, None),
    ])
    def test_bad_queries_are_problems(
        self, client: TestClient, params: dict[str, Any], status: int, field: str | None
    ) -> None:
        assert_problem(client.get("/v1/offers", params=params), status, field)

    def test_unknown_version_is_404(self, client: TestClient) -> None:
        assert_problem(client.get("/v1/offers", params={"version": "cv_999999"}), 404)


class TestVersions:
    def test_seed_version_detail_has_counts_and_the_quality_report(
        self, client: TestClient
    ) -> None:
        version = current(client)
        detail = client.get(f"/v1/catalog/versions/{version['id']}").json()
        assert detail["kind"] == "seed"
        assert sum(detail["by_provider"].values()) == detail["offer_count"]
        assert sum(detail["by_term"].values()) == detail["offer_count"]
        flags = detail["quality"]["flags"]
        assert flags["spot_above_on_demand"]["count"] >= 1
        assert flags["missing_on_demand"]["count"] >= 1
        flagged = flags["missing_on_demand"]["offer_ids"][0]
        offer = client.get(f"/v1/offers/{flagged}").json()
        assert "missing_on_demand" in {f["code"] for f in offer["quality_flags"]}

    def test_unknown_version_is_404(self, client: TestClient) -> None:
        assert_problem(client.get("/v1/catalog/versions/cv_999999"), 404)


class TestImportExport:
    def test_csv_export_imports_back_to_the_same_content_and_hash(
        self, client: TestClient, api_key: KeyMaker
    ) -> None:
        headers = api_key("catalog:write")
        old = current(client)
        exported = client.get(f"/v1/catalog/versions/{old['id']}/export")
        assert exported.headers["content-type"].startswith("text/csv")
        response = client.post("/v1/catalog/imports", content=exported.content,
                               headers={**headers, "Content-Type": "text/csv"},
                               params={"note": "round trip"})
        assert response.status_code == 201, response.text
        new = response.json()
        assert response.headers["location"] == f"/v1/catalog/versions/{new['id']}"
        assert new["id"] != old["id"]
        assert new["content_hash"] == old["content_hash"]
        assert new["offer_count"] == old["offer_count"]
        assert new["changes"]["unchanged"] == old["offer_count"]
        again = client.get(f"/v1/catalog/versions/{new['id']}/export")
        assert again.content == exported.content
        assert again.headers["x-content-hash"] == old["content_hash"]

    def test_json_export_imports_back_to_the_same_content_and_hash(
        self, client: TestClient, api_key: KeyMaker
    ) -> None:
        headers = api_key("catalog:write")
        old = current(client)
        document = client.get(f"/v1/catalog/versions/{old['id']}/export",
                              params={"format": "json"}).json()
        assert document["content_hash"] == old["content_hash"]
        new = client.post("/v1/catalog/imports", json=document, headers=headers).json()
        assert new["content_hash"] == old["content_hash"]
        exported = client.get(f"/v1/catalog/versions/{new['id']}/export",
                              params={"format": "json"}).json()
        assert exported["offers"] == document["offers"]

    def test_one_bad_row_rejects_the_import_and_changes_nothing(
        self, client: TestClient, api_key: KeyMaker
    ) -> None:
        headers = api_key("catalog:write")
        before = current(client)
        offers = [acme(), acme(region="eu-2", price_per_hour="-1"),
                  acme(region="eu-3", accelerator="h900"), acme(region="eu-4")]
        response = client.post("/v1/catalog/imports", json={"offers": offers}, headers=headers,
                               params={"mode": "patch"})
        problem = assert_problem(response, 422)
        assert {(e["row"], e["field"]) for e in problem["errors"]} == {
            (2, "price_per_hour"), (3, "accelerator")}
        assert current(client) == before

    def test_patch_import_adds_an_offer_that_lists_and_exports(
        self, client: TestClient, api_key: KeyMaker
    ) -> None:
        before = current(client)
        response = client.post("/v1/catalog/imports", json={"offers": [acme()]},
                               headers=api_key("catalog:write"),
                               params={"mode": "patch", "note": "acme"})
        assert response.status_code == 201, response.text
        version = response.json()
        assert version["parent_id"] == before["id"]
        assert version["offer_count"] == before["offer_count"] + 1
        assert version["changes"]["added"] == 1
        items = client.get("/v1/offers", params={"provider": "acme"}).json()["items"]
        assert [(o["price_per_hour"], o["price_per_gpu_hour"]) for o in items] == [
            ("20.000000", "2.500000")]
        old = client.get("/v1/offers", params={"provider": "acme", "version": before["id"]})
        assert old.json()["items"] == []

    @pytest.mark.parametrize(("content", "content_type", "status"), [
        (b'{"offers": [{"price_per_hour": NaN}]}', "application/json", 422),
        (b'{"offers": ', "application/json", 422),
        (b"[" * 100_000 + b"]" * 100_000, "application/json", 422),
        (b'{"rows": []}', "application/json", 422),
        (b'{"offers": [], "id": "cv_000009"}', "application/json", 422),
        (b"provider\nacme", "text/plain", 415),
        (b"\xff\xfe", "text/csv", 400),
    ])
    def test_malformed_bodies_are_problems(
        self, client: TestClient, api_key: KeyMaker, content: bytes, content_type: str,
        status: int,
    ) -> None:
        before = current(client)
        response = client.post("/v1/catalog/imports", content=content,
                               headers={**api_key("catalog:write"), "Content-Type": content_type})
        assert_problem(response, status)
        assert current(client) == before

    def test_csv_with_an_unknown_column_names_it(
        self, client: TestClient, api_key: KeyMaker
    ) -> None:
        text = "provider,region,colour\nacme,eu-1,red\n"
        response = client.post("/v1/catalog/imports", content=text.encode(),
                               headers={**api_key("catalog:write"), "Content-Type": "text/csv"})
        problem = assert_problem(response, 422)
        assert ("colour", "extra_forbidden") in {(e["field"], e["code"]) for e in problem["errors"]}

    def test_imports_over_8_mib_are_413_before_parsing(
        self, client: TestClient, api_key: KeyMaker
    ) -> None:
        response = client.post("/v1/catalog/imports", content=b" " * (8 * 1024 * 1024 + 1),
                               headers={**api_key("catalog:write"),
                                        "Content-Type": "application/json"})
        assert_problem(response, 413)


class TestEdits:
    def _offer(self, client: TestClient) -> tuple[dict[str, Any], str]:
        item = client.get("/v1/offers", params={"provider": "lambda", "page_size": 1}).json()
        response = client.get(f"/v1/offers/{item['items'][0]['id']}")
        return response.json(), response.headers["etag"]

    @staticmethod
    def _update(offer: dict[str, Any], **changes: Any) -> dict[str, Any]:
        body = {"price_per_hour": offer["price_per_hour"], "source": offer["source"],
                "as_of": offer["as_of"], "indicative": offer["indicative"],
                "notes": offer["notes"]}
        body.update(changes)
        return body

    def test_put_with_the_etag_makes_a_new_version_and_keeps_the_old_one(
        self, client: TestClient, api_key: KeyMaker
    ) -> None:
        headers = api_key("catalog:write")
        before = current(client)
        offer, etag = self._offer(client)
        response = client.put(
            f"/v1/offers/{offer['id']}", headers={**headers, "If-Match": etag},
            json=self._update(offer, price_per_hour="1.000000", note="price cut"))
        assert response.status_code == 200, response.text
        edited = response.json()
        assert edited["price_per_hour"] == "1.000000"
        assert edited["catalog_version"] != before["id"]
        assert response.headers["etag"] != etag
        version = current(client)
        assert (version["id"], version["parent_id"], version["note"]) == (
            edited["catalog_version"], before["id"], "price cut")
        assert version["created_by"].startswith("test-")
        old = client.get(f"/v1/offers/{offer['id']}", params={"version": before["id"]}).json()
        assert old == offer

    def test_put_without_if_match_is_428_and_with_a_stale_one_412(
        self, client: TestClient, api_key: KeyMaker
    ) -> None:
        headers = api_key("catalog:write")
        offer, etag = self._offer(client)
        url = f"/v1/offers/{offer['id']}"
        assert_problem(client.put(url, headers=headers, json=self._update(offer)), 428)
        first = client.put(url, headers={**headers, "If-Match": etag},
                           json=self._update(offer, notes="first"))
        assert first.status_code == 200
        stale = client.put(url, headers={**headers, "If-Match": etag},
                           json=self._update(offer, notes="second"))
        assert_problem(stale, 412)
        weak = client.put(url, headers={**headers, "If-Match": "W/" + first.headers["etag"]},
                          json=self._update(offer, notes="third"))
        assert_problem(weak, 412)
        assert client.get(url).json()["notes"] == "first"

    @pytest.mark.parametrize(("changes", "field"), [
        ({"price_per_hour": "1e3"}, "price_per_hour"),
        ({"price_per_hour": 12.5}, "price_per_hour"),
        ({"indicative": "yes"}, "indicative"),
        ({"id": "off_x"}, "id"),
        ({"catalog_version": "cv_000001"}, "catalog_version"),
        ({"interruption_rate_per_hour": 0.1}, "interruption_rate_per_hour"),
    ])
    def test_bad_edits_name_the_field(
        self, client: TestClient, api_key: KeyMaker, changes: dict[str, Any], field: str
    ) -> None:
        offer, etag = self._offer(client)
        response = client.put(f"/v1/offers/{offer['id']}",
                              headers={**api_key("catalog:write"), "If-Match": etag},
                              json=self._update(offer, **changes))
        assert_problem(response, 422, field)

    def test_unknown_offer_is_404(self, client: TestClient, api_key: KeyMaker) -> None:
        assert_problem(client.get("/v1/offers/off_000000000000000000000000"), 404)


class TestAuth:
    def test_writes_need_a_key_with_the_scope(self, client: TestClient, api_key: KeyMaker) -> None:
        body = {"offers": [acme()]}
        missing = client.post("/v1/catalog/imports", json=body)
        assert_problem(missing, 401)
        assert missing.headers["www-authenticate"].startswith("Bearer")
        wrong = client.post("/v1/catalog/imports", json=body, headers=api_key("quotes:write"))
        assert_problem(wrong, 403)
        forged = client.post("/v1/catalog/imports", json=body,
                             headers={"Authorization": "Bearer cq_000000000000_" + "x" * 43})
        assert_problem(forged, 401)
        assert_problem(client.post("/v1/catalog/imports", json=body,
                                   headers={"Authorization": "Basic dXNlcjpwdw=="}), 401)
        ok = client.post("/v1/catalog/imports", json=body, headers=api_key("catalog:write"),
                         params={"mode": "patch"})
        assert ok.status_code == 201

    def test_a_revoked_key_is_refused(
        self, client: TestClient, api_key: KeyMaker, db_session: Session
    ) -> None:
        from service.catalog.keys import list_keys, revoke_key

        headers = api_key("catalog:write")
        revoke_key(db_session, list_keys(db_session)[-1].name)
        response = client.post("/v1/catalog/imports", json={"offers": [acme()]},
                               headers=headers, params={"mode": "patch"})
        assert_problem(response, 401)


@pytest.fixture
def read_auth_client(migrated_engine: Engine, db_session: Session) -> Iterator[TestClient]:
    settings = Settings(database_url=migrated_engine.url.render_as_string(hide_password=False),
                        require_read_auth=True)
    app = create_app(settings)
    app.dependency_overrides[get_session] = lambda: db_session
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client
    dispose(app)


def test_reads_need_catalog_read_when_the_setting_asks(
    read_auth_client: TestClient, api_key: KeyMaker
) -> None:
    assert_problem(read_auth_client.get("/v1/offers"), 401)
    assert_problem(read_auth_client.get("/v1/offers", headers=api_key("quotes:read")), 403)
    assert read_auth_client.get("/v1/offers", headers=api_key("catalog:read")).status_code == 200
    assert read_auth_client.get("/v1/offers", headers=api_key("catalog:write")).status_code == 200


def test_json_import_rows_may_use_plain_json_numbers_for_money(
    client: TestClient, api_key: KeyMaker
) -> None:
    raw = json.dumps({"offers": [acme()]}).replace('"20.00"', "20.10")
    response = client.post("/v1/catalog/imports", content=raw,
                           headers={**api_key("catalog:write"), "Content-Type": "application/json"},
                           params={"mode": "patch"})
    assert response.status_code == 201, response.text
    items = client.get("/v1/offers", params={"provider": "acme"}).json()["items"]
    assert items[0]["price_per_hour"] == "20.100000"


@pytest.mark.parametrize("content", [
    b'provider,region\n"acme,eu-1\n', b"provider,region\nac\rme,eu-1\n", b"\x00,\x00\n",
])
def test_broken_csv_is_a_422_not_a_500(
    client: TestClient, api_key: KeyMaker, content: bytes
) -> None:
    response = client.post("/v1/catalog/imports", content=content,
                           headers={**api_key("catalog:write"), "Content-Type": "text/csv"})
    assert_problem(response, 422)


def test_offer_pages_are_cached_per_version_and_an_edit_shows_at_once(
    client: TestClient, api_key: KeyMaker
) -> None:
    cache = client.app.state.offer_pages  # type: ignore[attr-defined]
    params = {"accelerator": "h100-sxm5-80gb", "term": "on_demand", "page_size": 3}
    first = client.get("/v1/offers", params=params)
    hits = cache.hits
    again = client.get("/v1/offers", params=params)
    assert again.content == first.content
    assert cache.hits == hits + 1  # served from the cache, byte for byte
    offer = first.json()["items"][0]
    etag = client.get(f"/v1/offers/{offer['id']}").headers["etag"]
    edit = client.put(f"/v1/offers/{offer['id']}", headers={
        **api_key("catalog:write"), "If-Match": etag}, json={
        "price_per_hour": "0.010000", "source": "test", "as_of": "2026-11-20",
        "indicative": False})
    assert edit.status_code == 200, edit.text
    after = client.get("/v1/offers", params=params).json()
    assert after["items"][0]["id"] == offer["id"]
    assert after["items"][0]["price_per_hour"] == "0.010000"  # the new version, not the cache
    assert after["items"][0]["catalog_version"] != offer["catalog_version"]
    old = client.get("/v1/offers", params={**params, "version": offer["catalog_version"]})
    assert old.content == first.content  # the old version still reads as it was
