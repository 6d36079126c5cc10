"""Security headers (issue 14): nosniff everywhere, the portal's pages framed by nothing, sent
to no referrer, cached nowhere (the missing server banner is checked on a real server in
tests/faults/test_slow_bodies.py)."""

from __future__ import annotations

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
