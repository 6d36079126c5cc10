"""Opaque keyset cursors: base64url of the last item's sort key, signed.

A token is ``<base64url key>.<base64url HMAC-SHA256 of it, 16 bytes>``, keyed by a secret
derived from ``CQ_API_KEY_PEPPER`` (``use_secret``, called by ``create_app``), so every
replica of a deployment accepts the others' tokens and nothing else: a token this API did
not issue, or one altered, is a 400 before any query runs (issue 36: forged tokens were
read as keys). Tokens issued before signing are refused the same way; a client starts the
listing again from the first page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Annotated

from fastapi import HTTPException, Query

from service.settings import Settings

PageSize = Annotated[int, Query(ge=1, le=200, description="Items per page (at most 200).")]
PageToken = Annotated[
    str | None, Query(max_length=256, description="next_page_token from the previous page.")
]
MAC_BYTES = 16
_PURPOSE = b"computequote page tokens v1"


def _derive(secret: str) -> bytes:
    return hmac.new(secret.encode(), _PURPOSE, hashlib.sha256).digest()


_key = _derive(Settings.model_fields["api_key_pepper"].get_default().get_secret_value())


def use_secret(secret: str) -> None:
    """Sign and check tokens with a key derived from ``secret`` (the deployment's pepper).
    One process serves one deployment: the last app built sets it."""
    global _key
    _key = _derive(secret)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    padded = text + "=" * (-len(text) % 4)
    return base64.b64decode(padded.encode(), altchars=b"-_", validate=True)


def _mac(payload: str) -> str:
    return _b64(hmac.new(_key, payload.encode(), hashlib.sha256).digest()[:MAC_BYTES])


def encode_token(key: str) -> str:
    payload = _b64(key.encode())
    return f"{payload}.{_mac(payload)}"


def decode_token(token: str | None) -> str | None:
    if token is None:
        return None
    payload, _, mac = token.rpartition(".")
    try:
        if not payload or not hmac.compare_digest(mac.encode(), _mac(payload).encode()):
            raise ValueError
        return _unb64(payload).decode()
    except (binascii.Error, UnicodeDecodeError, UnicodeEncodeError, ValueError):
        raise HTTPException(400, "page_token is not a token this API issued: pass the "
                                 "next_page_token of the previous page unchanged") from None
