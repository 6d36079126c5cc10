"""Object-level authorisation on stored quotes (issue 14, OWASP API1:2023): a quote is read,
listed, verified and requoted by the principal that made it, keys of its team, and
``quotes:admin`` keys; to every other key it does not exist (404, so ids cannot be probed),
and without a key it is 401 whatever CQ_REQUIRE_READ_AUTH says. A matrix of principals ×
operations, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests.factories import auth_headers

BODY: dict[str, Any] = {
    "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 1000,
                               "num_gpus": 8}},
    "providers": ["lambda"], "terms": ["on_demand"],
    "budget": {"amount": "100000.00", "currency": "USD"},
}

# Who, with which scopes and team.
KEYS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "owner": (("quotes:write",), "alpha"),
    "teammate": (("quotes:read",), "alpha"),
    "stranger": (("quotes:write",), "beta"),
    "loner": (("quotes:read",), None),
    "admin": (("quotes:admin",), None),
    "admin_writer": (("quotes:admin", "quotes:write"), None),
    "cataloguer": (("catalog:write",), "alpha"),
}

# What each gets for a read of the owner's quote (get, lines, verify).
READ = {"owner": 200, "teammate": 200, "stranger": 404, "loner": 404, "admin": 200,
        "admin_writer": 200, "cataloguer": 403, "anonymous": 401}
# Requote needs quotes:write and read access to the quote.
REQUOTE = {"owner": 201, "teammate": 403, "stranger": 404, "loner": 403, "admin": 403,
           "admin_writer": 201, "cataloguer": 403, "anonymous": 401}


@pytest.fixture
def keys(db_session: Session) -> dict[str, dict[str, str]]:
    return auth_headers(db_session, KEYS)


@pytest.fixture
def quote(client: TestClient, keys: dict[str, dict[str, str]]) -> dict[str, Any]:
    response = client.post("/v1/quotes", json=BODY,
                           headers={**keys["owner"], "Idempotency-Key": uuid.uuid4().hex})
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    return made


@pytest.mark.parametrize("who", sorted(READ))
def test_reads_are_scoped_to_the_owner_team_and_admins(
    client: TestClient, keys: dict[str, dict[str, str]], quote: dict[str, Any], who: str
) -> None:
    headers = keys[who]
    qid = quote["id"]
    answers = {
        "get": client.get(f"/v1/quotes/{qid}", headers=headers),
        "lines": client.get(f"/v1/quotes/{qid}/lines", headers=headers),
        "verify": client.post(f"/v1/quotes/{qid}/verify", headers=headers),
    }
    for operation, response in answers.items():
        assert response.status_code == READ[who], (who, operation, response.text[:200])
        if READ[who] == 200:
            continue
        assert response.headers["content-type"] == "application/problem+json"
        # A refused key learns nothing about the quote: no amounts, no principal.
        assert quote["principal"] not in response.text
        assert quote["recommended"]["total"] not in response.text
    if READ[who] == 200:
        assert answers["get"].json() == quote
        assert answers["verify"].json()["matches"] is True
    elif READ[who] == 404:
        unknown = client.get("/v1/quotes/q_" + "0" * 32, headers=headers)
        # Someone else's quote and no quote at all are the same answer.
        assert unknown.json()["detail"] == answers["get"].json()["detail"].replace(
            qid, "q_" + "0" * 32)


@pytest.mark.parametrize("who", sorted(READ))
def test_lists_hold_only_what_the_key_may_read(
    client: TestClient, keys: dict[str, dict[str, str]], quote: dict[str, Any], who: str
) -> None:
    theirs = client.post("/v1/quotes", json=BODY, headers={
        **keys["stranger"], "Idempotency-Key": uuid.uuid4().hex}).json()
    for params in ({"page_size": 200}, {"page_size": 200, "principal": quote["principal"]}):
        response = client.get("/v1/quotes", params=params, headers=keys[who])
        if READ[who] in (401, 403):
            assert response.status_code == READ[who]
            continue
        assert response.status_code == 200
        ids = {q["id"] for q in response.json()["items"]}
        assert (quote["id"] in ids) == (READ[who] == 200), (who, params)
        if "principal" not in params:
            # Only admins see the other team's quote; the stranger sees its own.
            assert (theirs["id"] in ids) == (who in ("admin", "admin_writer", "stranger"))


@pytest.mark.parametrize("who", sorted(REQUOTE))
def test_requote_needs_write_and_read_access_to_the_quote(
    client: TestClient, keys: dict[str, dict[str, str]], quote: dict[str, Any], who: str
) -> None:
    response = client.post(f"/v1/quotes/{quote['id']}/requote", headers={
        **keys[who], "Idempotency-Key": uuid.uuid4().hex})
    assert response.status_code == REQUOTE[who], (who, response.text[:200])
    if REQUOTE[who] == 201:
        fresh = response.json()
        assert fresh["requote_of"] == quote["id"]
        # The new quote is the requoter's: the owner of the old one reads it only if it is
        # theirs or their team's.
        mine = client.get(f"/v1/quotes/{fresh['id']}", headers=keys[who])
        assert mine.status_code == 200
        by_owner = client.get(f"/v1/quotes/{fresh['id']}", headers=keys["owner"])
        assert by_owner.status_code == (200 if who == "owner" else 404)


def test_open_reads_do_not_open_quotes(
    client: TestClient, keys: dict[str, dict[str, str]], quote: dict[str, Any]
) -> None:
    """CQ_REQUIRE_READ_AUTH is off in tests: catalogue reads are open, quotes are not."""
    assert client.get("/v1/offers", params={"page_size": 1}).status_code == 200
    assert client.get(f"/v1/quotes/{quote['id']}").status_code == 401
    assert client.get("/v1/quotes").status_code == 401


@pytest.mark.parametrize("who", ["owner", "teammate", "stranger", "admin", "anonymous"])
def test_the_audit_page_follows_the_api(
    client: TestClient, keys: dict[str, dict[str, str]], quote: dict[str, Any], who: str
) -> None:
    key = keys[who].get("Authorization", " ").split(" ")[1]
    page = client.post(f"/ui/quotes/{quote['id']}", data={"api_key": key})
    expected = {"anonymous": 401, "stranger": 404}.get(who, 200)
    assert page.status_code == expected, page.text[:300]
    assert page.headers["content-type"].startswith("text/html")
    if expected == 200:
        assert f"<dd>{quote['principal']}</dd>" in page.text
    else:
        assert 'id="open"' in page.text  # asks for a key, shows nothing of the quote
        assert quote["principal"] not in page.text
    verify = client.post(f"/ui/quotes/{quote['id']}/verify", data={"api_key": key})
    assert verify.status_code == expected
