"""Catalogue errors; ``api/problems.py`` renders them.

    CatalogError (Exception)
    ├── NotFoundError   no row with that id
    ├── ConflictError   the write clashes with stored state
    ├── PreconditionFailedError   If-Match names a state that is no longer current
    ├── CommitFailedError   the database refused or lost the commit (HTTP 503)
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


class CommitFailedError(CatalogError):
    """The request's work was done but its commit failed: nothing is acknowledged (503)."""

    def __init__(self, cause: str) -> None:
        super().__init__(f"the write could not be committed ({cause}); it may not be stored: "
                         "retry the same request")


class AuthError(CatalogError):
    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status
