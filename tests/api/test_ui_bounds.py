"""The portal's bounds (issue 36): a page's charts and template are drawn off the event loop
within ``CQ_SEARCH_DEADLINE_S``; every money field is checked against the API's rule before
any arithmetic; numbers beyond a float, and products that overflow, reach the API as
numbers it refuses naming the field and its limit, never as a 500."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.api.ui import charts
from service.api.ui import common as ui_common
from service.api.ui import serve as ui_serve
from service.api.ui import train as ui_train
from service.catalog.models import Quote
from tests.api.test_ui import FORM, error_of

WAIT_S = 60.0
"""How long a test waits for something that a correct implementation does in milliseconds:
a wait, not a speed test."""
BEYOND = ["inf", "-inf", "Infinity", "1e308", "1e400", "9" * 400, "NaN", "-1", "1e-300",
          "2.5.0", "1,2,3e9"]
"""Money values the API refuses (issue 36: 500 on the Estimate form's cost)."""
PRICES_BEYOND = [*BEYOND, "1000000.000001", "9999999999999"]
"""And prices above the API's 1,000,000 per GPU-hour."""


class _Stuck:
    """A chart that blocks until released (at most ``WAIT_S``): a stand-in for drawing
    that never ends, such as the axis loop of issue 36."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, *_args: Any, **_kwargs: Any) -> str:
        self.entered.set()
        self.release.wait(WAIT_S)
        return "<svg/>"


def _in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: box.update(answer=call()), daemon=True)
    thread.start()
    return thread, box


def test_livez_answers_while_a_page_is_being_drawn(
        app_with: Callable[..., TestClient], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: the charts were drawn on the event loop, so one page that never finished
    drawing froze every other request. They are drawn in a worker thread now."""
    client = app_with()
    stuck = _Stuck()
    monkeypatch.setattr(charts, "stacked_bar", stuck)
    page, page_box = _in_thread(lambda: client.post("/ui", data={**FORM, "action": "estimate"}))
    try:
        assert stuck.entered.wait(WAIT_S), "the page never started drawing"
        probe, probe_box = _in_thread(lambda: client.get("/livez"))
        probe.join(WAIT_S / 2)
        assert not probe.is_alive(), "/livez did not answer while a page was being drawn"
        assert probe_box["answer"].status_code == 200
        assert page.is_alive()  # the page was still drawing all along
    finally:
        stuck.release.set()
        page.join(WAIT_S)
    assert page_box["answer"].status_code == 200


def test_a_page_that_overruns_the_deadline_is_503_and_the_replica_lives_on(
        app_with: Callable[..., TestClient], monkeypatch: pytest.MonkeyPatch) -> None:
    client = app_with(search_deadline_s=0.5)
    stuck = _Stuck()
    monkeypatch.setattr(charts, "stacked_bar", stuck)
    try:
        page, box = _in_thread(lambda: client.post("/ui", data={**FORM, "action": "estimate"}))
        page.join(WAIT_S)
        assert not page.is_alive(), "the page did not answer at its deadline"
        answer = box["answer"]
        assert answer.status_code == 503
        assert answer.headers["retry-after"] == "1"
        assert "not drawn within 0.5 s (CQ_SEARCH_DEADLINE_S)" in answer.text
        assert stuck.entered.is_set()
        assert not stuck.release.is_set()  # still stuck
        assert client.get("/livez").status_code == 200
    finally:
        stuck.release.set()


@pytest.mark.parametrize("price", PRICES_BEYOND)
@pytest.mark.parametrize("action", ["estimate", "optimise"])
def test_a_price_the_api_refuses_is_422_naming_the_limit(client: TestClient, price: str,
                                                          action: str) -> None:
    """Issue 36: inf, -inf, 1e308, 1e400 or 400 nines as the Estimate form's price answered
    500 (a Decimal quantize overflow), and NaN or -1 showed a cost of NaN or below zero."""
    response = client.post("/ui", data={**FORM, "action": action,
                                        "price_per_gpu_hour": price})
    assert response.status_code == 422, response.text[:300]
    assert error_of(response.text, "price_per_gpu_hour") == ui_common.AMOUNT_MESSAGES[
        "price_per_gpu_hour"]
    assert "at most 1,000,000 per GPU-hour" in ui_common.AMOUNT_MESSAGES["price_per_gpu_hour"]
    assert "<svg" not in response.text  # nothing was worked out


@pytest.mark.parametrize("price", PRICES_BEYOND)
def test_the_serve_tabs_price_is_the_same_rule(client: TestClient, price: str) -> None:
    response = client.post("/ui/serve", data={"price_per_gpu_hour": price})
    assert response.status_code == 422, response.text[:300]
    assert error_of(response.text, "price_per_gpu_hour") == ui_common.AMOUNT_MESSAGES[
        "price_per_gpu_hour"]


@pytest.mark.parametrize("budget", ["inf", "1e308", "9" * 400, "-5"])
def test_a_budget_the_api_refuses_is_named_before_anything_is_stored(
        client: TestClient, api_key: Callable[..., dict[str, str]], db_session: Session,
        budget: str) -> None:
    key = api_key("quotes:write")["Authorization"].split()[1]
    before = db_session.scalar(select(func.count()).select_from(Quote))
    for path, data in (("/ui", {**FORM, "action": "quote"}),
                       ("/ui", {**FORM, "action": "budget_plan"}),
                       ("/ui/serve", {"action": "quote"})):
        response = client.post(path, data={**data, "budget": budget, "api_key": key})
        assert response.status_code == 422, (path, response.text[:300])
        assert error_of(response.text, "budget") == ui_common.AMOUNT_MESSAGES["budget"]
    assert db_session.scalar(select(func.count()).select_from(Quote)) == before


def test_a_price_with_commas_is_read_as_the_number(client: TestClient) -> None:
    plain = client.post("/ui", data={**FORM, "action": "estimate",
                                     "price_per_gpu_hour": "1000.50"})
    commas = client.post("/ui", data={**FORM, "action": "estimate",
                                      "price_per_gpu_hour": "1,000.50"})
    assert plain.status_code == commas.status_code == 200
    assert "1000.50 USD per GPU-hour as given" in commas.text


def test_a_cost_beyond_the_cap_is_shown_as_above_it() -> None:
    """The largest price over 1e18 tokens' GPU-hours would not fit ``Decimal``'s 28 digits
    to the cent (a 500): above ``MAX_SHOWN_COST_USD`` the page says it is above it."""
    price = ui_common._amount("budget", "9999999999999.999999")  # a price never this high
    assert price is not None
    assert ui_train._cost(1e15, price) == {"cost_over": str(ui_train.MAX_SHOWN_COST_USD)}
    assert ui_train._cost(1.7e308, price) == {"cost_over": str(ui_train.MAX_SHOWN_COST_USD)}
    assert ui_train._cost(1e11, price) == {"cost": "999999999999999999900000.00"}  # 26 digits
    assert ui_train._cost(1000.0, Decimal("2.50")) == {"cost": "2500.00"}
    assert ui_train._cost(float("nan"), price) == {}


@pytest.mark.parametrize(("field", "action", "message"), [
    ("deadline_days", "optimise", "100000000000 s (1,157,407 days)"),
    ("deadline_days", "budget_plan", "10000000000 s (115,741 days)"),
])
@pytest.mark.parametrize("value", ["1e308", "inf", "1e400"])
def test_days_that_overflow_seconds_name_the_limit_in_days(
        client: TestClient, field: str, action: str, message: str, value: str) -> None:
    """Issue 36: 1e308 days is inf seconds, which httpx cannot send as JSON (a 500)."""
    response = client.post("/ui", data={**FORM, "action": action, field: value,
                                        "objective": "cost_deadline"})
    assert response.status_code == 422, response.text[:300]
    assert error_of(response.text, field) == f"Input should be less than or equal to {message}"


@pytest.mark.parametrize("value", ["1e308", "inf", "1e400", "-1e308"])
def test_months_that_overflow_seconds_name_the_limit(client: TestClient,
                                                     api_key: Callable[..., dict[str, str]],
                                                     value: str) -> None:
    key = api_key("quotes:write")["Authorization"].split()[1]
    response = client.post("/ui/serve", data={"action": "quote", "duration_months": value,
                                              "api_key": key})
    assert response.status_code == 422, response.text[:300]
    error = error_of(response.text, "duration_months")
    assert error.startswith(("Input should be at most 120 months", "Input should be greater")), \
        error


def test_scaled_numbers_stay_finite() -> None:
    assert ui_common._days_as_s("1e308") == sys.float_info.max
    assert ui_common._days_as_s("-1e308") == -sys.float_info.max
    assert ui_common._days_as_s("2") == 2 * 86_400
    assert ui_serve._months_as_s("lots") == "lots"
    assert ui_common._number("NaN") == "NaN"
    assert ui_common._number("1e400") == sys.float_info.max
    assert ui_common._number("-inf") == -sys.float_info.max
