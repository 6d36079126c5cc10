"""Tables that stay legible at 80 columns (issue 18), as pure helpers of ``cq``'s renderers.

- :func:`table` draws no vertical rules (two spaces between columns), right-aligns numbers and
  never wraps or cuts them; text columns have a width cap and fold, so a long instance name
  wraps onto a second line instead of pushing an amount off the screen or into an ellipsis.
  Where the numbers and the text columns at their narrowest (``min_width``, by default
  :data:`TEXT_MIN_WIDTH`) still do not fit, the table changes layout instead of cutting
  (:class:`FitTable`, issue 41): its ``secondary`` columns move under each row's first text
  cell, then, if that is not enough, every row becomes a block of "header: value" lines.
- :func:`common_currency` puts one currency in a column header, so each cell is the bare amount.
- :func:`flag_letters` replaces lists of data-quality flags by letters, explained under the
  table.
- :func:`group_alike` folds plans with identical figures (permutations of one layout) into one
  row.
- :func:`shown_of` is the "10 of N" every truncated table states.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from service.api import presentation as fmt

T = TypeVar("T")
TEXT_MAX_WIDTH = 16
"""The widest a text column grows before it folds (an Azure instance type is 24 characters)."""


TEXT_MIN_WIDTH = 8
"""The narrowest a text column folds to before the table changes its layout (issue 41)."""


@dataclass(frozen=True, slots=True)
class Col:
    """A column: ``num`` ones are right-aligned and never wrapped or cut. A ``secondary`` one
    moves under the row's first text cell when the table would not fit otherwise."""

    header: str
    num: bool = False
    max_width: int | None = TEXT_MAX_WIDTH
    secondary: bool = False
    short: str | None = None
    """The header's name on a "header: value" line, where shorter than the header."""
    min_width: int = TEXT_MIN_WIDTH
    """A text column's floor: the table changes layout rather than fold it narrower."""


def num(header: str, *, secondary: bool = False) -> Col:
    return Col(header, num=True, max_width=None, secondary=secondary)


ROOMY_WIDTH = 120
"""From this console width up (piped output is 200), text columns are not capped: each row
stays on one line for grep and logs."""


def table(title: str | None, columns: Sequence[Col | str], *, width: int = 80,
          boxed: bool = False) -> FitTable:
    """A table for a console ``width`` columns wide; ``boxed``, with rich's default rules
    (the "Models tried" table of ``cq budget-plan``, parsed by its rules in tests)."""
    specs = [Col(column) if isinstance(column, str) else column for column in columns]
    result = FitTable(specs, title=title, roomy=width >= ROOMY_WIDTH, boxed=boxed)
    for col in specs:
        _add_column(result, col, roomy=width >= ROOMY_WIDTH)
    return result


def _add_column(target: Table, col: Col, *, roomy: bool) -> None:
    if col.num:
        target.add_column(col.header, justify="right", no_wrap=True)
    else:
        target.add_column(col.header, overflow="fold", max_width=None if roomy else col.max_width)


NUMBER_WORD = re.compile(r"[(]?[+\-−]?\d[\d,.]*(?:[–\-]\d[\d,.]*)?[)%]?[,;:]?")
"""A word that is a number ("1,234.5", "(37.9–50.7)", "+9.0%"): a text column is never folded
narrower than its widest such word, so a number inside text (a days band) is not split
either."""


def _widest_number(cells: Iterable[RenderableType]) -> int:
    words = (word for cell in cells for word in _text(cell).plain.split())
    return max((len(word) for word in words if NUMBER_WORD.fullmatch(word)), default=0)


def _text(cell: RenderableType) -> Text:
    return cell.copy() if isinstance(cell, Text) else Text(str(cell))


def _label(col: Col) -> str:
    """A column's name on a "header: value" line: its short name, else its header on one line
    ('commitment\nUSD' -> 'commitment USD')."""
    return col.short or " ".join(col.header.split())


