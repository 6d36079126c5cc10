"""Tables that stay legible at 80 columns (issue 18), as pure helpers of ``cq``'s renderers.

- :func:`table` draws no vertical rules (two spaces between columns), right-aligns numbers and
  never wraps or cuts them; text columns have a width cap and fold, so a long instance name
  wraps onto a second line instead of pushing an amount off the screen or into an ellipsis.
- :func:`common_currency` puts one currency in a column header, so each cell is the bare amount.
- :func:`flag_letters` replaces lists of data-quality flags by letters, explained under the
  table.
- :func:`group_alike` folds plans with identical figures (permutations of one layout) into one
  row.
- :func:`shown_of` is the "10 of N" every truncated table states.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from rich import box
from rich.table import Table

from service.api import presentation as fmt

T = TypeVar("T")
TEXT_MAX_WIDTH = 16
"""The widest a text column grows before it folds (an Azure instance type is 24 characters)."""


@dataclass(frozen=True, slots=True)
class Col:
    """A column: ``num`` ones are right-aligned and never wrapped."""

    header: str
    num: bool = False
    max_width: int | None = TEXT_MAX_WIDTH


def num(header: str) -> Col:
    return Col(header, num=True, max_width=None)


ROOMY_WIDTH = 120
"""From this console width up (piped output is 200), text columns are not capped: each row
stays on one line for grep and logs."""


def table(title: str | None, columns: Sequence[Col | str], *, width: int = 80) -> Table:
    """A table for a console ``width`` columns wide."""
    roomy = width >= ROOMY_WIDTH
    result = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                   title_style="bold", show_edge=False)
    for column in columns:
        col = Col(column) if isinstance(column, str) else column
        if col.num:
            result.add_column(col.header, justify="right", no_wrap=True)
        else:
            result.add_column(col.header, overflow="fold",
                              max_width=None if roomy else col.max_width)
    return result


def common_currency(rows: Iterable[dict[str, Any]], key: str = "currency") -> str | None:
    """The one currency of every row, or None when they differ (or there are none)."""
    found = {row.get(key) for row in rows}
    return found.pop() if len(found) == 1 else None


def amount(value: str | None, currency: str, header_currency: str | None) -> str:
    """Money in its minor units; without the currency when the header names it."""
    text = fmt.money(value, currency)
    if header_currency is not None and currency == header_currency:
        return text.removesuffix(f" {currency}")
    return text


def money_header(label: str, header_currency: str | None) -> str:
    """'commitment' over 'USD', two header lines, so the header is no wider than an amount."""
    return f"{label}\n{header_currency}" if header_currency else label


def gpus(count: float) -> str:
    """A GPU count as an integer (8, not 8.0); a fractional share (AWS g6f: 0.25) as is."""
    return f"{int(count):,}" if float(count).is_integer() else f"{count:g}"


class FlagLetters:
    """Flags as letters (a, b, ...) in their first-seen order, with a legend."""

    def __init__(self) -> None:
        self.letters: dict[str, str] = {}

    def cell(self, flags: Iterable[Any], *, unique: bool = False) -> str:
        codes = [str(f.get("code") or f.get("flag")) if isinstance(f, dict) else str(f)
                 for f in flags]
        if unique:
            codes = list(dict.fromkeys(codes))
        for code in codes:
            if code not in self.letters:
                alphabet = string.ascii_lowercase
                index = len(self.letters)
                self.letters[code] = (alphabet[index] if index < len(alphabet)
                                      else f"z{index - len(alphabet) + 1}")
        return " ".join(self.letters[c] for c in codes)

    def legend(self) -> str:
        if not self.letters:
            return ""
        return "flags: " + "; ".join(f"{letter} {code}"
                                     for code, letter in self.letters.items())


def flag_letters() -> FlagLetters:
    return FlagLetters()


def group_alike(items: Sequence[T], key: Callable[[T], Hashable]) -> list[tuple[T, int]]:
    """Each first item of a run of items with the same key, and how many more it stands for
    (in first-seen order: a ranked list stays ranked)."""
    groups: dict[Hashable, list[Any]] = {}
    for item in items:
        groups.setdefault(key(item), [item, 0])[1] += 1
    return [(first, count - 1) for first, count in groups.values()]


def shown_of(shown: int, total: int, noun: str) -> str:
    """'10 of 1,234 offers', or '5 offers' when nothing was left out."""
    if shown >= total:
        return f"{total:,} {noun}"
    return f"{shown:,} of {total:,} {noun}"
