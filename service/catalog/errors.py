"""Catalogue errors; ``api/problems.py`` renders them.

    CatalogError (Exception)
    ├── NotFoundError   no row with that id
    ├── ConflictError   the write clashes with stored state
    ├── PreconditionFailedError   If-Match names a state that is no longer current
    └── AuthError       no usable API key (401) or a key without the scope (403)
"""

from __future__ import annotations


class CatalogError(Exception):
    """Root of the catalogue's errors."""


class NotFoundError(CatalogError):
    def __init__(self, kind: str, identifier: str) -> None:
        super().__init__(f"no {kind} with id {identifier!r}")
        self.kind = kind
        self.identifier = identifier


class ConflictError(CatalogError):
    """A write that conflicts with what is stored."""


class PreconditionFailedError(CatalogError):
    """The client edited from a stale copy (HTTP 412)."""


class AuthError(CatalogError):
    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status
