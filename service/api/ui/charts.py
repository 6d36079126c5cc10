"""A small SVG writer for the portal's charts, rendered on the server (no script, no CDN).

Each chart is drawn twice, for a wide and a narrow column (``responsive``): the stylesheet
shows one, so on a phone the legend stacks in one column and its text stays at least
``MIN_LEGEND_PX`` CSS pixels tall instead of shrinking with a 720-unit drawing.

Every chart has a title, axes with units, labelled ticks, a legend, and an accessible name and
description (``role="img"``, ``<title>``, ``<desc>`` listing the values), in the Okabe-Ito
colour-blind-safe palette (Okabe & Ito 2008, "Color Universal Design").
"""

from __future__ import annotations

import decimal
import itertools
import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from html import escape
from typing import Protocol, TypeVar

PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442",
           "#000000")
FONT = 'font-family="system-ui, sans-serif"'
INK = "#1a1a1a"
GRID = "#d0d0d0"
WIDE_W = 720
NARROW_W = 340
"""Drawing widths: the results column on a laptop, and a 390 px phone less its margins (the
narrow drawing is shown from 600 px down, where it is drawn at about scale 1)."""
MIN_LEGEND_PX = 11


MAX_TICKS = 12
"""The most ticks an axis has (``count`` is clamped to ``MAX_TICKS - 2``: the ticks are
``count + 2`` at most, the first at or below the lowest value and the last at or above the
highest), so drawing an axis is bounded work whatever values the chart is given (issue 36:
an accumulating loop never advanced once its step fell below 5e-13)."""
VALUE_CAP = 1e300
"""Values are drawn clipped to ±this (their labels and descriptions keep the true value), so
every sum, tick and coordinate a chart computes stays a finite float."""
_DECIMAL = decimal.Context(prec=28, Emin=-999_999, Emax=999_999, traps=[])
"""Tick arithmetic in decimal: exact for any float's exponent (1e-300 and denormals
included), so ticks are exact multiples of the step, not accumulated float error."""
_TOLERANCE = decimal.Decimal("1e-9")


def drawable(value: float) -> float | None:
    """``value`` clipped to ±``VALUE_CAP`` for drawing, or None when it is not a number (NaN,
    ±inf): such a value is left out of the drawing."""
    if not math.isfinite(value):
        return None
    return min(max(value, -VALUE_CAP), VALUE_CAP)


def _step(span: decimal.Decimal, count: int) -> decimal.Decimal:
    """The 1, 2 or 5 × 10^k step that covers ``span`` in at most ``count`` steps."""
    raw = _DECIMAL.divide(span, count)
    magnitude = _DECIMAL.scaleb(decimal.Decimal(1), raw.adjusted())
    return next(step for step in (_DECIMAL.multiply(m, magnitude) for m in (1, 2, 5, 10))
                if step >= raw)


def _ticks(lower: float, upper: float, count: int) -> list[float]:
    """At most ``count + 2`` ticks ``first + i * step`` (``first`` the step's multiple at or
    below ``lower``) up to the first at or above ``upper``: each computed from ``i``, never
    accumulated. When they cannot be told apart as floats (near the denormals) or overflow
    (near the largest float), the two ends themselves."""
    count = min(max(int(count), 1), MAX_TICKS - 2)
    low, high = decimal.Decimal(lower), decimal.Decimal(upper)
    step = _step(_DECIMAL.subtract(high, low), count)
    first = _DECIMAL.multiply(
        _DECIMAL.divide(low, step).to_integral_value(rounding=decimal.ROUND_FLOOR), step)
    steps = _DECIMAL.divide(_DECIMAL.subtract(high, first), step)
    # A float just past a tick (0.1 + 0.2) does not earn another tick: a 1e-9 step tolerance.
    n = min(max(math.ceil(_DECIMAL.subtract(steps, _TOLERANCE)), 1), MAX_TICKS - 1)
    ticks = [float(_DECIMAL.add(first, _DECIMAL.multiply(i, step))) for i in range(n + 1)]
    span = ticks[-1] - ticks[0]
    if (all(math.isfinite(t) for t in ticks) and math.isfinite(span) and span > 0
            and all(a < b for a, b in itertools.pairwise(ticks))):
        return ticks
    return [lower, upper]


