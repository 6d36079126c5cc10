"""Shared schema pieces."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

T = TypeVar("T")


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
