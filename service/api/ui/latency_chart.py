"""The Serve tab's chart: p99 latency against throughput, one line through a sweep of loads.

Both axes start at zero. A queue's latency grows without bound as the load nears a replica's
capacity, so the latency axis is cut at ``CLIP_FACTOR`` times the larger of the SLO, the
requested load's latency and the idle latency: points above the cut are drawn on the top
edge as open triangles, and the chart says so in its legend and its description (which
lists every point's true value). Drawn with ``charts``' head, palette and ticks, wide and
narrow like the other charts (``charts.responsive``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from service.api.ui import charts
from service.api.ui.charts import (
    INK,
    NARROW_W,
    PALETTE,
    WIDE_W,
    drawable,
    drawable_points,
    nice_ticks,
    tick_text,
)

CLIP_FACTOR = 2.5
"""How far above the SLO (or the requested load's latency) the latency axis reaches before
it is cut: far enough to see the curve bend, near enough that the SLO line stays readable."""
LEGEND_CHAR_W = 7.0
"""Drawing units per legend character at font-size 12 (system-ui averages about 0.55 em)."""


@dataclass(frozen=True)
class CurvePoint:
    """One load: ``x`` throughput and ``y`` latency, both in the chart's display units."""

    x: float
    y: float
    label: str


def _legend_rows(items: Sequence[str], width: float) -> list[list[tuple[int, float]]]:
    """Legend entries (index, x offset) packed into rows no wider than ``width``."""
    rows: list[list[tuple[int, float]]] = [[]]
    used = 0.0
    for i, text in enumerate(items):
        need = 26 + LEGEND_CHAR_W * len(text) + 14
        if rows[-1] and used + need > width:
            rows.append([])
            used = 0.0
        rows[-1].append((i, used))
        used += need
    return rows


def _star(cx: float, cy: float, outer: float = 11.0, inner: float = 4.5) -> str:
    return " ".join(
        f"{cx + (outer if k % 2 == 0 else inner) * math.sin(k * math.pi / 5):.1f},"
        f"{cy - (outer if k % 2 == 0 else inner) * math.cos(k * math.pi / 5):.1f}"
        for k in range(10))


def latency_curve(ident: str, title: str, points: Sequence[CurvePoint], *,
                  marked: CurvePoint | None, limit: float | None, limit_label: str,
                  series: str, x_unit: str, y_label: str, y_unit: str,
                  width: int = WIDE_W) -> str:
    """The sweep as a line of dots (``series`` names it in the legend), the requested load as
    a star, the SLO ``limit`` as a dashed line. Each dot carries its values as ``data-x`` and
    ``data-y`` (display units) and a tooltip. ``y_label`` names the latency axis; ``y_unit``
    ("s", "ms") follows each value in tooltips and the description."""
    narrow = width < 2 * NARROW_W
    left, right, bottom = (56 if narrow else 70), (16 if narrow else 24), 56
    plot_h = 200 if narrow else 260
    # Loads that are not numbers are left out, the rest drawn clipped to charts.VALUE_CAP
    # (as a limit is), so every tick and coordinate is a finite float.
    points = drawable_points(points)
    marked = next(iter(drawable_points([marked] if marked else [])), None)
    limit = drawable(limit) if limit is not None else None
    every = [*points, *([marked] if marked else [])]
    x_ticks = nice_ticks(max((p.x for p in every), default=1.0) * 1.05, 4 if narrow else 6)
    reference = max([limit or 0.0, marked.y if marked else 0.0,
                     points[0].y if points else 0.0])
    highest = max((p.y for p in every), default=1.0)
    cut = CLIP_FACTOR * reference if reference > 0 else math.inf
    top_value = max(min(highest, cut), (limit or 0.0) * 1.1)
    y_ticks = nice_ticks(top_value * 1.05, 4 if narrow else 5)
    y_top = y_ticks[-1]
    off_scale = [p for p in points if p.y > y_top]
    legend = [("series", series), *([("limit", limit_label)] if limit is not None else []),
              *([("marked", "requested load")] if marked else []),
              *([("off", f"off scale (above {tick_text(y_top)} {y_unit})")]
                if off_scale else [])]
    plot_w = width - left - right
    rows = _legend_rows([text for _, text in legend], plot_w)
    top_pad = 40 + 20 * len(rows)  # the title, then the legend's rows
    height = top_pad + plot_h + bottom

    def sx(value: float) -> float:
        return left + plot_w * value / x_ticks[-1]

    def sy(value: float) -> float:
        return top_pad + plot_h * (1 - min(value, y_top) / y_top)

    description = (f"{series} against {x_unit}, {len(points)} loads: "
                   + "; ".join(f"{p.x:,.0f} {x_unit}: {p.y:,.3g} {y_unit}" for p in points))
    if limit is not None:
        description += f". {limit_label}: {limit:,.3g} {y_unit}"
    if marked:
        description += f". Requested load: {marked.label}"
    if off_scale:
        description += (f". {len(off_scale)} loads above {tick_text(y_top)} {y_unit} are drawn "
                        "on the top edge")
    svg = charts._open(width, height, title, description, ident)  # charts' head
    svg += charts.grid_lines(x_ticks, y_ticks, sx, sy, left=left, top=top_pad, width=plot_w,
                             height=plot_h)
    svg.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 18}" font-size="13" '
               f'class="x-label" text-anchor="middle" fill="{INK}">{escape(x_unit)}</text>')
    svg.append(f'<text x="16" y="{top_pad + plot_h / 2:.1f}" font-size="13" class="y-label" '
               f'text-anchor="middle" fill="{INK}" transform="rotate(-90 16 '
               f'{top_pad + plot_h / 2:.1f})">{escape(y_label)}</text>')
    if limit is not None:
        svg.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{sy(limit):.1f}" '
                   f'y2="{sy(limit):.1f}" stroke="{PALETTE[5]}" stroke-width="2.5" '
                   f'stroke-dasharray="7 4" class="slo"><title>{escape(limit_label)}</title>'
                   '</line>')
    ordered = sorted(points, key=lambda p: p.x)
    if ordered:
        path = " ".join(f"{sx(p.x):.1f},{sy(p.y):.1f}" for p in ordered)
        svg.append(f'<polyline points="{path}" fill="none" stroke="{PALETTE[0]}" '
                   'stroke-width="2"/>')
    for p in ordered:
        tip = f"<title>{escape(p.label)}: {p.y:,.3g} {escape(y_unit)}</title>"
        data = f'data-x="{p.x!r}" data-y="{p.y!r}"'
        if p.y > y_top:
            cx, cy = sx(p.x), sy(p.y)
            svg.append(f'<polygon points="{cx:.1f},{cy - 7:.1f} {cx - 6:.1f},{cy + 4:.1f} '
                       f'{cx + 6:.1f},{cy + 4:.1f}" fill="#fff" stroke="{PALETTE[0]}" '
                       f'stroke-width="2" class="point off-scale" {data}>{tip}</polygon>')
        else:
            svg.append(f'<circle cx="{sx(p.x):.1f}" cy="{sy(p.y):.1f}" r="4.5" '
                       f'fill="{PALETTE[0]}" class="point" {data}>{tip}</circle>')
    if marked:
        svg.append(f'<polygon points="{_star(sx(marked.x), sy(marked.y))}" '
                   f'fill="{PALETTE[1]}" stroke="{INK}" stroke-width="1" class="marked" '
                   f'data-x="{marked.x!r}" data-y="{marked.y!r}"><title>Requested load: '
                   f'{escape(marked.label)}</title></polygon>')
    for r, row in enumerate(rows):
        ly = 44 + 20 * r
        for i, offset in row:
            lx = left + offset
            kind, text = legend[i]
            if kind == "series":
                svg.append(f'<line x1="{lx}" x2="{lx + 20}" y1="{ly - 4}" y2="{ly - 4}" '
                           f'stroke="{PALETTE[0]}" stroke-width="2"/><circle cx="{lx + 10}" '
                           f'cy="{ly - 4}" r="4.5" fill="{PALETTE[0]}"/>')
            elif kind == "limit":
                svg.append(f'<line x1="{lx}" x2="{lx + 20}" y1="{ly - 4}" y2="{ly - 4}" '
                           f'stroke="{PALETTE[5]}" stroke-width="2.5" '
                           'stroke-dasharray="7 4"/>')
            elif kind == "marked":
                svg.append(f'<polygon points="{_star(lx + 10, ly - 4, 8, 3.3)}" '
                           f'fill="{PALETTE[1]}" stroke="{INK}" stroke-width="1"/>')
            else:
                svg.append(f'<polygon points="{lx + 10},{ly - 11} {lx + 4},{ly} {lx + 16},'
                           f'{ly}" fill="#fff" stroke="{PALETTE[0]}" stroke-width="2"/>')
            svg.append(f'<text x="{lx + 26}" y="{ly}" font-size="12" fill="{INK}" '
                       f'class="legend">{escape(text)}</text>')
    svg.append(charts._CLOSE)  # and tail
    return "\n".join(svg)
