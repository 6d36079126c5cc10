"""A real browser on /ui: Debian's chromium driven by Playwright (no downloaded browser).

It fills the form, submits, and checks that the API's figures and the SVG charts appear; that
errors show next to their fields; that Tab walks the form in reading order; that text meets
WCAG AA contrast; and that a laptop screen needs no sideways scrolling. Screenshots are saved
under ``test-artifacts/`` (``CQ_TEST_ARTIFACTS``) for CI to keep.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from service.api import presentation as fmt
from service.settings import Settings
from tests.factories import date_offers_at, seeded_database_with_key
from tests.live_server import live_server

CHROMIUM = Path(os.environ.get("CQ_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = Path(os.environ.get("CQ_TEST_ARTIFACTS", "test-artifacts"))
LAPTOP = {"width": 1366, "height": 768}
PHONE = {"width": 390, "height": 844}
SCREENS = {"laptop": LAPTOP, "phone": PHONE}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('ui')}/ui.sqlite3"
    key = seeded_database_with_key(url, name="portal", scopes=["quotes:write", "quotes:read"])
    date_offers_at(url)  # a refreshed catalogue: budget plans list lines no rule fails
    with live_server(Settings(database_url=url, search_workers=0, log_level="warning")) as base:
        yield base, key


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install "
                    "chromium), or set CQ_CHROMIUM")
    with sync_playwright() as playwright:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=args)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, server: tuple[str, str]) -> Iterator[Page]:
    context = browser.new_context(viewport=LAPTOP, base_url=server[0])
    opened = context.new_page()
    yield opened
    context.close()


def shot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def test_estimate_shows_figures_and_charts(page: Page, server: tuple[str, str]) -> None:
    page.goto("/ui")
    page.select_option("#f-model", "llama3.1-70b")
    page.fill("#f-tokens", "15e12")
    page.select_option("#f-accelerator", "h100-sxm5-80gb")
    page.fill("#f-gpus", "512")
    page.click("button[value=estimate]")
    page.wait_for_selector("#figures")
    api = httpx.post(server[0] + "/v1/estimates", json={
        "model": {"preset": "llama3.1-70b"},
        "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 512},
        "parallelism": {"tp": 8, "pp": 4, "cp": 1, "micro_batch": 1, "zero_stage": 1,
                        "recompute": "none"},
        "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 15e12}}).json()
    figures = page.inner_text("#figures")
    assert fmt.duration(api["time"]["train_s"]) in figures
    assert fmt.number(api["time"]["gpu_hours"]) in figures
    assert fmt.percent(api["time"]["mfu_fraction"]) in figures
    assert "USD" in figures  # priced at the cheapest on-demand offer
    charts = page.locator("svg[role=img]:visible")  # each drawn wide and narrow; one shows
    assert charts.count() == 2
    box = charts.first.bounding_box()
    assert box is not None
    assert box["width"] > 400
    assert page.locator("#estimate-memory title").first.text_content() == "Memory per GPU"
    path = shot(page, "ui-estimate")
    assert path.stat().st_size > 20_000


def _priced_sweep(page: Page) -> None:
    """The portal with a 128-1,024 GPU sweep at 2.40 USD per GPU-hour filled in."""
    page.goto("/ui")
    page.fill("#f-tokens", "2e12")
    page.fill("#f-gpus_min", "128")
    page.fill("#f-gpus_max", "1024")
    page.fill("#f-gpus_step", "128")
    page.fill("#f-price_per_gpu_hour", "2.40")


def test_optimise_draws_the_pareto_scatter(page: Page) -> None:
    _priced_sweep(page)
    page.click("button[value=optimise]")
    page.wait_for_selector("#pareto")
    assert page.locator("#pareto polygon").count() == 1  # the recommended plan's star
    assert "cost (USD)" in (page.text_content("#pareto") or "")
    shot(page, "ui-optimise")


def test_quote_shows_the_verdict_and_links_to_its_json(page: Page,
                                                       server: tuple[str, str]) -> None:
    page.goto("/ui")
    page.fill("#f-budget", "250000")
    page.fill("#f-providers", "aws, onprem")
    page.fill("#f-api_key", server[1])
    page.fill("#f-tokens", "1e11")
    page.click("button[value=quote]")
    page.wait_for_selector("#verdict")
    assert re.search(r"Budget verdict: (approve|reject)", page.inner_text("#verdict"))
    assert page.locator("#per-term tbody tr").count() >= 1
    figures = page.inner_text("#quote-figures")
    assert figures.index("Commitment") < figures.index("Job cost")
    shot(page, "ui-quote")
    href = page.get_attribute("text=its JSON", "href")
    assert href is not None
    assert href.startswith("/v1/quotes/q_")
    page.click("text=its JSON")  # a stored quote is its owner's: a browser without the key
    assert "401" in page.inner_text("body") or "API key" in page.inner_text("body")
    stored = httpx.get(server[0] + href,
                       headers={"Authorization": f"Bearer {server[1]}"}).json()
    assert stored["id"] == href.rsplit("/", 1)[1]
    assert stored["verdict"] in ("approve", "reject")


def test_the_stored_quote_is_an_audit_document(page: Page, server: tuple[str, str]) -> None:
    page.goto("/ui")
    page.fill("#f-budget", "250000")
    page.fill("#f-providers", "aws, onprem")
    page.fill("#f-api_key", server[1])
    page.fill("#f-tokens", "1e11")
    page.click("button[value=quote]")
    page.wait_for_selector("#verdict")
    href = page.get_attribute("text=its audit page", "href")
    assert href is not None
    page.goto(href.split("?", 1)[0])  # the link without its signed token (issue 41)
    page.wait_for_selector("#open")  # the quote is its owner's: the page asks for the key
    page.fill("#api_key", server[1])
    page.click("#open")
    page.wait_for_selector("#commitment-figures")
    # No workload form: only the verify form's key field.
    assert page.locator("input:not([type=hidden]), select").count() == 1
    assert page.locator("h1").count() == 1
    stored = httpx.get(server[0] + page.url.replace("/ui/quotes/", "/v1/quotes/")
                       .removeprefix(server[0]),
                       headers={"Authorization": f"Bearer {server[1]}"}).json()
    provenance = page.inner_text("#provenance")
    assert stored["catalog_content_hash"] in provenance.replace("\n", "")
    assert stored["estimator_version"] in provenance
    figures = page.inner_text("#commitment-figures")
    assert figures.index("Commitment") < figures.index("Job cost") < figures.index("Budget")
    assert page.locator("#lines-table tbody tr").count() == len(stored["lines"])
    shot(page, "ui-stored-quote")
    pairs = _colours(page, "header p, h2, dt, dd, th, td, caption, .outcome, code, a, button, "
                           "summary, p")
    assert len(pairs) > 80
    assert _low_contrast(pairs) == []
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= LAPTOP["width"]
    page.fill("#verify_key", server[1])
    page.click("#verify")
    page.wait_for_selector("#verification")
    assert "matches the stored quote" in page.inner_text("#verification")


def test_errors_appear_next_to_their_fields(page: Page) -> None:
    page.goto("/ui")
    page.fill("#f-tokens", "a lot")
    page.fill("#f-gpus", "0")
    page.click("button[value=estimate]")
    error = page.locator("#e-tokens")
    error.wait_for()
    assert error.inner_text() == "Input should be a valid number"
    assert "greater than or equal to 1" in page.inner_text("#e-gpus")
    assert page.get_attribute("#f-tokens", "aria-describedby") == "h-tokens e-tokens"
    shot(page, "ui-errors")


def test_tab_walks_the_form_in_reading_order(page: Page) -> None:
    page.goto("/ui")
    expected = page.evaluate("""() => [...document.querySelectorAll(
        'a[href], input:not([type=hidden]), select, button')].map(e => e.id || e.value ||
        e.getAttribute('href'))""")
    order = []
    for _ in range(len(expected)):
        page.keyboard.press("Tab")
        order.append(page.evaluate("""() => { const e = document.activeElement;
            return e.id || e.value || e.getAttribute('href'); }"""))
    assert order == expected
    assert order[0] == "#results"  # the skip link comes first
    assert order.index("f-model") < order.index("f-tokens") < order.index("f-api_key")
    assert order[-5:] == ["estimate", "optimise", "quote", "budget_plan", "largest_model"]


def _plan_form(page: Page, budget: str) -> None:
    page.goto("/ui")
    page.select_option("#f-model", "llama3.1-8b")
    page.fill("#f-tokens", "1e11")
    page.fill("#f-gpus_min", "8")
    page.fill("#f-gpus_max", "32")
    page.fill("#f-gpus_step", "8")
    page.fill("#f-providers", "aws")
    page.fill("#f-budget", budget)
    page.fill("#f-deadline_days", "60")


def test_budget_plan_and_largest_model(page: Page) -> None:
    _plan_form(page, "200000")
    page.click("button[value=budget_plan]")
    page.wait_for_selector("#plan-figures")
    headers = page.locator("#soonest thead th").all_inner_texts()
    assert headers[:2] == ["Commitment", "Job cost"]
    assert page.locator("#soonest tbody tr").count() >= 1
    assert page.locator("#cheapest tbody tr").count() >= 1
    shot(page, "ui-budget-plan")
    pairs = _colours(page, "h2, h3, dt, dd, th, td, .outcome, .note, p, button, label, small")
    assert _low_contrast(pairs) == []
    assert page.evaluate("() => document.documentElement.scrollWidth") <= LAPTOP["width"]

    _plan_form(page, "10")
    page.click("button[value=budget_plan]")
    page.wait_for_selector("#plan-explanation")
    assert "Nothing fits the budget" in page.inner_text("#plan-explanation")
    assert _low_contrast(_colours(page, "#plan-explanation *, p.empty")) == []

    _plan_form(page, "2000000")
    page.fill("#f-gpus_min", "256")
    page.fill("#f-gpus_max", "512")
    page.fill("#f-gpus_step", "256")
    page.fill("#f-candidate_models", "llama3.1-8b, llama3.1-70b")
    page.click("button[value=largest_model]")
    page.wait_for_selector("#largest-answer")
    assert "llama3.1-8b" in page.inner_text("#largest-answer")
    figures = page.inner_text("#largest-figures")
    assert figures.index("Commitment") < figures.index("Job cost")
    assert page.locator("#models-tried tbody tr").count() == 2
    shot(page, "ui-largest-model")
    pairs = _colours(page, "h2, h3, dt, dd, th, td, .note, p, caption")
    assert _low_contrast(pairs) == []
    assert page.evaluate("() => document.documentElement.scrollWidth") <= LAPTOP["width"]


def _luminance(rgb: tuple[float, ...]) -> float:
    """WCAG 2.1 relative luminance."""
    def channel(c: float) -> float:
        c = c / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (channel(c) for c in rgb[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _contrast(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    high, low = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def _colours(page: Page, selector: str) -> list[dict[str, Any]]:
    """Text and background colour of every element the selector matches."""
    pairs: list[dict[str, Any]] = page.evaluate("""selector => {
        const rgb = s => s.match(/[\\d.]+/g).map(Number);
        const background = e => { for (; e; e = e.parentElement) {
            const c = rgb(getComputedStyle(e).backgroundColor);
            if (c.length < 4 || c[3] > 0) return c; } return [255, 255, 255]; };
        return [...document.querySelectorAll(selector)]
          .map(e => ({what: e.tagName + '.' + e.className,
                      fg: rgb(getComputedStyle(e).color), bg: background(e)}));
    }""", selector)
    return pairs


def _low_contrast(pairs: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """Pairs under WCAG AA's 4.5:1."""
    return [(p["what"], round(_contrast(tuple(p["fg"]), tuple(p["bg"])), 2)) for p in pairs
            if _contrast(tuple(p["fg"]), tuple(p["bg"])) < 4.5]


