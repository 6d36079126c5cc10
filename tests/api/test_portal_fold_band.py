"""Issue 41, item 8, without a browser: the one fold of plans with identical figures that
``cq optimise`` and the portal share, a quote line's coded reasons, and the estimate's 80%
band drawn on the step-time chart (tests/ui/test_portal_reasons.py sees them on screen)."""

from __future__ import annotations

import io
import math
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from service.api import presentation as fmt
from service.api.ui import charts
from service.api.ui.train import _step_band
from service.core.policy import RULE_CODES

SVG = "{http://www.w3.org/2000/svg}"


def plan(rank: int, *, dp: int = 8, cp: int = 1, micro_batch: int = 1, train_s: float = 1e6,
         memory_gib: float = 50.0, cost_usd: str | None = "1234.50") -> dict[str, Any]:
    return {"rank": rank, "accelerator": "h100-sxm5-80gb", "num_gpus": 64,
            "global_batch_seqs": 512, "cost_usd": cost_usd,
            "parallelism": {"tp": 8, "pp": 1, "dp": dp, "cp": cp, "micro_batch": micro_batch,
                            "zero_stage": 1, "recompute": "none"},
            "time": {"train_s": train_s, "gpu_hours": 1000.0, "mfu_fraction": 0.5},
            "memory": {"peak_bytes_per_gpu": memory_gib * 2**30}}


