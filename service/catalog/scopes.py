"""API key scopes: a constant without imports, so that ``cq --help`` can name them without
loading the database layer (issue 16: the CLI's start-up time)."""

from __future__ import annotations

SCOPES = ("catalog:read", "catalog:write", "quotes:read", "quotes:write", "quotes:admin",
          "policies:read", "policies:write", "discounts:read", "discounts:write",
          "calibrations:read", "calibrations:write", "calibrations:admin")