def nice_ticks(upper: float, count: int = 5) -> list[float]:
    """0 .. >= upper in 1, 2 or 5 x 10^k steps (Heckbert 1990, "Nice numbers for graph
    labels", Graphics Gems); at most ``MAX_TICKS``. [0, 1] when there is nothing to show
    (``upper`` zero, negative or not a number); [0, ``upper``] when nice ticks cannot be told
    apart as floats (``upper`` a denormal) or would overflow (``upper`` near the largest
    float)."""
    if not math.isfinite(upper) or upper <= 0:
        return [0.0, 1.0]
    return _ticks(0.0, upper, count)


def nice_range(lower: float, upper: float, count: int = 5) -> list[float]:
    """Nice ticks spanning [lower, upper] that need not start at 0 (for a scatter whose
    points sit far from the origin); at most ``MAX_TICKS``."""
    if not (math.isfinite(lower) and math.isfinite(upper)) or upper <= lower:
        return nice_ticks(max(upper, 1.0), count)
    return _ticks(lower, upper, count)


def tick_text(value: float) -> str:
    """A tick's label: 0, 0.05, 12.5, 40k, 3M; from a trillion up, and below a
    ten-thousandth, in scientific notation (2e+15, 5e-301), so it stays short for any value."""
    if value == 0:
        return "0"
    size = abs(value)
    if size >= 1e12:
        return f"{value:g}"
    if size >= 1e6:
        return f"{value / 1e6:g}M"
    if size >= 1e4:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


@dataclass(frozen=True)
class Part:
    label: str
    value: float


@dataclass(frozen=True)
class Band:
    """A range drawn over a bar (an estimate's 80% band), ``low`` to ``high`` in the bar's
    base units, with the text that states its figures."""

    low: float
    high: float
    label: str


def _title_lines(title: str, width: int) -> list[str]:
    """The visible title, wrapped to the drawing's width (about 8.5 units a character)."""
    return textwrap.wrap(title, max(20, int((width - 16) / 8.5))) or [title]


def _open(width: int, height: int, title: str, description: str, ident: str) -> list[str]:
    """The SVG's head, its accessible name and description, and its visible title; what
    follows is drawn below the title (shifted down when the title wraps) until ``_close``."""
    lines = _title_lines(title, width)
    shift = 18 * (len(lines) - 1)
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height + shift}" '
        f'width="100%" role="img" aria-labelledby="{ident}-t {ident}-d" {FONT} '
        f'class="chart" id="{ident}">',
        f'<title id="{ident}-t">{escape(title)}</title>',
        f'<desc id="{ident}-d">{escape(description)}</desc>',
        *(f'<text x="8" y="{20 + 18 * i}" font-size="15" font-weight="600" fill="{INK}">'
          f'{escape(line)}</text>' for i, line in enumerate(lines)),
        f'<g transform="translate(0 {shift})">',
    ]


_CLOSE = "</g></svg>"


def responsive(wide: str, narrow: str) -> str:
    """The wide and the narrow drawing of one chart; the stylesheet shows one of them."""
    return f'<div class="chart-wide">{wide}</div><div class="chart-narrow">{narrow}</div>'


def _band_lines(label: str, width: int) -> list[str]:
    """A band's label wrapped to the drawing's width (12-unit text, about 6.6 a character)."""
    return textwrap.wrap(label, max(20, int((width - 16) / 6.6))) or [label]