class FitTable(Table):
    """A table whose number columns are never cut, whatever the width (issue 41).

    Rich fits a table by folding its wrapping columns and then, as a last resort, cutting every
    column evenly, amounts included ("1,234,5…"). Here the number columns always keep their
    full width and only the text columns give way, widest first, down to their ``min_width``
    (:data:`TEXT_MIN_WIDTH` unless a column says otherwise; their content, if narrower; never
    narrower than a number they hold, :data:`NUMBER_WORD`).
    Where even that is too wide, the table is drawn another way: first with its ``secondary``
    columns moved under each row's first text cell ("header: value" lines), then, if that
    still does not fit, as one block per row: the row's leading cells on one line, then one
    "header: value" line per other column, prose that wraps at spaces, so an amount moves to
    the next line whole."""

    def __init__(self, specs: Sequence[Col], *, title: str | None, roomy: bool,
                 boxed: bool = False) -> None:
        if boxed:
            super().__init__(title=title, title_justify="left")
        else:
            super().__init__(title=title, title_justify="left", box=box.SIMPLE_HEAD,
                             pad_edge=False, title_style="bold", show_edge=False)
        self.specs = list(specs)
        self.roomy = roomy
        self.boxed = boxed

    # The widths: numbers whole, text columns narrowed (never below their floor) to fit.
    def _floors(self, console: Console, options: ConsoleOptions) -> tuple[list[int], list[int]]:
        """Each column's natural width and the least it may take, padding included."""
        natural: list[int] = []
        least: list[int] = []
        for column, spec in zip(self.columns, self.specs, strict=True):
            measured = self._measure_column(console, options, column)
            natural.append(measured.maximum or 1)
            floor = max(spec.min_width, _widest_number(column.cells))
            least.append(measured.maximum if column.no_wrap else
                         min(measured.maximum, floor + self._get_padding_width(column._index)))
        return natural, least

    def _calculate_column_widths(self, console: Console, options: ConsoleOptions) -> list[int]:
        natural, least = self._floors(console, options)
        widths = list(natural)
        excess = sum(widths) - options.max_width
        while excess > 0:
            give = [i for i, w in enumerate(widths) if w > least[i]]
            if not give:
                break  # not reached: __rich_console__ draws another layout first
            widest = max(give, key=lambda i: widths[i])
            widths[widest] -= 1
            excess -= 1
        return [self._measure_column(console, options.update_width(w), column).maximum or w
                for w, column in zip(widths, self.columns, strict=True)]

    def fits(self, console: Console, options: ConsoleOptions) -> bool:
        """Whether every number column keeps its width (the text ones at their floor)."""
        available = (self.width or options.max_width) - self._extra_width
        _, least = self._floors(console, options.update_width(available))
        return sum(least) <= available

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not self.columns or self.fits(console, options):
            yield from super().__rich_console__(console, options)
            return
        if any(spec.secondary for spec in self.specs):
            folded = self._folded()
            if folded.fits(console, options):
                yield folded
                return
        yield self._stacked()

    # The other layouts.
    def _rows(self) -> list[list[RenderableType]]:
        cells = [list(column.cells) for column in self.columns]
        return [list(row) for row in zip(*cells, strict=True)] if cells else []

    def _host(self) -> int:
        """The column the others move under: the first text column that stays, else the
        first."""
        return next((i for i, spec in enumerate(self.specs)
                     if not spec.num and not spec.secondary), 0)

    def _folded(self) -> FitTable:
        """The same table without its secondary columns: each one's value is a "header:
        value" line under the row's first text cell."""
        host = self._host()
        keep = [i for i, spec in enumerate(self.specs) if not spec.secondary]
        folded = FitTable([self.specs[i] for i in keep], title=_text_title(self.title),
                          roomy=self.roomy, boxed=self.boxed)
        for i in keep:
            _add_column(folded, self.specs[i], roomy=self.roomy)
        for row in self._rows():
            cell = _text(row[host])
            for i, spec in enumerate(self.specs):
                value = _text(row[i])
                if spec.secondary and value.plain.strip() not in ("", "—"):
                    cell.append("\n").append(f"{_label(spec)}: ").append(value)
            folded.add_row(*[cell if i == host else row[i] for i in keep])
        folded.caption, folded.caption_justify = self.caption, self.caption_justify
        return folded

    def _stacked(self) -> Group:
        """One block per row: the cells up to the first text one on a line, then a "header:
        value" line for each other column (wrapping at spaces)."""
        host = self._host()
        parts: list[RenderableType] = []
        if self.title:
            parts.append(Text(_text_title(self.title) or "", style="bold"))
        for row in self._rows():
            lead = Text("  ").join(_text(row[i]) for i in range(host + 1)
                                   if _text(row[i]).plain.strip())
            parts.append(lead)
            for i, spec in enumerate(self.specs):
                value = _text(row[i])
                if i > host and value.plain.strip():
                    line = Text("  ")
                    line.append(f"{_label(spec)}: ").append(value)
                    parts.append(line)
        if self.caption:
            parts.append(_text(self.caption))
        return Group(*parts)


def _text_title(title: str | Text | None) -> str | None:
    return None if title is None else str(title.plain if isinstance(title, Text) else title)


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


group_alike = fmt.group_alike
"""The portal's and the CLI's one fold (``presentation.group_alike``)."""


def shown_of(shown: int, total: int, noun: str) -> str:
    """'10 of 1,234 offers', or '5 offers' when nothing was left out."""
    if shown >= total:
        return f"{total:,} {noun}"
    return f"{shown:,} of {total:,} {noun}"
