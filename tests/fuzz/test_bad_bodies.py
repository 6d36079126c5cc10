"""Malformed bodies, wrong media types, server-owned fields and SQL-injection strings, on every
operation that takes them: 4xx problems, never 5xx, and no stored row changes."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.catalog.models import ApiKey, CatalogVersion, OfferRevision, Quote

BODY_PATHS = ["/v1/estimates", "/v1/parallelism-plans", "/v1/quotes", "/v1/budget-plans",
              "/v1/catalog/imports"]
BAD_BODIES = [
    ("truncated", b'{"model": {"preset": "llama3.1-70b"}, "cluster": {', "application/json"),
    ("not json", b"model=llama", "application/json"),
    ("deep", b"[" * 100_000 + b"]" * 100_000, "application/json"),
    ("deep object", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "application/json"),
    ("empty", b"", "application/json"),
    ("wrong type", b'{"model": {"preset": "x"}}', "text/plain"),
    ("array", b"[]", "application/json"),
    ("null", b"null", "application/json"),
]
INJECTIONS = ["' OR '1'='1", "1; DROP TABLE quotes; --", "\" OR \"\"=\"", "%27%3B--",
              "cv_000001' UNION SELECT * FROM api_keys --", "../../etc/passwd", "%00"]


@pytest.fixture
def headers(api_key: Callable[..., dict[str, str]]) -> dict[str, str]:
    return {**api_key("quotes:write", "catalog:write"), "Idempotency-Key": uuid.uuid4().hex}


def counts(session: Session) -> tuple[int, ...]:
    return tuple(session.scalar(select(func.count()).select_from(model)) or 0
                 for model in (Quote, CatalogVersion, OfferRevision, ApiKey))


@pytest.mark.parametrize("path", BODY_PATHS)
@pytest.mark.parametrize(("label", "content", "media_type"), BAD_BODIES,
                         ids=[b[0] for b in BAD_BODIES])
def test_malformed_bodies_are_4xx_problems(
    client: TestClient, db_session: Session, headers: dict[str, str], path: str, label: str,
    content: bytes, media_type: str,
) -> None:
    before = counts(db_session)
    response = client.post(path, content=content,
                           headers={**headers, "Content-Type": media_type})
    assert 400 <= response.status_code < 500, (label, response.status_code)
    assert response.headers["content-type"] == "application/problem+json"
    assert counts(db_session) == before


@pytest.mark.parametrize(("path", "field"), [
    ("/v1/quotes", "id"), ("/v1/quotes", "created_at"), ("/v1/quotes", "verdict"),
    ("/v1/quotes", "catalog_content_hash"), ("/v1/estimates", "calibration_version"),
    ("/v1/parallelism-plans", "search"), ("/v1/budget-plans", "soonest_within_budget"),
])
def test_server_owned_fields_are_rejected(
    client: TestClient, headers: dict[str, str], path: str, field: str
) -> None:
    response = client.post(path, json={field: "mine"}, headers=headers)
    assert response.status_code == 422
    assert field in [e["field"] for e in response.json()["errors"]]


@pytest.mark.parametrize("text", INJECTIONS)
def test_injection_strings_in_paths_and_queries_are_harmless(
    client: TestClient, db_session: Session, headers: dict[str, str], text: str
) -> None:
    before = counts(db_session)
    calls: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", f"/v1/quotes/{text}", {}),
        ("POST", f"/v1/quotes/{text}/verify", {}),
        ("GET", f"/v1/offers/{text}", {}),
        ("GET", f"/v1/accelerators/{text}", {}),
        ("GET", f"/v1/catalog/versions/{text}", {}),
        ("GET", f"/v1/catalog/versions/{text}/export", {}),
        ("GET", "/v1/offers", {"provider": text}),
        ("GET", "/v1/offers", {"region": text, "accelerator": text}),
        ("GET", "/v1/offers", {"version": text}),
        ("GET", "/v1/quotes", {"principal": text}),
        ("GET", "/v1/quotes", {"verdict": text}),
        ("GET", "/v1/quotes", {"created_after": text}),
        ("GET", "/v1/accelerators", {"page_token": text}),
        ("GET", "/v1/catalog/versions", {"page_token": text}),
    ]
    for method, url, params in calls:
        response = client.request(method, url, params=params, headers=headers)
        assert response.status_code < 500, (method, url, params, response.text[:200])
        if response.status_code >= 400:
            assert response.headers["content-type"] == "application/problem+json"
        else:  # a filter that matches nothing, never a leak
            assert response.json().get("items", []) == []
    assert counts(db_session) == before
