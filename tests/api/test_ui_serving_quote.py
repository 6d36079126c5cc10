"""The Serve tab's "Quote this fleet" (issue 19): the form's serving estimate, held for the
duration in months, is quoted through POST /v1/quotes in process. The page shows the API's
verdict and amounts (commitment first), the fleet, the cheapest line per term and links to
the stored quote; errors go in the error summary; a resubmitted page replays its quote."""

from __future__ import annotations

import re
import uuid
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from markupsafe import escape
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.api import presentation as fmt
from service.api.schemas.serving import SERVING_EXAMPLE
from service.api.ui import common as ui_common
from service.api.ui import serve as ui_serve
from service.catalog.models import Quote
from tests.api.test_quotes_api import all_lines
from tests.api.test_ui import FORM, error_of, parse
from tests.api.test_ui_serving import _summary
from tests.factories import date_offers

YEAR_S = 31_557_600  # 12 months of 365.25 / 12 days: 365.25 x 86,400 s
QUOTE_FORM = {"action": "quote", "providers": "aws, gcp, lambda",
              "terms": "on_demand, reserved_1y, reserved_3y"}
"""The issue's example deployment (the form's defaults) quoted for the default 12 months."""
QUOTE_ID = re.compile(r'href="/v1/quotes/(q_[0-9a-f]{32})"')


@pytest.fixture
def key(api_key: Any) -> str:
    header: str = api_key("quotes:write", "quotes:read")["Authorization"]
    return header.split()[1]


def _quote_id(html: str) -> str:
    match = QUOTE_ID.search(html)
    assert match, "no link to the stored quote"
    return match.group(1)


def _block(html: str, pattern: str, group: int = 0) -> str:
    """The first match of ``pattern`` (across lines), which must be there."""
    match = re.search(pattern, html, re.S)
    assert match, f"no {pattern}"
    return match.group(group)


def _figure(html: str, name: str) -> str:
    block = _block(html, r'id="quote-figures">(.*?)</dl>', 1)
    match = re.search(rf"<dt>{name}</dt><dd[^>]*>(.*?)</dd>", block, re.S)
    assert match, f"no figure {name}"
    return match.group(1)


def _quotes(session: Session) -> int:
    return session.scalar(select(func.count()).select_from(Quote)) or 0


def test_months_become_seconds_and_the_price_is_left_out() -> None:
    values = ui_serve._serve_values({**QUOTE_FORM, "price_per_gpu_hour": "2.50"})
    body = ui_serve.serving_quote_body(values)
    serving = body["workload"]["serving"]
    assert serving["duration_s"] == YEAR_S  # the default, 12 months
    # The estimate is the Serve form's, without the price a quote refuses.
    expected = {**SERVING_EXAMPLE, "deployment": {
        k: v for k, v in SERVING_EXAMPLE["deployment"].items() if k != "price_per_gpu_hour_usd"}}
    assert serving["estimate"] == expected
    assert body["providers"] == ["aws", "gcp", "lambda"]
    assert body["terms"] == ["on_demand", "reserved_1y", "reserved_3y"]
    assert "budget" not in body
    assert "deadline_s" not in body
    one = ui_serve.serving_quote_body(ui_serve._serve_values({"duration_months": "1"}))
    assert one["workload"]["serving"]["duration_s"] == 2_629_800  # 365.25 x 86,400 / 12
    assert "terms" not in one
    assert "providers" not in one
    half = ui_serve.serving_quote_body(ui_serve._serve_values({"duration_months": "1.5",
                                                               "budget": "1,000"}))
    assert half["workload"]["serving"]["duration_s"] == 3_944_700
    assert half["budget"] == {"amount": "1000", "currency": "USD"}


