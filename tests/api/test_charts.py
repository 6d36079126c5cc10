"""The portal's SVG writer: nice axes, every value described, the recommended plan marked."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from service.api.ui import charts

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
