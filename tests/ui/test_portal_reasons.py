"""Issue 41, item 8, in the browser: what the portal hid is on screen. A quote line's coded
reason is in its row within a 1366 px laptop screen (the Flags column is past its edge), the
Optimise table shows each plan once (permutations with identical figures folded, as in
``cq optimise``), and the estimate's chart draws the 80% band with the API's figures.

The server, browser and page fixtures are tests/ui/test_browser.py's."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page

from service.api import presentation as fmt
from service.api.ui.train import _values, estimate_body
from tests.ui import test_browser as shared
from tests.ui.test_browser import LAPTOP, _priced_sweep, shot

# test_browser.py's fixtures, found by pytest under these names (each module its own server).
server = shared.server
browser = shared.browser
page = shared.page
screen = shared.screen


def _quote(page: Page, key: str) -> None:
    shared._quote_in_the_portal(page, key)


def test_a_failing_line_shows_its_coded_reason_on_a_laptop_screen(
        page: Page, server: tuple[str, str]) -> None:
    _quote(page, server[1])
    quote_id = page.inner_text("#result-heading code").strip()
    stored = httpx.get(f"{server[0]}/v1/quotes/{quote_id}",
                       headers={"Authorization": f"Bearer {server[1]}"}).json()
    region = page.locator("#per-term").locator("xpath=..").bounding_box()
    assert region is not None
    failing = 0
    for line in stored["cheapest_per_term"].values():
        for rule in line["rules"]:
            if rule["outcome"] not in ("fail", "warn"):
                continue
            failing += rule["outcome"] == "fail"
            reason = page.locator(f"#per-term .reason[data-code={rule['code']}]").first
            assert reason.is_visible(), rule["code"]
            box = reason.bounding_box()
            assert box is not None
            # On screen without scrolling sideways: inside the viewport and the table's region.
            assert box["x"] >= 0, rule["code"]
            assert box["x"] + box["width"] <= LAPTOP["width"], (rule["code"], box)
            assert box["x"] + box["width"] <= region["x"] + region["width"], (rule["code"], box)
            text = reason.inner_text()
            assert rule["code"] in text
            assert fmt.rule_label(rule["code"]) in text
            assert rule["outcome"] in text
    assert failing >= 1  # the seeded catalogue has lines that fail (spot capacity, budget)
    shot(page, "ui-quote-reasons-laptop")


def _figures(row: list[str]) -> tuple[str, ...]:
    """A ranked plan row's figures: GPUs, time, GPU-hours, MFU, memory and cost (the rank and
    the layout left out)."""
    return (row[1], *row[3:8])


def test_the_optimise_table_shows_each_plan_once(page: Page,
                                                server: tuple[str, str]) -> None:
    _priced_sweep(page)
    page.click("button[value=optimise]")
    page.wait_for_selector("#ranked")
    rows = [[cell.inner_text() for cell in row.locator("td").all()]
            for row in page.locator("#ranked tbody tr").all()]
    figures = [_figures(row) for row in rows]
    assert len(set(figures)) == len(figures), figures  # no two rows alike
    folded = [int(tag.get_attribute("data-alike") or 0)
              for tag in page.locator("#ranked .alike").all()]
    assert folded  # the sweep's best plans have permutations with the same figures
    assert all(f"(+{n} alike)" in " ".join(row) for n, row in zip(
        folded, (r for r in rows if "alike)" in r[2]), strict=True))
    answer = httpx.post(f"{server[0]}/v1/parallelism-plans", timeout=120, json={
        "model": {"preset": "llama3.1-70b"},
        "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 2e12},
        "cluster": {"accelerator": "h100-sxm5-80gb",
                    "num_gpus_range": {"start": 128, "stop": 1024, "step": 128}},
        "top_k": 30, "objective": "time",
        "constraints": {"price_per_gpu_hour_usd": "2.40"}}).json()
    if len(rows) < 15:  # every plan is shown: each in its own row or folded into one
        assert len(rows) + sum(folded) == len(answer["plans"])
    assert rows[0][0] == "1"
    assert fmt.layout(answer["plans"][0]["parallelism"], short=True) in rows[0][2]
    shot(page, "ui-optimise-folded")


def test_the_estimate_chart_draws_the_80_percent_band(screen: tuple[str, Page],
                                                      server: tuple[str, str]) -> None:
    name, page = screen
    page.goto("/ui")
    page.click("button[value=estimate]")
    page.wait_for_selector("#figures")
    answer = httpx.post(f"{server[0]}/v1/estimates", json=estimate_body(_values({}))).json()
    time = answer["time"]
    tps, low, high = time["tokens_per_s"], time["tokens_per_s_low"], time["tokens_per_s_high"]
    assert low < high
    label = page.locator("svg[role=img]:visible .band-label")
    assert label.count() == 1  # on the step-time chart, in the drawing the screen shows
    assert label.is_visible()
    text = label.text_content() or ""
    for figure in (fmt.number(low), fmt.number(high),
                   fmt.duration(time["train_s"] * tps / high),
                   fmt.duration(time["train_s"] * tps / low),
                   fmt.duration(time["step_s"] * tps / high),
                   fmt.duration(time["step_s"] * tps / low)):
        assert figure in text, (figure, text)
    box = label.bounding_box()
    viewport = page.viewport_size
    assert box is not None
    assert viewport is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= viewport["width"]
    shade = page.locator("svg[role=img]:visible .band-range")
    drawn = shade.bounding_box()
    assert drawn is not None
    assert drawn["width"] > 0  # from the fast end to the slow end
    group = page.locator("svg[role=img]:visible g.band")
    assert (group.get_attribute("aria-label") or "").startswith("80% band: ")
    assert group.locator("title").text_content() == group.get_attribute("aria-label")
    shot(page, f"ui-estimate-band-{name}")
