"""Shared schema pieces."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, GetCoreSchemaHandler
from pydantic_core import PydanticCustomError, core_schema

from service.catalog.text import MAX_TEXT_CHARS, text_problem

T = TypeVar("T")


def _stored_text(value: Any) -> Any:
    if isinstance(value, str):
        problem = text_problem(value, max_length=None)
        if problem is not None:
            raise PydanticCustomError(problem.code, problem.message)
    return value


@dataclass(frozen=True, slots=True)
class TextRule:
    """The one rule for stored text (``service/catalog/text.py``) on a ``str`` field, with the
    field's length limits: ``Annotated[str, TextRule(max_length=2000)]``. Give the lengths
    here, not in ``Field``: a length in ``Field`` would be checked after this validator, with
    pydantic's message for lists."""

    max_length: int = MAX_TEXT_CHARS
    min_length: int = 0

    def __get_pydantic_core_schema__(self, source: Any,
                                     handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(
            _stored_text, core_schema.str_schema(min_length=self.min_length or None,
                                                 max_length=self.max_length))


StoredText = Annotated[str, TextRule()]
"""Text the service keeps, at most ``MAX_TEXT_CHARS`` characters: no NUL or other control
character (tab, line feed and carriage return allowed), no lone surrogate. A violation is a
422 naming the field (code ``string_control_character`` or ``string_unicode``)."""
AcceleratorRef = Annotated[str, TextRule(max_length=64)]
"""An accelerator id as a request names it (checked against the catalogue later)."""
NoteText = Annotated[str, TextRule(max_length=1000)]
"""A note stored on a new catalogue or FX version (query parameter ``note``)."""


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
