"""Strong ETags that name a stored revision (``"r412"`` for an offer, ``"p3"`` for a policy)
and the If-Match rules every guarded write follows (RFC 9110 section 13.1.1)."""

from __future__ import annotations

from fastapi import HTTPException

from service.catalog.errors import PreconditionFailedError


def expected_revision(if_match: str | None, *, prefix: str, what: str, read_at: str) -> int:
    """The revision an If-Match names. 428 without the header, and for ``*``: RFC 9110 lets
    ``*`` match any current revision, so it would skip the lost-update check the header is
    required for (issue 36; the documents always said a PUT needs the ETag). 412 when it
    names no ETag of this kind. Weak tags never match."""
    if if_match is None:
        raise HTTPException(428, f"PUT needs If-Match with the ETag from GET {read_at}")
    tags = [t.strip() for t in if_match.split(",")]
    if "*" in tags:
        raise HTTPException(
            428, f"If-Match: * would overwrite whatever revision is current; send the ETag "
                 f"from GET {read_at} instead")
    start = f'"{prefix}'
    for tag in tags:
        if tag.startswith(start) and tag.endswith('"') and tag[len(start):-1].isdigit():
            return int(tag[len(start):-1])
    raise PreconditionFailedError(f"If-Match names no current ETag of this {what}")