def test_the_form_has_the_quote_fields_and_a_nonce(client: TestClient) -> None:
    html = client.get("/ui/serve", params={"api_key": "cq_from_a_url"}).text
    page = parse(html)
    for name in ("duration_months", "budget", "currency", "providers", "terms", "api_key"):
        assert any(i["id"] == f"f-{name}" for i in page.inputs), name
        assert f"f-{name}" in page.labels
    assert re.search(r'<input id="f-duration_months" name="duration_months" type="text" '
                     r'value="12"', html)
    assert re.search(r'<input type="hidden" name="nonce" value="[0-9a-f]{32}">', html)
    assert 'value="quote">Quote this fleet</button>' in html
    assert "cq_from_a_url" not in html  # a key is never taken from a URL


def test_the_page_shows_the_apis_quote_and_the_fleet(
        client: TestClient, db_session: Session, key: str) -> None:
    date_offers(db_session)
    sized = client.post("/v1/serving-estimates", json=SERVING_EXAMPLE).json()["sizing"]
    response = client.post("/ui/serve", data={**QUOTE_FORM, "api_key": key,
                                              "budget": "10000000"})
    assert response.status_code == 200, response.text[:2000]
    html = response.text
    quote_id = _quote_id(html)
    assert f'href="/ui/quotes/{quote_id}?t=' in html  # signed: it opens without the key
    headers = {"Authorization": f"Bearer {key}"}
    stored = client.get(f"/v1/quotes/{quote_id}", headers=headers).json()
    rec = stored["recommended"]
    # The amounts are the stored quote's, the commitment first.
    assert _figure(html, "Commitment") == fmt.money(rec["commitment_total"], rec["currency"])
    assert _figure(html, "Job cost") == fmt.money(rec["job_cost_total"], rec["currency"])
    assert _figure(html, "Budget") == "10,000,000.00 USD"
    figures = _block(html, r'id="quote-figures">(.*?)</dl>', 1)
    assert figures.index("Commitment") < figures.index("Job cost")
    assert f'Budget verdict: <strong>{stored["verdict"]}</strong>' in html
    # The fleet: the serving estimate's replicas of 4 H100 each, held for a year.
    fleet = rec["serving"]
    assert (fleet["replicas"], fleet["gpus_per_replica"]) == (sized["replicas"], 4)
    assert _figure(html, "Fleet").startswith(
        f"{sized['replicas']:,} × 4 h100-sxm5-80gb <small>")
    assert _figure(html, "Held for") == fmt.duration(YEAR_S) == "365.2 days"
    # The request stored is the form's body: the year in seconds, no price.
    row = db_session.get(Quote, quote_id)
    assert row is not None
    assert row.request["workload"]["serving"]["duration_s"] == YEAR_S
    deployment = row.request["workload"]["serving"]["estimate"]["deployment"]
    assert deployment.get("price_per_gpu_hour_usd") is None
    # The cheapest line per term, each with its fleet and amounts in the stored order.
    table = _block(html, r'<table id="per-term">.*?</table>')
    assert table.index('<th scope="col">Commitment</th>') < table.index(
        '<th scope="col">Job cost</th>')
    rows = re.findall(r"<tr><td><span class=\"term\"[^>]*data-id=\"([a-z_0-9]+)\".*?</tr>",
                      table, re.S)
    assert rows == list(stored["cheapest_per_term"])
    for line in stored["cheapest_per_term"].values():
        assert fmt.money(line["commitment_total"], line["currency"]) in table
        assert f"{line['serving']['replicas']:,} × 4 h100-sxm5-80gb" in table
    assert key not in html  # the key is never echoed
    assert 'id="serve-figures"' not in html  # the quote, not the estimate