def test_text_meets_wcag_aa_contrast_on_a_laptop_screen(page: Page) -> None:
    page.goto("/ui")
    page.fill("#f-tokens", "x")
    page.click("button[value=estimate]")
    page.locator("#e-tokens").wait_for()
    pairs = _colours(page, "label, small, .error, button, legend, header p, input, select, option")
    assert len(pairs) > 40
    assert _low_contrast(pairs) == []
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= LAPTOP["width"]


# Issue 18: the portal at a laptop's 1366x768 and a phone's 390x844.

@pytest.fixture(params=list(SCREENS))
def screen(request: pytest.FixtureRequest, browser: Browser,
           server: tuple[str, str]) -> Iterator[tuple[str, Page]]:
    """A page at each screen size, with the size's name (for screenshots)."""
    context = browser.new_context(viewport=SCREENS[request.param], base_url=server[0])
    opened = context.new_page()
    yield request.param, opened
    context.close()


def _overflow(page: Page) -> int:
    """How many CSS px the page is wider than its viewport (0: no sideways scrolling)."""
    width: int = page.evaluate(
        "() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    return width


def _legend_px(page: Page) -> list[float]:
    """The drawn height of every visible chart legend's text, in CSS px: its font size in
    the drawing's units times the scale the drawing is shown at."""
    sizes: list[float] = page.evaluate("""() => [...document.querySelectorAll('svg.chart')]
        .filter(svg => svg.getClientRects().length > 0)
        .flatMap(svg => {
            const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
            return [...svg.querySelectorAll('text.legend')].map(
                t => parseFloat(t.getAttribute('font-size')) * scale); })""")
    return sizes


def _focus(page: Page) -> dict[str, Any]:
    """The focused element's id and whether its top is on screen."""
    focused: dict[str, Any] = page.evaluate("""() => { const e = document.activeElement;
        const r = e.getBoundingClientRect();
        return {id: e.id, top: r.top, visible: r.top >= 0 && r.top < innerHeight}; }""")
    return focused


def test_a_result_takes_focus_reflows_and_never_scrolls_sideways(
        screen: tuple[str, Page]) -> None:
    name, page = screen
    page.goto("/ui")
    assert _overflow(page) == 0
    page.fill("#f-tokens", "15e12")
    page.fill("#f-gpus", "512")
    page.click("button[value=estimate]")
    page.wait_for_selector("#figures")
    focus = _focus(page)
    assert focus["id"] == "result-heading"
    assert 0 <= focus["top"] < SCREENS[name]["height"] / 3  # the answer's top, on screen
    assert _overflow(page) == 0
    legends = _legend_px(page)
    assert len(legends) >= 4  # the memory and step charts' legends, as shown
    assert min(legends) >= 11
    drawn = "narrow" if name == "phone" else "wide"
    assert page.locator(f".chart-{drawn} svg").first.is_visible()
    shot(page, f"ui-estimate-{name}")


def test_errors_are_summarised_at_the_top_and_take_focus(screen: tuple[str, Page]) -> None:
    name, page = screen
    page.goto("/ui")
    page.fill("#f-tokens", "a lot")
    page.fill("#f-gpus", "0")
    page.click("button[value=estimate]")
    page.wait_for_selector("#error-summary")
    focus = _focus(page)
    assert focus["id"] == "error-summary"
    assert focus["visible"]
    links = page.locator("#error-summary a")
    assert links.count() == 2
    assert links.first.inner_text() == "Training tokens: Input should be a valid number"
    assert _overflow(page) == 0
    assert _low_contrast(_colours(page, "#error-summary, #error-summary *")) == []
    shot(page, f"ui-error-summary-{name}")
    links.first.click()
    assert page.evaluate("() => location.hash") == "#f-tokens"


def test_a_layout_rule_speaks_the_users_language(page: Page) -> None:
    page.goto("/ui")
    page.fill("#f-gpus", "100")
    page.fill("#f-tp", "4")
    page.fill("#f-pp", "3")
    page.click("button[value=estimate]")
    page.wait_for_selector("#error-summary")
    assert ("GPU count (100) must be a multiple of TP×PP×CP = 4×3×1 = 12: try 96 or 108"
            in page.inner_text("#error-summary"))


def test_an_estimate_that_does_not_fit_says_so_first(screen: tuple[str, Page]) -> None:
    name, page = screen
    page.goto("/ui")
    page.select_option("#f-model", "llama3.1-405b")
    page.fill("#f-gpus", "8")
    page.fill("#f-tp", "8")
    page.fill("#f-pp", "1")
    page.click("button[value=estimate]")
    page.wait_for_selector("#does-not-fit")
    banner = page.locator("#does-not-fit").bounding_box()
    figures = page.locator("#figures").bounding_box()
    assert banner is not None
    assert figures is not None
    assert banner["y"] + banner["height"] <= figures["y"]  # said first
    muted = page.locator("#figures .muted dd")
    assert muted.count() == 3
    assert page.locator("#figures .muted dt").first.inner_text() == \
        "Training time (would not run)"
    # Muted, yet still readable (WCAG AA).
    assert _low_contrast(_colours(page, "#figures .muted dd, #does-not-fit *")) == []
    assert _overflow(page) == 0
    shot(page, f"ui-does-not-fit-{name}")


def test_a_plan_nobody_would_run_is_warned(screen: tuple[str, Page]) -> None:
    name, page = screen
    page.goto("/ui")
    page.fill("#f-tokens", "15e12")
    page.fill("#f-gpus", "64")
    page.fill("#f-tp", "4")
    page.fill("#f-pp", "4")
    page.click("button[value=estimate]")
    page.wait_for_selector("#impractical")
    assert "more than the 365-day limit" in page.inner_text("#impractical")
    banner = page.locator("#impractical").bounding_box()
    figures = page.locator("#figures").bounding_box()
    assert banner is not None
    assert figures is not None
    assert banner["y"] + banner["height"] <= figures["y"]  # said first, at either width
    assert _overflow(page) == 0
    shot(page, f"ui-impractical-{name}")


def test_optimise_for_cost_under_a_default_deadline(screen: tuple[str, Page]) -> None:
    name, page = screen
    _priced_sweep(page)
    page.select_option("#f-objective", "cost_deadline")
    page.click("button[value=optimise]")
    page.wait_for_selector("#objective-note")
    note = page.inner_text("#objective-note")
    assert "Ranked by cost (USD)" in note
    assert "default deadline of 90 days" in note
    assert _focus(page)["id"] == "result-heading"
    assert _overflow(page) == 0
    legends = _legend_px(page)
    assert min(legends) >= 11
    label = page.locator("svg.chart:visible text.x-label").first.text_content() or ""
    assert label.startswith("cost (USD)")
    ticks = page.evaluate("""() => [...document.querySelectorAll('svg.chart')]
        .filter(s => s.getClientRects().length && s.id.startsWith('pareto'))[0]
        .querySelectorAll('text[text-anchor=middle]')[0].textContent""")
    assert ticks == "0" or "not 0" in label  # a sensible zero, or it says it does not start at 0
    shot(page, f"ui-optimise-{name}")


def test_quote_terms_and_flags_carry_labels_with_the_id_in_a_tooltip(
        screen: tuple[str, Page], server: tuple[str, str]) -> None:
    name, page = screen
    page.goto("/ui")
    page.fill("#f-budget", "250000")
    page.fill("#f-providers", "aws, onprem")
    page.fill("#f-api_key", server[1])
    page.fill("#f-tokens", "1e11")
    page.click("button[value=quote]")
    page.wait_for_selector("#verdict")
    terms = page.locator("#per-term .term")
    assert terms.count() >= 2
    for i in range(terms.count()):
        raw = terms.nth(i).get_attribute("title") or ""
        assert raw in fmt.TERM_LABELS
        assert terms.nth(i).inner_text() == fmt.term_label(raw)
    assert "3-year reservation" in page.locator("#per-term").inner_text()
    assert "reserved_3y" not in page.locator("#per-term").inner_text()  # only in the tooltip
    flags = page.locator("#per-term .flags li[title]")
    if flags.count():
        raw = flags.first.get_attribute("title") or ""
        assert flags.first.inner_text().startswith(fmt.flag_label(raw))
    assert _overflow(page) == 0
    shot(page, f"ui-quote-{name}")


def test_budget_plan_never_scrolls_sideways_on_a_phone(browser: Browser,
                                                       server: tuple[str, str]) -> None:
    context = browser.new_context(viewport=PHONE, base_url=server[0])
    page = context.new_page()
    _plan_form(page, "200000")
    page.click("button[value=budget_plan]")
    page.wait_for_selector("#plan-figures")
    assert page.locator("#soonest .term").count() >= 1
    assert _overflow(page) == 0
    shot(page, "ui-budget-plan-phone")
    context.close()


def test_the_print_stylesheet_prints_the_answer_not_the_form(page: Page) -> None:
    page.goto("/ui")
    page.click("button[value=estimate]")
    page.wait_for_selector("#figures")
    page.emulate_media(media="print")
    assert not page.locator("form.workload").is_visible()
    assert not page.locator(".actions").is_visible()
    assert page.locator("#figures").is_visible()
    assert page.locator(".chart-wide svg").first.is_visible()
    assert not page.locator(".chart-narrow svg").first.is_visible()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    pdf = page.pdf(path=str(ARTIFACTS / "ui-estimate.pdf"))
    assert len(pdf) > 10_000


def test_the_serve_tab_charts_latency_against_throughput(screen: tuple[str, Page],
                                                         server: tuple[str, str]) -> None:
    """Issue 19: the Serve tab, reached from the Train tab; an error summary that takes focus,
    then the API's figures and a latency-against-throughput chart that reflows on a phone."""
    name, page = screen
    page.goto("/ui")
    page.click("nav.tabs >> text=Serve")
    page.wait_for_selector("#f-gpus_per_replica")
    assert page.get_attribute("nav.tabs a[aria-current=page]", "href") == "/ui/serve"
    assert _overflow(page) == 0
    page.fill("#f-tp", "0")
    page.click("button[value=serve]")
    page.wait_for_selector("#error-summary")
    focus = _focus(page)
    assert focus["id"] == "error-summary"
    assert focus["visible"]
    assert page.locator("#error-summary a").all_inner_texts() == [
        "Tensor parallel (TP): Input should be greater than or equal to 1"]
    assert _overflow(page) == 0
    page.fill("#f-tp", "4")
    page.fill("#f-price_per_gpu_hour", "2.50")
    page.click("button[value=serve]")
    page.wait_for_selector("#serve-figures")
    focus = _focus(page)
    assert focus["id"] == "result-heading"
    assert 0 <= focus["top"] < SCREENS[name]["height"] / 3
    api = httpx.post(server[0] + "/v1/serving-estimates", json={
        "model": {"preset": "llama3.1-70b"},
        "deployment": {"accelerator": "h100-sxm5-80gb", "gpus_per_replica": 4, "tp": 4,
                       "pp": 1, "weight_precision": "fp8", "kv_cache_precision": "fp8",
                       "engine": "trtllm", "max_batch": 256, "price_per_gpu_hour_usd": "2.50"},
        "traffic": {"mode": "online", "prompt_tokens": {"mean": 1024},
                    "output_tokens": {"mean": 256}, "requests_per_s": 10,
                    "slo": {"ttft_p99_s": 2.0, "tpot_p99_s": 0.1}}}).json()
    assert page.inner_text("#weights-per-gpu") == fmt.gib(api["memory"]["weights_bytes_per_gpu"])
    assert page.inner_text("#cost-per-m") == fmt.money(
        api["cost"]["usd_per_million_output_tokens"])
    assert page.locator("svg.chart:visible").count() == 2  # TTFT and TPOT, one drawing each
    points: list[list[float]] = page.evaluate("""() => [...[...document.querySelectorAll(
        'svg.chart')].filter(s => s.getClientRects().length && s.id.startsWith('serve-ttft'))
        [0].querySelectorAll('.point')].map(p => [+p.dataset.x, +p.dataset.y])""")
    assert len(points) == 10
    assert all(points[i][0] < points[i + 1][0] for i in range(9))  # throughput increases
    assert all(points[i][1] <= points[i + 1][1] for i in range(9))  # p99 TTFT never falls
    legends = _legend_px(page)
    assert len(legends) >= 6  # series, SLO and requested load on each chart
    assert min(legends) >= 11
    drawn = "narrow" if name == "phone" else "wide"
    assert page.locator(f"#ttft-chart .chart-{drawn} svg").is_visible()
    assert _overflow(page) == 0
    assert _low_contrast(_colours(page, "#serve-figures *, nav.tabs a, #latency *")) == []
    shot(page, f"ui-serve-{name}")


def _quote_in_the_portal(page: Page, key: str) -> str:
    """Quote a training run in the portal with ``key``; the stored quote's link it gives."""
    page.goto("/ui")
    page.fill("#f-budget", "250000")
    page.fill("#f-providers", "aws, onprem")
    page.fill("#f-api_key", key)
    page.fill("#f-tokens", "1e11")
    page.click("button[value=quote]")
    page.wait_for_selector("#verdict")
    href = page.get_attribute("text=its audit page", "href")
    assert href is not None
    return href


def test_the_stored_quote_link_opens_the_quote_without_the_key(
        screen: tuple[str, Page], server: tuple[str, str]) -> None:
    """Issue 41: the link of the page a quote is made on opened a red 'Sign-in needed
    (401)'; it is signed now, for CQ_QUOTE_LINK_TTL_S. On a phone the quote's id in the
    heading made the page 536 px wide in 390; it wraps."""
    name, page = screen
    href = _quote_in_the_portal(page, server[1])
    assert re.fullmatch(r"/ui/quotes/q_[0-9a-f]{32}\?t=[0-9]+\.[A-Za-z0-9_-]{43}\.portal", href)
    assert server[1] not in href
    page.click("text=its audit page")
    page.wait_for_selector("#commitment-figures")
    assert page.locator("#open").count() == 0  # no key form: the link was enough
    assert page.locator(".errors").count() == 0
    quote_id = href.split("?", 1)[0].rsplit("/", 1)[1]
    stored = httpx.get(f"{server[0]}/v1/quotes/{quote_id}",
                       headers={"Authorization": f"Bearer {server[1]}"}).json()
    assert page.inner_text("#verdict") == f"Verdict: {stored['verdict']}"
    assert page.inner_text("h1") == f"Quote {quote_id}"
    scroll_width, viewport = page.evaluate(
        "() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll_width <= viewport == SCREENS[name]["width"]
    shot(page, f"ui-stored-quote-link-{name}")


def test_an_expired_link_asks_for_the_key_and_fits_a_phone(browser: Browser,
                                                           server: tuple[str, str]) -> None:
    """The 401 page an expired link lands on names the quote and says why, with no sideways
    scroll at 390 px; the key opens the quote from it."""
    import time

    from service.api.ui.links import LinkSigner  # the server's settings: the default pepper

    context = browser.new_context(viewport=PHONE, base_url=server[0])
    page = context.new_page()
    path = _quote_in_the_portal(page, server[1]).split("?", 1)[0]
    quote_id = path.rsplit("/", 1)[1]
    signer = LinkSigner.from_settings(Settings())
    an_hour_ago = int(time.time()) - 3600
    page.goto(f"{path}?t={signer.token(quote_id, 'portal', an_hour_ago)}")
    page.wait_for_selector("#open")
    assert page.inner_text("h1") == "Sign-in needed"
    assert page.inner_text("#error-quote") == f"Quote {quote_id}"
    assert "This link expired" in page.inner_text(".errors")
    scroll_width, viewport = page.evaluate(
        "() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll_width <= viewport == PHONE["width"]
    shot(page, "ui-stored-quote-link-refused-phone")
    page.fill("#api_key", server[1])
    page.click("#open")
    page.wait_for_selector("#commitment-figures")
    assert _overflow(page) == 0
    context.close()
