"""Security headers (issue 14): nosniff everywhere, the portal's pages framed by nothing, sent
to no referrer, cached nowhere; no server banner from the real server."""

from __future__ import annotations

import httpx
from fastapi.testclient import TestClient

from tests.live_server import server_process


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


def test_the_real_server_sends_no_banner(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/banner.sqlite3"
    from service.catalog.migrate import migrate_and_seed

    migrate_and_seed(url)
    with server_process({"CQ_DATABASE_URL": url, "CQ_SEARCH_WORKERS": "0"}) as server:
        response = httpx.get(server.url + "/livez", timeout=10)
    assert response.status_code == 200
    assert "server" not in response.headers