def test_a_budget_one_cent_below_the_cheapest_line_is_rejected(
        client: TestClient, db_session: Session, key: str) -> None:
    date_offers(db_session)
    headers = {"Authorization": f"Bearer {key}"}
    form = {**QUOTE_FORM, "terms": "on_demand", "api_key": key}
    unjudged = client.post("/v1/quotes",
                           json=ui_serve.serving_quote_body(ui_serve._serve_values(form)),
                           headers={**headers, "Idempotency-Key": uuid.uuid4().hex}).json()
    cheapest = min(Decimal(x["total"]) for x in all_lines(client, unjudged, headers)
                   if x["feasible"])
    at = client.post("/ui/serve", data={**form, "budget": str(cheapest)})
    assert at.status_code == 200, at.text[:2000]
    at_quote = client.get(f"/v1/quotes/{_quote_id(at.text)}", headers=headers).json()
    assert at_quote["recommended"]["within_budget"] is True
    assert Decimal(at_quote["recommended"]["total"]) == cheapest
    assert at_quote["verdict"] == "approve", at_quote["reason_details"]
    assert "Budget verdict: <strong>approve</strong>" in at.text
    below = client.post("/ui/serve", data={**form, "budget": str(cheapest - Decimal("0.01"))})
    assert below.status_code == 200, below.text[:2000]
    html = below.text
    stored = client.get(f"/v1/quotes/{_quote_id(html)}", headers=headers).json()
    assert stored["verdict"] == "reject"
    assert 'class="verdict reject" id="verdict">Budget verdict: <strong>reject</strong>' in html
    assert _figure(html, "Budget") == fmt.money(str(cheapest - Decimal("0.01")), "USD")
    reasons = _block(html, r'<table id="reasons">.*?</table>')
    assert "<code>commitment_over_budget</code>" in reasons
    per_term = _block(html, r'<table id="per-term">.*?</table>')
    assert "<td>no</td>" in per_term
    assert "<td>yes</td>" not in per_term


def test_a_missing_key_is_named_in_the_summary_and_nothing_is_stored(
        client: TestClient, db_session: Session) -> None:
    before = _quotes(db_session)
    response = client.post("/ui/serve", data={**QUOTE_FORM, "api_key": "  "})
    assert response.status_code == 422
    html = response.text
    assert _summary(html) == [
        ("f-api_key", "API key: a quote is stored: give an API key with quotes:write")]
    assert "quotes:write" in error_of(html, "api_key")
    assert html.index('id="error-summary"') < html.index("<form")
    assert 'id="result-heading"' not in html
    assert _quotes(db_session) == before


def test_a_key_without_quotes_write_is_named_at_the_key(client: TestClient,
                                                       api_key: Any) -> None:
    reader = api_key("quotes:read")["Authorization"].split()[1]
    response = client.post("/ui/serve", data={**QUOTE_FORM, "api_key": reader})
    assert response.status_code == 422
    [(target, text)] = _summary(response.text)
    assert target == "f-api_key"
    assert "quotes:write" in text
    assert reader not in response.text


@pytest.mark.parametrize(("form", "field", "message"), [
    ({"duration_months": "0"}, "duration_months",
     "Duration (months): Input should be greater than 0"),
    ({"duration_months": "121"}, "duration_months",
     "Duration (months): Input should be at most 120 months (315,576,000 s)"),
    ({"duration_months": "a year"}, "duration_months",
     "Duration (months): Input should be a valid number"),
    ({"tp": "8"}, "gpus_per_replica",
     "GPUs per replica: tp x pp (8 x 1) must equal gpus_per_replica (4)"),
    ({"terms": "forever"}, "terms", "Terms: Input should be 'on_demand', 'spot', "
                                    "'reserved_1y', 'reserved_3y', 'capacity_block' or "
                                    "'onprem'"),
    ({"budget": "5", "currency": "ZZZ"}, "currency",
     "Currency: must be an ISO 4217 currency code in use (XXX and XTS are not)"),
])
def test_a_bad_quote_field_is_summarised_and_marked(
        client: TestClient, key: str, form: dict[str, str], field: str, message: str) -> None:
    response = client.post("/ui/serve", data={**QUOTE_FORM, "api_key": key, **form})
    assert response.status_code == 422
    html = response.text
    assert _summary(html) == [(f"f-{field}", str(escape(message)))]
    assert re.search(rf'id="f-{field}"[^>]*aria-invalid="true"', html, re.S)
    assert 'id="result-heading"' not in html