class TestFoldPlans:
    def test_permutations_with_identical_figures_share_the_best_ranked_row(self) -> None:
        plans = [plan(1, dp=8), plan(2, dp=4, cp=2, micro_batch=2),
                 plan(3, dp=2, cp=4, micro_batch=4), plan(4, dp=1, cp=8, micro_batch=8),
                 plan(5, memory_gib=60.0), plan(6, dp=4, cp=2, memory_gib=60.0)]
        rows = fmt.fold_plans(plans)
        assert [(p["rank"], more) for p, more in rows] == [(1, 3), (5, 1)]

    def test_a_plan_that_differs_in_any_shown_figure_keeps_its_row(self) -> None:
        plans = [plan(1), plan(2, train_s=3e6), plan(3, memory_gib=70.0),
                 plan(4, cost_usd="1234.51"), plan(5, cost_usd=None)]
        assert [more for _, more in fmt.fold_plans(plans)] == [0, 0, 0, 0, 0]

    def test_a_fold_skips_rows_between_and_keeps_the_ranking(self) -> None:
        plans = [plan(1), plan(2, train_s=3e6), plan(3, dp=4, cp=2)]
        assert [(p["rank"], more) for p, more in fmt.fold_plans(plans)] == [(1, 1), (2, 0)]

    def test_cq_optimise_folds_with_the_same_function(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        from service.cli import common
        from service.cli import plan as cli_plan

        calls: list[int] = []
        real = fmt.fold_plans

        def spy(plans: Any) -> list[tuple[dict[str, Any], int]]:
            calls.append(len(plans))
            return real(plans)

        monkeypatch.setattr(fmt, "fold_plans", spy)
        monkeypatch.setattr(common.out, "_file", io.StringIO())
        answer = {"objective": "time", "plans": [plan(1), plan(2, dp=4, cp=2)], "pareto": [],
                  "search": {"candidates_evaluated": 2, "elapsed_s": 0.1, "feasible": 2,
                             "truncated": False}}
        cli_plan.render_plans(answer)
        assert calls == [2]
        assert not hasattr(cli_plan, "_plan_figures")  # no second copy of the rule


class TestLineReasons:
    def test_every_rule_code_has_words(self) -> None:
        assert set(RULE_CODES) <= set(fmt.RULE_LABELS)
        assert fmt.rule_label("stale_price") == "price older than the policy allows"
        assert fmt.rule_label("some_new_code") == "some new code"

    def test_failures_come_first_by_outcome_not_by_message(self) -> None:
        line = {"rules": [
            {"code": "assumed_interruption_rate", "outcome": "warn", "message": "fail: x"},
            {"code": "within_budget", "outcome": "pass", "message": "warn"},
            {"code": "spot_capacity_unverified", "outcome": "fail", "message": "warning: y"}]}
        assert [r["code"] for r in fmt.line_reasons(line)] == [
            "spot_capacity_unverified", "assumed_interruption_rate"]
        assert fmt.line_reasons({"rules": []}) == []


def estimate(*, low: float = 80_000.0, high: float = 125_000.0) -> dict[str, Any]:
    return {"time": {"step_s": 2.0, "tokens_per_s": 100_000.0, "tokens_per_s_low": low,
                     "tokens_per_s_high": high, "train_s": 86_400.0 * 10},
            "memory": {}, "energy": {}}


def _band_of(svg: str) -> tuple[ET.Element, ET.Element]:
    root = ET.fromstring(svg)  # noqa: S314 - our own output
    groups = [g for g in root.iter(f"{SVG}g") if g.get("class") == "band"]
    labels = [t for t in root.iter(f"{SVG}text") if t.get("class") == "band-label"]
    assert len(groups) == 1
    assert len(labels) == 1
    return groups[0], labels[0]


class TestEstimateBand:
    def test_time_scales_with_tokens_per_s_over_the_band_s_end(self) -> None:
        band = fmt.estimate_band(estimate())
        assert band is not None
        assert band.step_s_low == pytest.approx(1.6)  # 2 s × 100k ÷ 125k: the fast end
        assert band.step_s_high == pytest.approx(2.5)
        assert band.train_s_low == pytest.approx(86_400 * 8)
        assert band.train_s_high == pytest.approx(86_400 * 12.5)

    @pytest.mark.parametrize("low", [0.0, -1.0, math.nan, math.inf])
    def test_no_band_without_positive_finite_ends(self, low: float) -> None:
        assert fmt.estimate_band(estimate(low=low)) is None
        assert _step_band(estimate(low=low)) is None

    def test_the_step_chart_draws_the_band_from_low_to_high_with_its_figures(self) -> None:
        band = _step_band(estimate())
        assert band is not None
        svg = charts.stacked_bar("s", "Step time breakdown", [
            charts.Part("compute", 1.5), charts.Part("comm", 0.5)], unit="seconds per step",
            band=band)
        group, label = _band_of(svg)
        shade = next(r for r in group.iter(f"{SVG}rect") if r.get("class") == "band-range")
        x, width = float(shade.get("x", "nan")), float(shade.get("width", "nan"))
        assert width > 0  # low < high
        bars = [r for r in ET.fromstring(svg).iter(f"{SVG}rect")  # noqa: S314 - our own output
                if r.get("height") == "34"]
        left, total = float(bars[0].get("x", "nan")), sum(float(b.get("width", 0))
                                                          for b in bars)
        per_s = total / 2.0  # the bar is the 2 s step
        assert x == pytest.approx(left + 1.6 * per_s, abs=0.1)
        assert x + width == pytest.approx(left + 2.5 * per_s, abs=0.1)
        text = "".join(label.itertext())
        for figure in ("1.60 s", "2.50 s", "80,000", "125,000", "8.0 days", "12.5 days"):
            assert figure in text
        assert group.get("aria-label") == band.label
        assert group.find(f"{SVG}title").text == band.label  # type: ignore[union-attr]
        description = ET.fromstring(svg).find(f"{SVG}desc").text or ""  # noqa: S314
        assert band.label in description

    @pytest.mark.parametrize("end", [1e308, math.inf, math.nan])
    def test_an_extreme_band_keeps_every_coordinate_finite(self, end: float) -> None:
        svg = charts.stacked_bar("s", "t", [charts.Part("compute", 1.0)], unit="seconds",
                                 band=charts.Band(low=0.5, high=end, label="80% band"))
        root = ET.fromstring(svg)  # noqa: S314 - our own output
        for element in root.iter():
            for key in ("x", "y", "x1", "x2", "y1", "y2", "width", "height"):
                value = element.get(key)
                if value is not None and not value.endswith("%"):  # the svg's width="100%"
                    assert math.isfinite(float(value)), (element.tag, key, value)
        drawn = [g for g in root.iter(f"{SVG}g") if g.get("class") == "band"]
        assert len(drawn) == (1 if math.isfinite(end) else 0)  # NaN and inf: not drawn
        assert any(t.get("class") == "band-label" for t in root.iter(f"{SVG}text"))

    def test_a_band_out_of_order_is_not_drawn(self) -> None:
        svg = charts.stacked_bar("s", "t", [charts.Part("compute", 1.0)], unit="seconds",
                                 band=charts.Band(low=2.0, high=1.0, label="80% band"))
        assert 'class="band"' not in svg
