"""A small SVG writer for the portal's charts, rendered on the server (no script, no CDN).

Each chart is drawn twice, for a wide and a narrow column (``responsive``): the stylesheet
shows one, so on a phone the legend stacks in one column and its text stays at least
``MIN_LEGEND_PX`` CSS pixels tall instead of shrinking with a 720-unit drawing.

Every chart has a title, axes with units, labelled ticks, a legend, and an accessible name and
description (``role="img"``, ``<title>``, ``<desc>`` listing the values), in the Okabe-Ito
colour-blind-safe palette (Okabe & Ito 2008, "Color Universal Design").
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

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


def nice_ticks(upper: float, count: int = 5) -> list[float]:
    """0 .. >= upper in 1, 2 or 5 x 10^k steps (Heckbert 1990, "Nice numbers for graph
    labels", Graphics Gems)."""
    if upper <= 0 or not math.isfinite(upper):
        return [0.0, 1.0]
    raw = upper / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    ticks = [0.0]
    while ticks[-1] < upper - 1e-12 * upper:
        ticks.append(round(ticks[-1] + step, 12))
    return ticks


def nice_range(lower: float, upper: float, count: int = 5) -> list[float]:
    """Nice ticks spanning [lower, upper] that need not start at 0 (for a scatter whose
    points sit far from the origin)."""
    if not (math.isfinite(lower) and math.isfinite(upper)) or upper <= lower:
        return nice_ticks(max(upper, 1.0), count)
    raw = (upper - lower) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    ticks = [math.floor(lower / step) * step]
    while ticks[-1] < upper - 1e-12 * abs(upper):
        ticks.append(round(ticks[-1] + step, 12))
    return ticks


def tick_text(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e6:
        return f"{value / 1e6:g}M"
    if abs(value) >= 1e4:
        return f"{value / 1e3:g}k"
    return f"{value:g}"


@dataclass(frozen=True)
class Part:
    label: str
    value: float


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


def stacked_bar(ident: str, title: str, parts: Sequence[Part], *, unit: str,
                scale: float = 1.0, limit: float | None = None,
                limit_label: str = "capacity", width: int = WIDE_W) -> str:
    """One horizontal bar made of ``parts`` (values in base units, divided by ``scale`` for
    display in ``unit``), with an optional limit line (a GPU's memory). A narrow ``width``
    stacks the legend in one column."""
    left, right = 16, 24
    columns = 2 if width >= 2 * NARROW_W else 1
    bar_y, bar_h = 44, 34
    shown = [Part(p.label, p.value / scale) for p in parts if p.value > 0]
    total = sum(p.value for p in shown)
    cap = limit / scale if limit is not None else None
    ticks = nice_ticks(max(total, cap or 0.0) * 1.02, 5 if columns == 2 else 4)
    top = ticks[-1]
    plot_w = width - left - right

    def x(value: float) -> float:
        return left + plot_w * value / top

    legend_rows = math.ceil(len(shown) / columns)
    height = bar_y + bar_h + 48 + 22 * legend_rows
    description = "; ".join(f"{p.label} {p.value:,.2f} {unit}" for p in shown)
    description += f"; total {total:,.2f} {unit}"
    if cap is not None:
        description += f"; {limit_label} {cap:,.2f} {unit}"
    svg = _open(width, height, title, description, ident)
    for tick in ticks:
        svg.append(f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{bar_y - 4}" '
                   f'y2="{bar_y + bar_h + 4}" stroke="{GRID}"/>')
        svg.append(f'<text x="{x(tick):.1f}" y="{bar_y + bar_h + 20}" font-size="12" '
                   f'text-anchor="middle" fill="{INK}">{tick_text(tick)}</text>')
    svg.append(f'<text x="{left + plot_w / 2:.1f}" y="{bar_y + bar_h + 38}" font-size="12" '
               f'text-anchor="middle" fill="{INK}">{escape(unit)}</text>')
    start = 0.0
    for i, part in enumerate(shown):
        colour = PALETTE[i % len(PALETTE)]
        bar_w = x(start + part.value) - x(start)
        svg.append(f'<rect x="{x(start):.1f}" y="{bar_y}" width="{bar_w:.2f}" '
                   f'height="{bar_h}" fill="{colour}"><title>{escape(part.label)}: '
                   f'{part.value:,.2f} {escape(unit)}</title></rect>')
        start += part.value
    if cap is not None:
        svg.append(f'<line x1="{x(cap):.1f}" x2="{x(cap):.1f}" y1="{bar_y - 10}" '
                   f'y2="{bar_y + bar_h + 6}" stroke="{INK}" stroke-width="2.5" '
                   f'stroke-dasharray="5 3"/>')
        anchor = "end" if x(cap) > width - min(140, width / 2) else "start"
        dx = -4 if anchor == "end" else 4
        svg.append(f'<text x="{x(cap) + dx:.1f}" y="{bar_y - 12}" font-size="12" '
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
    every = [*points, *front, *([marked] if marked else [])]
    xs = [p.x for p in every] or [0.0, 1.0]
    spread = (max(xs) - min(xs)) or max(abs(max(xs)) * 0.1, 1.0)
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