def stacked_bar(ident: str, title: str, parts: Sequence[Part], *, unit: str,
                scale: float = 1.0, limit: float | None = None,
                limit_label: str = "capacity", band: Band | None = None,
                width: int = WIDE_W) -> str:
    """One horizontal bar made of ``parts`` (values in base units, divided by ``scale`` for
    display in ``unit``), with an optional limit line (a GPU's memory) and an optional
    ``band``: a shaded range with a whisker across the bar, from its low to its high end, and
    its label under the legend. A narrow ``width`` stacks the legend in one column."""
    left, right = 16, 24
    columns = 2 if width >= 2 * NARROW_W else 1
    bar_y, bar_h = 44, 34
    shown = [Part(p.label, p.value / scale) for p in parts if p.value / scale > 0]
    # Drawn lengths: each part clipped to VALUE_CAP (an infinite one too), so their sum, the
    # ticks and every coordinate stay finite; the labels keep the true values.
    lengths = [min(p.value, VALUE_CAP) for p in shown]
    total = sum(p.value for p in shown)
    cap = limit / scale if limit is not None else None
    drawn_cap = drawable(cap) if cap is not None else None
    # A band whose ends are not numbers, or are out of order, is not drawn (its label is).
    ends = (drawable(band.low / scale), drawable(band.high / scale)) if band else (None, None)
    drawn_band = ((ends[0], ends[1]) if ends[0] is not None and ends[1] is not None
                  and ends[0] <= ends[1] else None)
    ticks = nice_ticks(max(sum(lengths), drawn_cap or 0.0,
                           drawn_band[1] if drawn_band else 0.0) * 1.02,
                       5 if columns == 2 else 4)
    top = ticks[-1]
    plot_w = width - left - right

    def x(value: float) -> float:
        return left + plot_w * min(value, top) / top

    legend_rows = math.ceil(len(shown) / columns)
    band_lines = _band_lines(band.label, width) if band else []
    height = bar_y + bar_h + 48 + 22 * legend_rows + (18 * len(band_lines) + 8 if band else 0)
    description = "; ".join(f"{p.label} {p.value:,.2f} {unit}" for p in shown)
    description += f"; total {total:,.2f} {unit}"
    if cap is not None:
        description += f"; {limit_label} {cap:,.2f} {unit}"
    if band is not None:
        description += f"; {band.label}"
    svg = _open(width, height, title, description, ident)
    for tick in ticks:
        svg.append(f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{bar_y - 4}" '
                   f'y2="{bar_y + bar_h + 4}" stroke="{GRID}"/>')
        svg.append(f'<text x="{x(tick):.1f}" y="{bar_y + bar_h + 20}" font-size="12" '
                   f'text-anchor="middle" fill="{INK}">{tick_text(tick)}</text>')
    svg.append(f'<text x="{left + plot_w / 2:.1f}" y="{bar_y + bar_h + 38}" font-size="12" '
               f'text-anchor="middle" fill="{INK}">{escape(unit)}</text>')
    start = 0.0
    for i, (part, length) in enumerate(zip(shown, lengths, strict=True)):
        colour = PALETTE[i % len(PALETTE)]
        bar_w = x(start + length) - x(start)
        svg.append(f'<rect x="{x(start):.1f}" y="{bar_y}" width="{bar_w:.2f}" '
                   f'height="{bar_h}" fill="{colour}"><title>{escape(part.label)}: '
                   f'{part.value:,.2f} {escape(unit)}</title></rect>')
        start += length
    if band is not None and drawn_band is not None:
        low_x, high_x = x(drawn_band[0]), x(drawn_band[1])
        mid_y = bar_y + bar_h / 2
        svg.append(f'<g class="band" aria-label="{escape(band.label)}">'
                   f'<title>{escape(band.label)}</title>'
                   f'<rect class="band-range" x="{low_x:.1f}" y="{bar_y - 6}" '
                   f'width="{high_x - low_x:.2f}" height="{bar_h + 12}" fill="{INK}" '
                   f'fill-opacity="0.18" stroke="{INK}" stroke-dasharray="3 2"/>'
                   f'<line x1="{low_x:.1f}" x2="{high_x:.1f}" y1="{mid_y:.1f}" '
                   f'y2="{mid_y:.1f}" stroke="{INK}" stroke-width="2"/>'
                   + "".join(f'<line x1="{end:.1f}" x2="{end:.1f}" y1="{bar_y - 6}" '
                             f'y2="{bar_y + bar_h + 6}" stroke="{INK}" stroke-width="2"/>'
                             for end in (low_x, high_x))
                   + '</g>')
    if cap is not None and drawn_cap is not None:
        svg.append(f'<line x1="{x(drawn_cap):.1f}" x2="{x(drawn_cap):.1f}" y1="{bar_y - 10}" '
                   f'y2="{bar_y + bar_h + 6}" stroke="{INK}" stroke-width="2.5" '
                   f'stroke-dasharray="5 3"/>')
        anchor = "end" if x(drawn_cap) > width - min(140, width / 2) else "start"
        dx = -4 if anchor == "end" else 4
        svg.append(f'<text x="{x(drawn_cap) + dx:.1f}" y="{bar_y - 12}" font-size="12" '
                   f'text-anchor="{anchor}" fill="{INK}">{escape(limit_label)} '
                   f'{cap:,.1f} {escape(unit)}</text>')
    legend_y = bar_y + bar_h + 58
    for i, part in enumerate(shown):
        lx = left + (i % columns) * (plot_w / columns)
        ly = legend_y + (i // columns) * 22
        svg.append(f'<rect x="{lx:.1f}" y="{ly - 11}" width="12" height="12" '
                   f'fill="{PALETTE[i % len(PALETTE)]}"/>')
        svg.append(f'<text x="{lx + 18:.1f}" y="{ly}" font-size="12" fill="{INK}" '
                   'class="legend">'
                   f'{escape(part.label)}: {part.value:,.2f} {escape(unit.split()[0])}</text>')
    if band is not None:
        band_y = legend_y + 22 * legend_rows + 4
        svg.append(f'<text class="band-label" id="{ident}-band" x="{left}" y="{band_y}" '
                   f'font-size="12" fill="{INK}">'
                   + "".join(f'<tspan x="{left}" dy="{0 if i == 0 else 18}">{escape(line)}'
                             '</tspan>' for i, line in enumerate(band_lines))
                   + '</text>')
    svg.append(_CLOSE)
    return "\n".join(svg)


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    label: str


def grid_lines(x_ticks: Sequence[float], y_ticks: Sequence[float],
               sx: Callable[[float], float], sy: Callable[[float], float], *, left: float,
               top: float, width: float, height: float,
               x_text: Callable[[float], str] = tick_text) -> list[str]:
    """A plot area's grid lines with their tick labels under the x axis and left of the y
    axis (the scatter's and the serving latency chart's)."""
    out: list[str] = []
    for tick in x_ticks:
        out.append(f'<line x1="{sx(tick):.1f}" x2="{sx(tick):.1f}" y1="{top}" '
                   f'y2="{top + height}" stroke="{GRID}"/>')
        out.append(f'<text x="{sx(tick):.1f}" y="{top + height + 18}" font-size="12" '
                   f'text-anchor="middle" fill="{INK}">{x_text(tick)}</text>')
    for tick in y_ticks:
        out.append(f'<line x1="{left}" x2="{left + width}" y1="{sy(tick):.1f}" '
                   f'y2="{sy(tick):.1f}" stroke="{GRID}"/>')
        out.append(f'<text x="{left - 8}" y="{sy(tick) + 4:.1f}" font-size="12" '
                   f'text-anchor="end" fill="{INK}">{tick_text(tick)}</text>')
    return out


class _Plotted(Protocol):
    @property
    def x(self) -> float: ...
    @property
    def y(self) -> float: ...


P = TypeVar("P", bound=_Plotted)


def drawable_points(points: Sequence[P]) -> list[P]:
    """``points`` (any dataclass with ``x`` and ``y``: a scatter's or a latency curve's) whose
    coordinates are numbers, clipped to ±``VALUE_CAP`` (``drawable``)."""
    out = []
    for p in points:
        x, y = drawable(p.x), drawable(p.y)
        if x is not None and y is not None:
            out.append(replace(p, x=x, y=y))  # type: ignore[type-var]
    return out


def scatter(ident: str, title: str, points: Sequence[Point], front: Sequence[Point],
            marked: Point | None, *, x_unit: str, y_unit: str,
            x_format: Callable[[float], str] = tick_text, width: int = WIDE_W) -> str:
    """Plans as dots, the Pareto front as a line, the recommended plan as a ringed star.

    The time axis starts at zero. The cost axis starts at zero when the plans' costs reach
    down to a fifth of their largest; otherwise it starts near the cheapest plan (the points
    would crowd one edge) and its label says that it does not start at zero."""
    narrow = width < 2 * NARROW_W
    height = 300 if narrow else 420
    left, right, top_pad, bottom = (56 if narrow else 78), 16 if narrow else 24, 40, 64
    # Points that are not numbers are left out; the rest are drawn clipped to VALUE_CAP.
    points, front = drawable_points(points), drawable_points(front)
    marked = next(iter(drawable_points([marked] if marked else [])), None)
    every = [*points, *front, *([marked] if marked else [])]
    xs = [p.x for p in every] or [0.0, 1.0]
    # Equal costs: a tenth of the cost either side (a cost of 1e-300 keeps its own scale).
    spread = (max(xs) - min(xs)) or abs(max(xs)) * 0.1 or 1.0
    count = 4 if narrow else 5
    if min(xs) <= 0.2 * max(xs):
        x_ticks = nice_ticks(max(xs) * 1.05, count)
    else:
        x_ticks = nice_range(max(0.0, min(xs) - 0.05 * spread), max(xs) + 0.05 * spread,
                             count)
    if x_ticks[0] > 0:
        x_unit = f"{x_unit}; axis starts at {x_format(x_ticks[0])}, not 0"
    y_ticks = nice_ticks(max((p.y for p in every), default=1.0) * 1.05, count)
    plot_w, plot_h = width - left - right, height - top_pad - bottom

    def sx(value: float) -> float:
        return left + plot_w * (value - x_ticks[0]) / (x_ticks[-1] - x_ticks[0])

    def sy(value: float) -> float:
        return top_pad + plot_h * (1 - value / y_ticks[-1])

    description = (f"{len(points)} plans; Pareto front of {len(front)}: "
                   + "; ".join(f"{p.label}: {p.x:,.0f} {x_unit}, {p.y:,.2f} {y_unit}"
                               for p in front[:12]))
    if marked:
        description += f". Recommended: {marked.label}"
    svg = _open(width, height, title, description, ident)
    svg += grid_lines(x_ticks, y_ticks, sx, sy, left=left, top=top_pad, width=plot_w,
                      height=plot_h, x_text=lambda tick: escape(x_format(tick)))
    svg.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 22}" font-size="13" '
               'class="x-label" '
               f'text-anchor="middle" fill="{INK}">{escape(x_unit)}</text>')
    svg.append(f'<text x="18" y="{top_pad + plot_h / 2:.1f}" font-size="13" '
               f'text-anchor="middle" fill="{INK}" transform="rotate(-90 18 '
               f'{top_pad + plot_h / 2:.1f})">{escape(y_unit)}</text>')
    for p in points:
        svg.append(f'<circle cx="{sx(p.x):.1f}" cy="{sy(p.y):.1f}" r="4.5" fill="{PALETTE[4]}" '
                   f'fill-opacity="0.75"><title>{escape(p.label)}</title></circle>')
    if front:
        ordered = sorted(front, key=lambda p: p.x)
        path = " ".join(f"{sx(p.x):.1f},{sy(p.y):.1f}" for p in ordered)
        svg.append(f'<polyline points="{path}" fill="none" stroke="{PALETTE[0]}" '
                   f'stroke-width="2"/>')
        for p in ordered:
            svg.append(f'<circle cx="{sx(p.x):.1f}" cy="{sy(p.y):.1f}" r="5.5" '
                       f'fill="{PALETTE[0]}"><title>Pareto: {escape(p.label)}</title></circle>')
    if marked:
        cx, cy = sx(marked.x), sy(marked.y)
        star = " ".join(
            f"{cx + (11 if k % 2 == 0 else 4.5) * math.sin(k * math.pi / 5):.1f},"
            f"{cy - (11 if k % 2 == 0 else 4.5) * math.cos(k * math.pi / 5):.1f}"
            for k in range(10))
        svg.append(f'<polygon points="{star}" fill="{PALETTE[5]}" stroke="{INK}" '
                   f'stroke-width="1"><title>Recommended: {escape(marked.label)}</title>'
                   f'</polygon>')
        anchor = "end" if cx > width - min(200, width / 2) else "start"
        svg.append(f'<text x="{cx + (-14 if anchor == "end" else 14):.1f}" y="{cy - 10:.1f}" '
                   f'font-size="12" font-weight="600" text-anchor="{anchor}" fill="{INK}">'
                   f'recommended</text>')
    lx = left + 8
    svg.append(f'<circle cx="{lx}" cy="{top_pad - 10}" r="4.5" fill="{PALETTE[4]}"/>'
               f'<text x="{lx + 9}" y="{top_pad - 6}" font-size="12" fill="{INK}" '
               f'class="legend">plans</text>'
               f'<circle cx="{lx + 70}" cy="{top_pad - 10}" r="5.5" fill="{PALETTE[0]}"/>'
               f'<text x="{lx + 79}" y="{top_pad - 6}" font-size="12" fill="{INK}" '
               f'class="legend">Pareto front</text>')
    svg.append(_CLOSE)
    return "\n".join(svg)
