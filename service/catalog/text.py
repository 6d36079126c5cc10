"""The one rule for text the service stores (issue 36).

Every string a client sends that the service keeps (a description, a name, a vendor, a
source, a note, an import's free-text column) must be:

- free of NUL and of the other C0 control characters and DEL (U+0000-U+001F, U+007F), except
  tab, line feed and carriage return: PostgreSQL refuses NUL in ``text`` (the write failed
  with a 500) and SQLite stored it silently, so the two backends disagreed;
- valid Unicode: no lone surrogate (U+D800-U+DFFF), which has no UTF-8 form, so hashing or
  storing it failed (``commit_version`` hashed ``source`` with ``str.encode``);
- at most ``MAX_TEXT_CHARS`` characters, or the field's own smaller cap.

The API's request models apply it through ``StoredText`` (``service/api/schemas/common.py``);
imports and refreshes, whose rows are not pydantic models, through ``row_text_errors``
(``service/catalog/prices.py``, ``service/catalog/importers.py``). Both answer 422 naming
the field (and the row) and the limit; nothing is stored.
"""

from __future__ import annotations

import re
from typing import NamedTuple

MAX_TEXT_CHARS = 4000
"""The longest text field of the service (an accelerator's or an offer's ``notes``)."""

_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff]")


class TextProblem(NamedTuple):
    code: str
    """A stable code: ``string_control_character``, ``string_unicode``, ``string_too_long``."""
    message: str


def text_problem(value: str, *, max_length: int | None = MAX_TEXT_CHARS) -> TextProblem | None:
    """What is wrong with ``value`` as stored text, or None. The message names the limit and
    the position, never the text."""
    if max_length is not None and len(value) > max_length:
        return TextProblem("string_too_long", f"must be at most {max_length} characters")
    found = _FORBIDDEN.search(value)
    if found is None:
        return None
    position = found.start() + 1
    if 0xD800 <= ord(found.group()) <= 0xDFFF:
        return TextProblem("string_unicode", (
            f"must be valid Unicode text: character {position} is a lone surrogate "
            "(U+D800-U+DFFF), which has no UTF-8 form"))
    return TextProblem("string_control_character", (
        f"must not contain NUL or another control character (character {position}; "
        "U+0000-U+001F and U+007F are refused, except tab, line feed and carriage return)"))