def test_a_deployment_that_misses_the_slo_is_the_apis_no_feasible_plan(
        client: TestClient, key: str) -> None:
    response = client.post("/ui/serve", data={**QUOTE_FORM, "api_key": key,
                                              "ttft_p99": "0.001"})
    assert response.status_code == 422
    summary = _block(response.text, r'<div class="error-summary".*?</div>')
    [(target, text)] = re.findall(r"<li>(?:<a href=\"#([^\"]+)\">)?([^<]*)", summary)
    assert target == ""  # no one field: the whole deployment
    assert "do not serve the load within the SLOs" in text
    assert "POST /v1/serving-plans finds one that does" in text


def test_a_deployment_that_does_not_fit_is_named_at_gpus_per_replica(
        client: TestClient, key: str) -> None:
    response = client.post("/ui/serve", data={
        **QUOTE_FORM, "api_key": key, "model": "llama3.1-405b", "weight_precision": "bf16",
        "gpus_per_replica": "1", "tp": "1"})
    assert response.status_code == 422
    [(target, text)] = _summary(response.text)
    assert target == "f-gpus_per_replica"
    assert "the deployment does not fit" in text


def test_a_double_submit_with_one_nonce_stores_one_quote(
        client: TestClient, db_session: Session, key: str) -> None:
    before = _quotes(db_session)
    form = {**QUOTE_FORM, "terms": "on_demand", "api_key": key, "nonce": uuid.uuid4().hex}
    first = client.post("/ui/serve", data=form)
    second = client.post("/ui/serve", data=form)
    assert first.status_code == second.status_code == 200, second.text[:2000]
    assert _quote_id(first.text) == _quote_id(second.text)
    assert _quotes(db_session) == before + 1
    # The page it answers carries a fresh nonce: submitting that page is a new quote.
    fresh = re.search(r'name="nonce" value="([0-9a-f]{32})"', second.text)
    assert fresh
    assert fresh.group(1) != form["nonce"]
    third = client.post("/ui/serve", data={**form, "nonce": fresh.group(1)})
    assert _quote_id(third.text) != _quote_id(first.text)
    assert _quotes(db_session) == before + 2


def test_an_unknown_action_is_400(client: TestClient) -> None:
    response = client.post("/ui/serve", data={"action": "<script>"})
    assert response.status_code == 400
    assert "<script>" not in response.text
    assert "choose Estimate serving or Quote this fleet" in response.text


def test_the_train_tabs_quote_is_the_shared_partial(client: TestClient, key: str) -> None:
    """The Quote result is one partial (``_quote_result.html``): for a training quote it
    renders the Train tab's quote markup, so the two tabs cannot drift apart."""
    response = client.post("/ui", data={**FORM, "api_key": key, "budget": "1000.00",
                                        "providers": "aws, onprem", "action": "quote"})
    assert response.status_code == 200, response.text[:2000]
    section = _block(response.text, r'<section id="results"[^>]*>(.*?)</section>', 1)
    quote = client.get(f"/v1/quotes/{_quote_id(response.text)}",
                       headers={"Authorization": f"Bearer {key}"}).json()
    partial: Any = ui_common.templates.get_template("_quote_result.html").module
    result = partial.result
    shared = str(result(quote, 'id="result-heading" tabindex="-1" autofocus'))
    section = re.sub(r'(href="/ui/quotes/q_[0-9a-f]{32})\?t=[^"]+"', r'\1"', section)
    assert " ".join(shared.split()) == " ".join(section.split())  # but the page's signed link
    assert "<th scope=\"col\">GPUs</th><th scope=\"col\">Wall-clock</th>" in shared
