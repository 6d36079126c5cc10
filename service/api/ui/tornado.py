"""The what-if sweep's tornado chart (issue 42): one horizontal bar per variation, from a zero
line to its change in training time (right: longer, left: shorter), largest change first, so
the knob that matters most is on top.

Drawn like ``charts.py``'s charts: a title, an axis with units and labelled ticks, an accessible
name and a description listing every value, Okabe-Ito colours with the direction also written
in each label (not told by colour alone), and every coordinate finite: values are clipped to
``charts.VALUE_CAP`` and one that is not a number is listed but not drawn.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from html import escape

from service.api.ui.charts import (
    _CLOSE,
    GRID,
    INK,
    NARROW_W,
    WIDE_W,
    Part,
    _open,
    drawable,
    nice_ticks,
    tick_text,
)

LONGER = "#D55E00"
"""Vermillion: the variation takes longer than the base."""
SHORTER = "#009E73"
"""Bluish green: it takes less time."""
MAX_BARS = 64
"""The most bars drawn (a sweep has at most 64 variations)."""


def _label_lines(text: str, width: int) -> list[str]:
    """A bar's label wrapped to the drawing's width (12-unit text, about 6.6 a character)."""
    return textwrap.wrap(text, max(20, int((width - 32) / 6.6))) or [text]


def tornado(ident: str, title: str, bars: Sequence[Part], *, unit: str,
            width: int = WIDE_W) -> str:
    """``bars`` (a label and a signed change in ``unit``), in the order given, each under its
    label and its value; the axis is symmetric about zero."""
    left, right = 16, 16
    plot_w = width - left - right
    shown = list(bars)[:MAX_BARS]
    drawn = [drawable(b.value) for b in shown]
    reach = max((abs(v) for v in drawn if v is not None), default=0.0)
    ticks = nice_ticks(reach * 1.05, 4 if width > NARROW_W else 2)
    top = ticks[-1]

    def x(value: float) -> float:
        return left + plot_w * (min(max(value, -top), top) + top) / (2 * top)

    labels = [_label_lines(f"{b.label}: {_signed(b.value, unit)}", width) for b in shown]
    bar_h, line_h, gap = 16, 15, 10
    y = 40
    rows: list[tuple[float, list[str]]] = []
    for lines in labels:
        rows.append((y, lines))
        y += line_h * len(lines) + bar_h + gap
    axis_y = y + 4
    height = axis_y + 44
    description = "; ".join(f"{b.label} {_signed(b.value, unit)}" for b in shown) or "no bars"
    svg = _open(width, height, title, description, ident)
    for tick in sorted({-t for t in ticks} | set(ticks)):
        svg.append(f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="36" y2="{axis_y}" '
                   f'stroke="{GRID}"/>')
        svg.append(f'<text x="{x(tick):.1f}" y="{axis_y + 16}" font-size="12" '
                   f'text-anchor="middle" fill="{INK}">{tick_text(tick)}</text>')
    svg.append(f'<text x="{left + plot_w / 2:.1f}" y="{axis_y + 34}" font-size="12" '
               f'text-anchor="middle" fill="{INK}">{escape(unit)}: ◀ shorter · longer ▶'
               '</text>')
    for bar, value, (row_y, lines) in zip(shown, drawn, rows, strict=True):
        svg.append(f'<text x="{left}" y="{row_y + 11}" font-size="12" fill="{INK}" '
                   'class="bar-label">'
                   + "".join(f'<tspan x="{left}" dy="{0 if i == 0 else line_h}">'
                             f'{escape(line)}</tspan>' for i, line in enumerate(lines))
                   + '</text>')
        if value is None:
            continue
        bar_y = row_y + line_h * len(lines)
        start, end = sorted((x(0.0), x(value)))
        colour = LONGER if value > 0 else SHORTER
        svg.append(f'<rect class="bar" x="{start:.1f}" y="{bar_y:.1f}" '
                   f'width="{max(end - start, 1.0):.2f}" height="{bar_h}" fill="{colour}">'
                   f'<title>{escape(bar.label)}: {escape(_signed(bar.value, unit))}</title>'
                   '</rect>')
    svg.append(f'<line x1="{x(0.0):.1f}" x2="{x(0.0):.1f}" y1="36" y2="{axis_y}" '
               f'stroke="{INK}" stroke-width="1.5"/>')
    svg.append(_CLOSE)
    return "\n".join(svg)


def _signed(value: float, unit: str) -> str:
    """'+35.7 days longer', '-81.4 days shorter', '0 days'."""
    if value != value:  # NaN
        return "—"
    if value == 0:
        return f"0 {unit}"
    word = "longer" if value > 0 else "shorter"
    return f"{value:+,.1f} {unit} {word}"
