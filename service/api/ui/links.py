"""Short-lived signed links to a stored quote's page (issue 41): ``/ui/quotes/{id}?t=<token>``.

The portal page a quote is made on proves the key (it has just stored the quote with it), so
it links to the quote's page with a token that lets that page open for ``CQ_QUOTE_LINK_TTL_S``
seconds (default 900) without the key; after that, or with a token that was altered or made
for another quote, the page asks for the key as before (401).

A token reads ``<expires>.<signature>.<principal>``:

- ``expires``: Unix seconds after which it is refused;
- ``signature``: HMAC-SHA256, base64url without padding, over the quote id, ``expires`` and
  ``principal``, under a key derived from ``CQ_API_KEY_PEPPER`` (RFC 2104; a label of its own,
  so it never equals an API key's stored digest);
- ``principal``: the quote's owner (the name of the key that made it), whose read the link
  stands for. It is no secret: the page itself shows it.

It never holds the API key or anything derived from it alone. The page answers with
``Referrer-Policy: no-referrer`` and ``Cache-Control: no-store`` (every ``/ui`` page does),
and query strings are never logged, so the token stays in the link it was given in.

Signing needs the app's settings while a template draws the link, deep in a macro that sees
only the template globals: ``bind_signer``, a dependency of every ``/ui`` route, puts this
app's signer in a context variable for the request (as ``observability.current_request``
does for the request context), and the global ``stored_quote_href`` reads it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import time
from contextvars import ContextVar
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fastapi import Request

from service.api.ui.common import templates
from service.settings import Settings

__all__ = ["LINK_PARAM", "MAX_TOKEN_CHARS", "LinkRefusedError", "LinkSigner", "Refusal",
           "bind_signer", "stored_quote_href"]

LINK_PARAM = "t"
"""The query parameter that carries the token."""
MAX_TOKEN_CHARS = 512
"""Longer tokens are refused before any parsing or hashing (a real one is about 60)."""
_KEY_LABEL = b"computequote/ui/stored-quote-link/v1"
TOKEN = re.compile(r"^([0-9]{1,12})\.([A-Za-z0-9_-]{43})\.([A-Za-z0-9][A-Za-z0-9._-]{0,127})$")
"""Expiry (Unix s), signature (32 bytes, base64url) and principal (an API key's name)."""


class Refusal(StrEnum):
    """Why a token does not open a page."""

    EXPIRED = "expired"
    INVALID = "invalid"
    """Malformed, altered, made for another quote or under another secret."""


class LinkRefusedError(ValueError):
    """A token that does not open the page it was sent to, and why."""

    def __init__(self, reason: Refusal) -> None:
        super().__init__(reason.value)
        self.reason = reason


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSigner:
    """Makes and checks tokens with one app's key and lifetime. Time comes in as ``now_s``
    (Unix seconds), so tests set the clock."""

    key: bytes
    ttl_s: int

    @classmethod
    def from_settings(cls, settings: Settings) -> LinkSigner:
        pepper = settings.api_key_pepper.get_secret_value().encode()
        return cls(key=hmac.new(pepper, _KEY_LABEL, hashlib.sha256).digest(),
                   ttl_s=settings.quote_link_ttl_s)

    def _signature(self, quote_id: str, expires_s: int, principal: str) -> str:
        message = f"{quote_id}\n{expires_s}\n{principal}".encode()
        return _b64(hmac.new(self.key, message, hashlib.sha256).digest())

    def token(self, quote_id: str, principal: str, now_s: int) -> str:
        """A token that opens ``quote_id``'s page as ``principal`` until ``now_s + ttl_s``."""
        expires_s = now_s + self.ttl_s
        return f"{expires_s}.{self._signature(quote_id, expires_s, principal)}.{principal}"

    def principal(self, token: str, quote_id: str, now_s: int) -> str:
        """The principal whose read ``token`` stands for on ``quote_id``'s page, or
        ``LinkRefusedError``. The length is bounded first; the signature is compared in constant
        time before the expiry is looked at, so an altered expiry is "invalid", not
        "expired"."""
        if len(token) > MAX_TOKEN_CHARS:
            raise LinkRefusedError(Refusal.INVALID)
        match = TOKEN.match(token)
        if match is None:
            raise LinkRefusedError(Refusal.INVALID)
        expires_text, signature, principal = match.groups()
        expires_s = int(expires_text)
        if not hmac.compare_digest(signature,
                                   self._signature(quote_id, expires_s, principal)):
            raise LinkRefusedError(Refusal.INVALID)
        if expires_s <= now_s:
            raise LinkRefusedError(Refusal.EXPIRED)
        if expires_s > now_s + self.ttl_s:
            # Signed for longer than links now last (CQ_QUOTE_LINK_TTL_S was lowered).
            raise LinkRefusedError(Refusal.EXPIRED)
        return principal


_signer: ContextVar[LinkSigner | None] = ContextVar("computequote_quote_link_signer",
                                                    default=None)


async def bind_signer(request: Request) -> None:
    """A dependency of every ``/ui`` route: this app's signer, for the pages' templates."""
    _signer.set(LinkSigner.from_settings(request.app.state.settings))


def stored_quote_href(quote: dict[str, Any]) -> str:
    """The link to a quote the page has just made (a template global): signed for its
    principal while a signer is bound, else the plain page, which asks for the key."""
    href = f"/ui/quotes/{quote['id']}"
    signer = _signer.get()
    principal = quote.get("principal")
    if signer is None or not isinstance(principal, str):
        return href
    return f"{href}?{LINK_PARAM}={signer.token(quote['id'], principal, int(time.time()))}"


templates.globals["stored_quote_href"] = stored_quote_href
