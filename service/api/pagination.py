"""Opaque keyset cursors: base64url of the last item's sort key."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated

from fastapi import HTTPException, Query

PageSize = Annotated[int, Query(ge=1, le=200, description="Items per page (at most 200).")]
PageToken = Annotated[
    str | None, Query(max_length=256, description="next_page_token from the previous page.")
]


def encode_token(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def decode_token(token: str | None) -> str | None:
    if token is None:
        return None
    try:
        padded = token + "=" * (-len(token) % 4)
        return base64.b64decode(padded.encode(), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise HTTPException(400, "page_token is not a token this API issued") from None
