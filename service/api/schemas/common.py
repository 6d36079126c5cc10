"""Shared schema pieces."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

T = TypeVar("T")


def _iso_date_text(value: Any) -> Any:
    if not isinstance(value, str | dt.date):
        raise ValueError("must be a date written YYYY-MM-DD")
    return value


IsoDate = Annotated[dt.date, BeforeValidator(_iso_date_text)]
"""A date in a request body: an ISO 8601 string only (lax mode would read 0 as 1970-01-01)."""


class RequestModel(BaseModel):
    """Base of every request body: unknown fields, NaN and infinities are rejected. Numeric and
    boolean fields are declared ``strict`` so numeric strings and booleans-as-numbers are too."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Page(BaseModel, Generic[T]):
    """A page of a list. Pass ``next_page_token`` back as ``page_token`` for the next page."""

    items: list[T]
    next_page_token: str | None = Field(
        description="Opaque cursor for the next page; null on the last page."
    )
