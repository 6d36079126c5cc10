"""Security headers (issue 14): nosniff everywhere, the portal's pages framed by nothing, sent
to no referrer, cached nowhere (the missing server banner is checked on a real server in
tests/faults/test_slow_bodies.py)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from fastapi.testclient import TestClient


def test_api_answers_are_nosniff(client: TestClient) -> None:
    for path in ("/v1/models", "/livez", "/v1/quotes/q_nope"):
        response = client.get(path)
        assert response.headers["x-content-type-options"] == "nosniff", path
        assert "content-security-policy" not in response.headers


def test_portal_pages_carry_the_page_headers(client: TestClient) -> None:
    for path in ("/ui", f"/ui/quotes/q_{'0' * 32}"):
        response = client.get(path)
        assert response.headers["content-security-policy"] == (
            "default-src 'self'; frame-ancestors 'none'; form-action 'self'"), path
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["cache-control"] == "no-store"
        assert response.headers["x-content-type-options"] == "nosniff"


def test_a_405_lists_the_methods_of_the_path(client: TestClient) -> None:
    """Issue 14: every 405 carried an empty Allow (routes inside included routers)."""
    for method, path, allowed in (("DELETE", "/v1/quotes", "GET, POST"),
                                  ("PATCH", "/v1/offers/off_x", "GET, PUT"),
                                  ("GET", "/v1/estimates", "POST"),
                                  ("DELETE", "/v1/policies/finance", "GET, PUT")):
        response = client.request(method, path)
        assert response.status_code == 405
        assert response.headers["allow"] == allowed, path
        assert response.headers["content-type"] == "application/problem+json"


def test_a_500_says_connection_close(tmp_path: object) -> None:
    """Issue 14: a 500 closed the keep-alive connection without saying so."""
    from service.main import create_app, dispose
    from service.settings import Settings

    app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/x.sqlite3"))

    def boom() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/boom", boom)
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/boom")
    dispose(app)
    assert response.status_code == 500
    assert response.headers["connection"] == "close"
    assert response.headers["content-type"] == "application/problem+json"
    assert "a bug" not in response.text


def test_a_json_body_with_a_duplicate_key_is_422_not_last_one_wins(
    client: TestClient,
) -> None:
    """Issue 14: {"budget": ..., "budget": ...} was accepted with the last value."""
    body = (b'{"model": {"preset": "llama3.1-8b"}, "training": {"seq_len": 8192, '
            b'"seq_len": 4096, "global_batch_seqs": 64, "tokens": 1e9}, '
            b'"cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 8}}')
    response = client.post("/v1/estimates", content=body,
                           headers={"content-type": "application/json"})
    assert response.status_code == 422
    problem = response.json()
    assert problem["errors"] == [{"field": "body", "message": "a key appears twice in one "
                                  "object", "code": "duplicate_key"}]
    assert "seq_len" not in problem["detail"]  # input is never echoed
    fine = client.post("/v1/estimates", content=body.replace(b'"seq_len": 4096, ', b""),
                       headers={"content-type": "application/json"})
    assert fine.status_code == 200


class TestHostileInputs:
    """Issue 36 (low): ``If-Match: *`` skipped the lost-update check, forged page tokens were
    read as keys, and a problem's ``instance`` echoed paths of up to 5,000 characters."""

    def test_if_match_star_is_refused_428_and_changes_nothing(
        self, client: TestClient, api_key: Any
    ) -> None:
        key = api_key("policies:write", "discounts:write", "catalog:write")
        book = [{"provider": "aws", "accelerator": "h100-sxm5-80gb", "percent_off": "18",
                 "valid_from": "2026-01-01", "valid_until": "2026-12-31"}]
        for path, content in (("/v1/policies", {"rules": {"max_job_cost": "1000000"}}),
                              ("/v1/discount-books", {"entries": book})):
            made = client.post(path, json={"name": "starred", "description": "v1", **content},
                               headers=key)
            assert made.status_code == 201, made.text[:300]
            refused = client.put(f"{path}/starred", json={"description": "v2", **content},
                                 headers={**key, "If-Match": "*"})
            assert refused.status_code == 428, (path, refused.text[:300])
            assert refused.headers["content-type"] == "application/problem+json"
            assert "If-Match: *" in refused.json()["detail"]
            assert client.get(f"{path}/starred").json()["revision"] == 1
        listed = client.get("/v1/offers", params={"provider": "lambda", "page_size": 1})
        offer = client.get(f"/v1/offers/{listed.json()['items'][0]['id']}").json()
        edit = {name: offer[name] for name in ("price_per_hour", "source", "as_of",
                                               "indicative", "notes")}
        refused = client.put(f"/v1/offers/{offer['id']}", json=edit,
                             headers={**key, "If-Match": '"r1", *'})
        assert refused.status_code == 428, refused.text[:300]

    @pytest.mark.parametrize("path", ["/v1/accelerators", "/v1/offers", "/v1/policies",
                                      "/v1/catalog/versions", "/v1/quotes"])
    def test_a_forged_page_token_is_400_and_an_issued_one_pages(
        self, client: TestClient, api_key: Any, path: str
    ) -> None:
        key = api_key("quotes:read")
        forged = [base64.urlsafe_b64encode(raw).decode().rstrip("=") for raw in (
            b"zzzz", b"999999999:off_x", b"2026-01-01T00:00:00|q_x", b"0")]
        issued = client.get(path, params={"page_size": 1}, headers=key).json()
        token = issued["next_page_token"]
        if token is not None:
            payload, _, mac = token.partition(".")
            forged += [payload, f"{payload}.{'A' * len(mac)}", f"{forged[0]}.{mac}"]
            follows = client.get(path, params={"page_size": 1, "page_token": token},
                                 headers=key)
            assert follows.status_code == 200, follows.text[:300]
        for bad in forged:
            answer = client.get(path, params={"page_token": bad}, headers=key)
            assert answer.status_code == 400, (bad, answer.text[:300])
            assert answer.headers["content-type"] == "application/problem+json"
            assert "page_token" in answer.json()["detail"]

    def test_a_problem_instance_is_at_most_256_characters(self, client: TestClient) -> None:
        long_path = "/v1/" + "a" * 5000
        for answer in (client.get(long_path), client.post(long_path, json={})):
            assert answer.status_code in (404, 405)
            problem = answer.json()
            assert problem["instance"] == long_path[:256]
            assert "a" * 300 not in answer.text
