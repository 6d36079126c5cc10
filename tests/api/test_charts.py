"""The portal's SVG writer: nice axes, every value described, the recommended plan marked."""

from __future__ import annotations

import itertools
import math
import xml.etree.ElementTree as ET

import pytest

from service.api.ui import charts, latency_chart

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(("upper", "expected"), [
    (87.0, [0, 20, 40, 60, 80, 100]), (4.2, [0, 1, 2, 3, 4, 5]),
    (0.034, [0, 0.01, 0.02, 0.03, 0.04]), (1.0, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
])
def test_nice_ticks_cover_the_range_in_1_2_5_steps(upper: float,
                                                   expected: list[float]) -> None:
    assert charts.nice_ticks(upper) == pytest.approx(expected)


def test_nice_range_need_not_start_at_zero() -> None:
    ticks = charts.nice_range(461_000, 479_000)
    assert ticks[0] == 460_000
    assert ticks[-1] >= 479_000
    assert len(ticks) <= 7


def test_a_stacked_bar_is_valid_svg_with_every_part_and_the_limit() -> None:
    parts = [charts.Part("weights", 8.5 * 2**30), charts.Part("activations", 21 * 2**30),
             charts.Part("zero", 0.0)]
    svg = charts.stacked_bar("m", "Memory per GPU", parts, unit="GiB", scale=2**30,
                             limit=80 * 2**30, limit_label="GPU memory")
    root = ET.fromstring(svg)  # noqa: S314 - our own output
    assert root.get("role") == "img"
    assert root.find(f"{SVG}title").text == "Memory per GPU"  # type: ignore[union-attr]
    description = root.find(f"{SVG}desc").text or ""  # type: ignore[union-attr]
    assert "weights 8.50 GiB" in description
    assert "GPU memory 80.00 GiB" in description
    assert "zero" not in description  # empty parts are left out
    bars = [r for r in root.iter(f"{SVG}rect") if r.get("height") == "34"]
    widths = [float(r.get("width", 0)) for r in bars]
    assert widths[1] / widths[0] == pytest.approx(21 / 8.5, rel=1e-3)  # drawn to scale


def test_a_scatter_marks_the_recommended_plan_and_names_its_axes() -> None:
    points = [charts.Point(100.0 + i, 10.0 - i, f"plan {i}") for i in range(5)]
    svg = charts.scatter("p", "Time against cost", points, points[:3], points[0],
                         x_unit="cost (USD)", y_unit="training time (days)")
    root = ET.fromstring(svg)  # noqa: S314 - our own output
    texts = [t.text for t in root.iter(f"{SVG}text")]
    # Costs of 100-104 would crowd one edge from zero: the axis starts near them, and says so.
    assert "cost (USD); axis starts at 99, not 0" in texts
    assert "training time (days)" in texts
    stars = list(root.iter(f"{SVG}polygon"))
    assert len(stars) == 1
    assert "Recommended: plan 0" in (stars[0].find(f"{SVG}title").text or "")  # type: ignore[union-attr]
    assert len(list(root.iter(f"{SVG}polyline"))) == 1  # the front


def test_a_cost_axis_starts_at_zero_when_the_costs_reach_down_to_it() -> None:
    """Issue 18: axes start at a sensible zero or say that they do not."""
    points = [charts.Point(x, 10.0, f"plan {x}") for x in (15.0, 40.0, 90.0)]
    svg = charts.scatter("p", "Time against cost", points, points, None,
                         x_unit="cost (USD)", y_unit="training time (days)")
    root = ET.fromstring(svg)  # noqa: S314 - our own output
    label = next(t for t in root.iter(f"{SVG}text") if t.get("class") == "x-label")
    assert label.text == "cost (USD)"
    ticks = [t.text for t in root.iter(f"{SVG}text") if t.get("text-anchor") == "middle"]
    assert ticks[0] == "0"


def test_the_narrow_drawing_stacks_its_legend_and_wraps_its_title() -> None:
    """Issue 18: on a phone the chart re-flows: one legend column, the title on two lines,
    legend text drawn at 12 units in a drawing about as wide as the phone's column."""
    parts = [charts.Part(name, 1.0) for name in ("weights", "gradients", "optimizer")]
    title = "Step time breakdown of the recommended plan, per step"
    wide = ET.fromstring(charts.stacked_bar("s", title, parts, unit="s"))  # noqa: S314
    narrow = ET.fromstring(charts.stacked_bar(  # noqa: S314 - our own output
        "s-narrow", title, parts, unit="s", width=charts.NARROW_W))
    def legend_xs(root: ET.Element) -> set[str]:
        return {t.get("x", "") for t in root.iter(f"{SVG}text") if t.get("class") == "legend"}
    assert len(legend_xs(wide)) == 2
    assert len(legend_xs(narrow)) == 1
    assert narrow.get("viewBox", "").split()[2] == str(charts.NARROW_W)
    headings = [t for t in narrow if t.tag == f"{SVG}text" and t.get("font-weight") == "600"]
    assert len(headings) == 2
    assert " ".join(t.text or "" for t in headings) == title
    assert all(t.get("font-size") == "12" for t in narrow.iter(f"{SVG}text")
               if t.get("class") == "legend")
    both = charts.responsive("<svg/>", "<svg/>")
    assert 'class="chart-wide"' in both
    assert 'class="chart-narrow"' in both


EXTREMES = [1e-300, 1.05e-300, 5e-324, 1e-310, 2.2e-308, 1e-12, 4.9e-13, 0.30000000000000004,
            1.0, 87.0, 1e15, 1e300, 1e308, 1.7976931348623157e308]


def _covers(ticks: list[float], lower: float, upper: float) -> bool:
    return ticks[0] <= lower and ticks[-1] >= upper * (1 - 1e-9)


@pytest.mark.parametrize("upper", EXTREMES)
@pytest.mark.parametrize("count", [1, 4, 5, 6, 1000])
def test_nice_ticks_are_few_finite_increasing_and_cover_any_value(upper: float,
                                                                   count: int) -> None:
    """Issue 36: ``round(tick + step, 12)`` never advanced once the step fell below 5e-13
    (tokens=1e-300 froze the replica); ticks are ``i * step`` now, at most MAX_TICKS."""
    ticks = charts.nice_ticks(upper, count)
    assert 2 <= len(ticks) <= charts.MAX_TICKS
    assert all(math.isfinite(t) for t in ticks)
    assert all(a < b for a, b in itertools.pairwise(ticks))
    assert math.isfinite(ticks[-1] - ticks[0])
    assert _covers(ticks, 0.0, upper)


@pytest.mark.parametrize("upper", [0.0, -1.0, -1e308, math.inf, -math.inf, math.nan])
def test_nothing_to_show_is_an_axis_from_0_to_1(upper: float) -> None:
    assert charts.nice_ticks(upper) == [0.0, 1.0]


@pytest.mark.parametrize(("lower", "upper"), [
    (1e-300, 1.1e-300), (5e-324, 1e-323), (0.0, 5e-324), (1e300, 1.0001e300),
    (-1e308, 1e308), (461_000.0, 479_000.0), (1e-13, 2e-13), (1e308, 1.7e308)])
def test_nice_range_is_bounded_and_covers_any_span(lower: float, upper: float) -> None:
    ticks = charts.nice_range(lower, upper)
    assert 2 <= len(ticks) <= charts.MAX_TICKS
    assert all(math.isfinite(t) for t in ticks)
    assert all(a < b for a, b in itertools.pairwise(ticks))
    assert _covers(ticks, lower, upper)


@pytest.mark.parametrize(("lower", "upper"), [
    (math.nan, 1.0), (1.0, math.inf), (-math.inf, 1.0), (2.0, 1.0), (1e-300, 1e-300)])
def test_nice_range_of_no_span_falls_back_to_ticks_from_zero(lower: float,
                                                              upper: float) -> None:
    ticks = charts.nice_range(lower, upper)
    assert 2 <= len(ticks) <= charts.MAX_TICKS
    assert all(math.isfinite(t) for t in ticks)


def test_tiny_ticks_are_exact_steps_with_short_labels() -> None:
    assert charts.nice_ticks(1.05e-300) == [0.0, 5e-301, 1e-300, 1.5e-300]
    assert [charts.tick_text(t) for t in charts.nice_ticks(1.05e-300)] == [
        "0", "5e-301", "1e-300", "1.5e-300"]
    assert charts.nice_ticks(0.30000000000000004) == [0.0, 0.1, 0.2, 0.3]  # not 0.4
    assert charts.tick_text(2e15) == "2e+15"
    assert charts.tick_text(3e6) == "3M"
    assert charts.tick_text(4e4) == "40k"
    assert charts.tick_text(0.05) == "0.05"


def _numbers_in(svg: str) -> list[str]:
    """Every attribute value of the drawing: coordinates and widths."""
    root = ET.fromstring(svg)  # noqa: S314 - our own output
    return [value for element in root.iter() for key, value in element.attrib.items()
            if key in ("x", "y", "x1", "x2", "y1", "y2", "cx", "cy", "width", "points")]


@pytest.mark.parametrize("value", [1e-300, 5e-324, 1e308, 1.7e308, math.inf, math.nan, 0.0])
def test_every_chart_draws_extreme_values_with_finite_coordinates(value: float) -> None:
    """The scatter, the stacked bar and the latency curve, given tiny, huge and non-finite
    values, answer at once with valid SVG whose coordinates are all numbers."""
    points = [charts.Point(value * (1 + i), value * (2 + i), f"plan {i}") for i in range(4)]
    points.append(charts.Point(1.0, 1.0, "ordinary"))
    drawings = [
        charts.scatter("p", "t", points, points[:2], points[0], x_unit="GPU-hours",
                       y_unit="days"),
        charts.scatter("q", "t", points[:4], points[:4], None, x_unit="USD", y_unit="days",
                       width=charts.NARROW_W),
        charts.stacked_bar("m", "t", [charts.Part("a", value), charts.Part("b", value)],
                           unit="GiB", scale=1e-3, limit=value),
        latency_chart.latency_curve(
            "c", "t", [latency_chart.CurvePoint(value * i, value, f"l{i}") for i in range(5)],
            marked=latency_chart.CurvePoint(value, value, "asked"), limit=value,
            limit_label="SLO", series="p99", x_unit="tokens/s", y_label="p99 (s)",
            y_unit="s"),
    ]
    for svg in drawings:
        for text in _numbers_in(svg):
            assert "nan" not in text.lower(), text
            assert "inf" not in text.lower(), text
        lines = list(ET.fromstring(svg).iter(f"{SVG}line"))  # noqa: S314 - our own output
        assert len(lines) <= 2 * charts.MAX_TICKS + 4
