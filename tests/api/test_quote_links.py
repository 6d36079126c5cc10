"""Signed links to a stored quote's page (issue 41, item 7): the portal page a quote is made on
links to ``/ui/quotes/{id}?t=<token>``, which opens the quote without the key for
``CQ_QUOTE_LINK_TTL_S``; an expired, altered, other-quote or oversized token, or one whose key
was revoked, is the 401 page that asks for the key, never a 500. On SQLite and PostgreSQL."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.api.ui import links
from service.api.ui.links import MAX_TOKEN_CHARS, LinkRefusedError, LinkSigner, Refusal
from service.catalog.keys import revoke_key
from service.settings import Settings
from tests.factories import auth_headers

QUOTE_A = "q_" + "a" * 32
QUOTE_B = "q_" + "b" * 32
NOW_S = 1_796_000_000
BODY: dict[str, Any] = {
    "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 1000,
                               "num_gpus": 8}},
    "providers": ["lambda"], "terms": ["on_demand"],
    "budget": {"amount": "100000.00", "currency": "USD"},
}
FORM = {"model": "llama3.1-70b", "tokens": "2e12", "seq_len": "8192", "global_batch": "512",
        "accelerator": "h100-sxm5-80gb", "gpus": "256", "tp": "8", "pp": "4", "cp": "1",
        "micro_batch": "1", "zero_stage": "1", "recompute": "none", "currency": "USD"}


def signer(**overrides: Any) -> LinkSigner:
    """The signer of an app with the test settings (the default pepper), or ``overrides``."""
    return LinkSigner.from_settings(Settings(**overrides))


def refusal(token: str, quote_id: str = QUOTE_A, now_s: int = NOW_S,
            by: LinkSigner | None = None) -> Refusal:
    with pytest.raises(LinkRefusedError) as refused:
        (by or signer()).principal(token, quote_id, now_s)
    return refused.value.reason


class TestLinkToken:
    def test_a_fresh_token_names_its_principal_until_it_expires(self) -> None:
        token = signer().token(QUOTE_A, "portal", NOW_S)
        assert signer().principal(token, QUOTE_A, NOW_S) == "portal"
        assert signer().principal(token, QUOTE_A, NOW_S + 899) == "portal"
        assert refusal(token, now_s=NOW_S + 900) is Refusal.EXPIRED

    def test_the_lifetime_is_the_setting(self) -> None:
        token = signer(quote_link_ttl_s=60).token(QUOTE_A, "portal", NOW_S)
        assert token.startswith(f"{NOW_S + 60}.")
        assert refusal(token, now_s=NOW_S + 60, by=signer(quote_link_ttl_s=60)) \
            is Refusal.EXPIRED

    def test_a_token_signed_for_longer_than_links_now_last_is_refused(self) -> None:
        token = signer(quote_link_ttl_s=3600).token(QUOTE_A, "portal", NOW_S)
        assert refusal(token, by=signer(quote_link_ttl_s=900)) is Refusal.EXPIRED

    def test_an_altered_expiry_or_principal_is_invalid(self) -> None:
        expires, signature, principal = signer().token(QUOTE_A, "portal", NOW_S).split(".", 2)
        assert refusal(f"{int(expires) + 1}.{signature}.{principal}") is Refusal.INVALID
        assert refusal(f"{expires}.{signature}.admin") is Refusal.INVALID
        flipped = ("A" if signature[0] != "A" else "B") + signature[1:]
        assert refusal(f"{expires}.{flipped}.{principal}") is Refusal.INVALID

    def test_a_token_for_another_quote_or_secret_is_invalid(self) -> None:
        token = signer().token(QUOTE_A, "portal", NOW_S)
        assert refusal(token, quote_id=QUOTE_B) is Refusal.INVALID
        other = signer(api_key_pepper="another-server-secret")
        assert refusal(token, by=other) is Refusal.INVALID

    @pytest.mark.parametrize("token", ["", "1", "1.2.3", "é" * 10, "1796000900.\x00.portal",
                                       "x" * (MAX_TOKEN_CHARS + 1)])
    def test_a_malformed_token_is_invalid_not_an_error(self, token: str) -> None:
        assert refusal(token) is Refusal.INVALID

    def test_an_oversized_token_is_refused_before_it_is_parsed_or_hashed(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = signer().token(QUOTE_A, "portal", NOW_S)

        def hashed(*_: Any) -> str:
            raise AssertionError("an oversized token was hashed")

        monkeypatch.setattr(LinkSigner, "_signature", hashed)
        assert refusal(real + "." + "a" * MAX_TOKEN_CHARS) is Refusal.INVALID

    def test_the_key_is_derived_so_it_is_not_the_pepper(self) -> None:
        pepper = Settings().api_key_pepper.get_secret_value().encode()
        assert signer().key != pepper
        assert len(signer().key) == 32


@pytest.fixture
def keys(db_session: Session) -> dict[str, dict[str, str]]:
    return auth_headers(db_session, {"owner": (("quotes:write",), "alpha"),
                                     "other": (("quotes:write",), None)})


def _quote(client: TestClient, headers: dict[str, str]) -> dict[str, Any]:
    response = client.post("/v1/quotes", json=BODY,
                           headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
    assert response.status_code == 201, response.text
    made: dict[str, Any] = response.json()
    return made


@pytest.fixture
def quote(client: TestClient, keys: dict[str, dict[str, str]]) -> dict[str, Any]:
    return _quote(client, keys["owner"])


def _link(quote: dict[str, Any], now_s: int | None = None, principal: str | None = None,
          quote_id: str | None = None) -> str:
    token = signer().token(quote_id or quote["id"], principal or quote["principal"],
                           int(time.time()) if now_s is None else now_s)
    return f"/ui/quotes/{quote['id']}?t={token}"


def _asks_for_the_key(response: Any, message: str) -> None:
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("text/html")
    assert "<h1>Sign-in needed</h1>" in response.text
    assert message in response.text
    assert 'id="open"' in response.text  # the key form
    assert 'id="commitment-figures"' not in response.text


class TestStoredQuoteLink:
    def test_a_valid_link_opens_the_quote_without_the_key(
            self, client: TestClient, quote: dict[str, Any]) -> None:
        response = client.get(_link(quote))
        assert response.status_code == 200, response.text[:1000]
        assert f"Quote <code>{quote['id']}</code>" in response.text
        assert f"Verdict: <strong>{quote['verdict']}</strong>" in response.text
        assert 'id="commitment-figures"' in response.text
        assert response.headers["referrer-policy"] == "no-referrer"
        assert response.headers["cache-control"] == "no-store"

    def test_without_a_link_the_page_still_asks_for_the_key(
            self, client: TestClient, quote: dict[str, Any]) -> None:
        _asks_for_the_key(client.get(f"/ui/quotes/{quote['id']}"), "Give a key with")

    def test_an_expired_link_asks_for_the_key(
            self, client: TestClient, quote: dict[str, Any]) -> None:
        long_ago = int(time.time()) - Settings().quote_link_ttl_s - 60
        _asks_for_the_key(client.get(_link(quote, now_s=long_ago)), "This link expired")

    def test_an_altered_link_asks_for_the_key(
            self, client: TestClient, quote: dict[str, Any]) -> None:
        link = _link(quote)
        expires = re.search(r"\?t=([0-9]+)\.", link)
        assert expires is not None
        later = link.replace(f"t={expires.group(1)}.", f"t={int(expires.group(1)) + 600}.")
        _asks_for_the_key(client.get(later), "This link is not valid for this quote")

    def test_a_link_to_another_quote_does_not_open_this_one(
            self, client: TestClient, keys: dict[str, dict[str, str]],
            quote: dict[str, Any]) -> None:
        second = _quote(client, keys["owner"])
        token = _link(second).split("?t=", 1)[1]
        _asks_for_the_key(client.get(f"/ui/quotes/{quote['id']}?t={token}"),
                          "This link is not valid for this quote")

    @pytest.mark.parametrize("token", ["x" * (MAX_TOKEN_CHARS + 1), "x" * 20_000, "%00",
                                       "%C3%A9", "1.2.3"])
    def test_a_malformed_or_oversized_link_is_a_401_not_a_500(
            self, client: TestClient, quote: dict[str, Any], token: str) -> None:
        _asks_for_the_key(client.get(f"/ui/quotes/{quote['id']}?t={token}"),
                          "This link is not valid for this quote")

    def test_a_link_signed_for_another_principal_does_not_open_the_quote(
            self, client: TestClient, keys: dict[str, dict[str, str]],
            quote: dict[str, Any]) -> None:
        """Even a token signed with the server's secret reads only its principal's quote."""
        other = _quote(client, keys["other"])["principal"]
        _asks_for_the_key(client.get(_link(quote, principal=other)),
                          "can no longer read this quote")

    def test_a_revoked_keys_link_stops_at_once(
            self, client: TestClient, db_session: Session, quote: dict[str, Any]) -> None:
        link = _link(quote)
        assert client.get(link).status_code == 200
        revoke_key(db_session, quote["principal"])
        _asks_for_the_key(client.get(link), "can no longer read this quote")

    def test_the_verify_form_still_needs_the_key(
            self, client: TestClient, quote: dict[str, Any]) -> None:
        token = _link(quote).split("?t=", 1)[1]
        response = client.post(f"/ui/quotes/{quote['id']}/verify?t={token}", data={})
        assert response.status_code == 401
        assert 'id="verification"' not in response.text

    def test_the_portal_links_its_new_quote_signed_and_without_the_key(
            self, client: TestClient, keys: dict[str, dict[str, str]]) -> None:
        key = keys["owner"]["Authorization"].split()[1]
        made = client.post("/ui", data={**FORM, "api_key": key, "budget": "1000.00",
                                        "providers": "aws, onprem", "action": "quote"})
        assert made.status_code == 200, made.text[:1000]
        href = re.search(r'href="(/ui/quotes/q_[0-9a-f]{32}\?t=[^"]+)">its audit page', made.text)
        assert href is not None, "the page links to no signed stored quote"
        link = href.group(1)
        assert key not in link
        assert key.split("_", 2)[2] not in link  # not even the key's secret part
        opened = client.get(link)
        assert opened.status_code == 200, opened.text[:1000]
        assert 'id="verdict"' in opened.text


def test_a_page_drawn_outside_a_request_links_the_plain_page() -> None:
    """No signer bound (a template rendered by a script or test): the plain link."""
    assert links.stored_quote_href({"id": QUOTE_A, "principal": "portal"}) == \
        f"/ui/quotes/{QUOTE_A}"
