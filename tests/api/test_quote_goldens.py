"""``POST /v1/quotes`` answers and stores the golden bytes, and every stored quote verifies.

``tests/data/quote_goldens.json`` was written by the code before the quote path was made
faster (issue 16) and is held through its simplification (issue 38): for a set of varied
quotes (training estimate, optimise, GPU-hours, serving
estimate and plan; budgets in USD and in EUR through the FX table, a deadline, amortised
accounting, named policies with every kind of rule, a discount book, ``rank_by`` CO2e,
priced misfits, dated and stale prices) it holds the exact response text and the exact
stored ``lines`` text, with only the values that differ between runs replaced (the quote's
id, timestamps, principal, request id, the catalogue version's id and content hash, and the
estimator version label). Every case must answer and store the same bytes, and verify.

The clock is frozen (``service.api.routes.quotes.dt``) so that price ages and discount
windows do not move with the day the tests run. A deliberate change to a figure or a message
regenerates the file (on SQLite; the PostgreSQL run then compares against it):
``CQ_REGENERATE_QUOTE_GOLDENS=1 pytest tests/api/test_quote_goldens.py``.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import os
import re
import types
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.api.routes import quotes as quote_routes
from service.api.schemas.quotes import QUOTE_EXAMPLE
from service.api.schemas.serving import SERVING_EXAMPLE, SERVING_PLAN_EXAMPLE
from service.catalog import quotes as store
from service.catalog.models import Quote
from tests.factories import date_offers

GOLDENS = Path(__file__).resolve().parents[1] / "data" / "quote_goldens.json"
REGENERATE = os.environ.get("CQ_REGENERATE_QUOTE_GOLDENS") == "1"
FROZEN_NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
YEAR_S = 31_557_600

H100 = "h100-sxm5-80gb"
LLAMA_70B_1024: dict[str, Any] = {"estimate": {
    "model": {"preset": "llama3.1-70b"},
    "cluster": {"accelerator": H100, "num_gpus": 1024},
    "parallelism": {"tp": 8, "pp": 4, "dp": 32},
    "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 15e12}}}
GPU_HOURS_512: dict[str, Any] = {"gpu_hours": {"accelerator": H100, "gpu_hours": 250000,
                                               "num_gpus": 512}}
OPTIMISE_8B: dict[str, Any] = {"optimise": {
    "model": {"preset": "llama3.1-8b"},
    "training": {"seq_len": 8192, "global_batch_seqs": 128, "tokens": 1e12},
    "clusters": [{"accelerator": H100, "num_gpus_range": {"start": 64, "stop": 128,
                                                          "step": 64}}]}}


def _serving_plan() -> dict[str, Any]:
    search = copy.deepcopy(SERVING_PLAN_EXAMPLE)
    search.pop("price_per_gpu_hour_usd", None)
    return search


# (name, body) in order; "@date" dates the seed's undated offers (as of 2026-09-01) before
# the cases after it, "@policies" and "@book" create the named policies and discount book.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("example", QUOTE_EXAMPLE),
    ("benchmark_gpu_hours_whole_providers", {
        "workload": GPU_HOURS_512, "terms": ["on_demand", "spot", "reserved_1y"],
        "providers": ["aws", "gcp"], "budget": {"amount": "2000000.00", "currency": "USD"}}),
    ("gpu_hours_whole_catalogue", {
        "workload": {"gpu_hours": {"accelerator": H100, "gpu_hours": 80_000,
                                   "num_gpus": 256}},
        "budget": {"amount": "900000.00", "currency": "USD"}, "deadline_s": 20 * 86_400.0}),
    ("estimate_70b_all_terms_budget_deadline", {
        "workload": LLAMA_70B_1024, "budget": {"amount": "5000000.00", "currency": "USD"},
        "deadline_s": 120 * 86_400.0}),
    ("estimate_70b_amortised", {
        "workload": LLAMA_70B_1024, "terms": ["reserved_1y", "reserved_3y", "on_demand"],
        "budget": {"amount": "5000000.00", "currency": "USD"}, "accounting": "amortised",
        "reservation_utilisation_fraction": "0.5", "reserved_utilisation_fraction": "0.7"}),
    ("optimise_onprem_break_even", {
        "workload": OPTIMISE_8B, "providers": ["aws", "lambda", "onprem"],
        "onprem": {"purchase_price_per_gpu": "28000"}, "reliability": {"restart_s": 300.0}}),
    ("spot_at_scale", {
        "workload": GPU_HOURS_512, "providers": ["aws"], "terms": ["spot"],
        "budget": {"amount": "10000000.00", "currency": "USD"}}),
    ("serving_estimate_year", {
        "workload": {"serving": {"estimate": copy.deepcopy(SERVING_EXAMPLE),
                                 "duration_s": YEAR_S}},
        "providers": ["aws", "gcp", "lambda"],
        "terms": ["on_demand", "spot", "reserved_1y", "reserved_3y"],
        "budget": {"amount": "3000000.00", "currency": "USD"}}),
    ("serving_plan_half_year", {
        "workload": {"serving": {"plan": _serving_plan(), "duration_s": YEAR_S / 2}},
        "terms": ["on_demand", "reserved_1y"], "providers": ["aws", "gcp", "lambda"]}),
    ("rank_by_co2e", {
        "workload": {"gpu_hours": {"accelerator": H100, "gpu_hours": 20_000, "num_gpus": 64}},
        "terms": ["on_demand"], "rank_by": "co2e"}),
    ("@date", {}),
    ("dated_gpu_hours_budget", {
        "workload": {"gpu_hours": {"accelerator": H100, "gpu_hours": 8_000, "num_gpus": 64}},
        "providers": ["aws", "gcp", "lambda"], "terms": ["on_demand", "reserved_1y"],
        "budget": {"amount": "40000.00", "currency": "USD"}}),
    ("eur_budget", {
        "workload": {"gpu_hours": {"accelerator": H100, "gpu_hours": 8_000, "num_gpus": 64}},
        "providers": ["aws"], "terms": ["on_demand", "spot", "reserved_1y"],
        "fx_date": "2025-05-04", "budget": {"amount": "30000.00", "currency": "EUR"}}),
    ("@policies", {}),
    ("policy_every_rule", {
        "workload": LLAMA_70B_1024, "policy": "every-rule", "deadline_s": 60 * 86_400.0,
        "budget": {"amount": "8000000.00", "currency": "USD"}}),
    ("policy_eur_limits_eur_budget", {
        "workload": {"gpu_hours": {"accelerator": H100, "gpu_hours": 8_000, "num_gpus": 64}},
        "providers": ["aws", "gcp"], "policy": "eur-limits", "fx_date": "2025-05-04",
        "budget": {"amount": "30000.00", "currency": "EUR"}}),
    ("policy_misfits_priced", {
        "workload": LLAMA_70B_1024, "terms": ["on_demand"], "policy": "lenient-fit"}),
    ("@book", {}),
    ("discount_book", {
        "workload": {"gpu_hours": {"accelerator": H100, "gpu_hours": 8_000, "num_gpus": 64}},
        "providers": ["aws"], "terms": ["on_demand", "reserved_1y"],
        "discount_book": "acme"}),
]

POLICIES = [
    {"name": "every-rule", "rules": {
        "max_commitment": "6000000.00", "max_job_cost": "4000000.00",
        "allowed_terms": ["on_demand", "reserved_1y", "spot"],
        "allowed_providers": ["aws", "gcp", "azure", "lambda"],
        "allowed_regions": ["us-east-1", "us-west-2", "us-central1"],
        "forbid_indicative": False, "forbid_quarantined": False,
        "max_price_age_s": 30 * 86_400.0, "max_duration_s": 50 * 86_400.0,
        "min_success_probability": 0.8, "forbid_assumed_interruption_rates": True,
        "warn_only": ["allowed_regions", "max_duration_s"]}},
    {"name": "eur-limits", "rules": {"currency": "EUR", "max_commitment": "25000.00",
                                     "max_job_cost": "20000.00"}},
    {"name": "lenient-fit", "rules": {"require_node_fit": False,
                                      "forbid_indicative": False}},
]
BOOK = {"name": "acme", "description": "golden", "entries": [
    {"provider": "aws", "accelerator": H100, "percent_off": "18",
     "valid_from": "2026-10-01", "valid_until": "2027-06-30"},
    {"provider": "aws", "accelerator": H100, "region": "us-east-1", "term": "on_demand",
     "percent_off": "25", "valid_from": "2026-10-01", "valid_until": "2027-06-30"}]}

VOLATILE = ("id", "created_at", "expires_at", "principal", "request_id", "catalog_version",
            "catalog_content_hash", "estimator_version")


class _FrozenDatetime(dt.datetime):
    @classmethod
    def now(cls, tz: dt.tzinfo | None = None) -> dt.datetime:  # type: ignore[override]
        return FROZEN_NOW if tz is not None else FROZEN_NOW.replace(tzinfo=None)


def normalised(response_text: str, stored_lines: str) -> tuple[str, str]:
    """The texts with the values that differ between runs replaced by their key's name."""
    answer = json.loads(response_text)
    version = answer["catalog_version"]
    for key in VOLATILE:
        value = json.dumps(answer[key], ensure_ascii=False)
        response_text = response_text.replace(f'"{key}":{value}', f'"{key}":"<{key}>"', 1)
    pattern = f'"catalog_version":{json.dumps(version)}'
    response_text = response_text.replace(pattern, '"catalog_version":"<catalog_version>"')
    return response_text, stored_lines.replace(pattern, '"catalog_version":"<catalog_version>"')


def line_digests(lines_text: str) -> list[str]:
    """A short digest per stored line, to name the first line that differs."""
    return [hashlib.sha256(json.dumps(x, ensure_ascii=False, separators=(",", ":")).encode())
            .hexdigest()[:16] for x in json.loads(lines_text)["lines"]]


def _run_cases(client: TestClient, headers: dict[str, str],
               db_session: Session) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, body in CASES:
        if name == "@date":
            date_offers(db_session, as_of="2026-09-01")
            continue
        if name == "@policies":
            for policy in POLICIES:
                made = client.post("/v1/policies", json=policy, headers=headers)
                assert made.status_code == 201, made.text
            continue
        if name == "@book":
            made = client.post("/v1/discount-books", json=BOOK, headers=headers)
            assert made.status_code == 201, made.text
            continue
        response = client.post("/v1/quotes", json=body,
                               headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
        assert response.status_code == 201, (name, response.text)
        quote_id = response.json()["id"]
        stored = db_session.execute(select(Quote.lines, Quote.lines_zstd, Quote.response)
                                    .where(Quote.id == quote_id)).one()
        assert stored.response == response.text, name  # the stored answer is the answer
        # New quotes store their lines compressed only (decision 163); the text is what was
        # compressed, byte for byte.
        assert stored.lines is None, name
        assert stored.lines_zstd is not None, name
        stored_text = store.unpack_lines(stored.lines_zstd)
        # Decision 169: other characters are escaped, so Python holds the text at one byte a
        # character; parsed, every line is what it was (the per-line digests are unchanged).
        assert stored_text.isascii(), name
        # Every line the answer shows is the stored line, as GET /v1/quotes/{id}/lines
        # pages it.
        written = {}
        for line in json.loads(stored_text)["lines"]:
            written.setdefault(_line_key(line), line)
        for line in response.json()["lines"]:
            assert written[_line_key(line)] == line, name
        text, lines = normalised(response.text, stored_text)
        verify = client.post(f"/v1/quotes/{quote_id}/verify", headers=headers).json()
        assert verify["matches"], (name, verify["differences"][:3])
        out[name] = {"response": text, "lines_sha256": hashlib.sha256(lines.encode())
                     .hexdigest(), "lines_bytes": len(lines.encode()),
                     "line_sha256_16": line_digests(lines)}
    return out


def _line_key(line: dict[str, Any]) -> tuple[Any, ...]:
    return (line["provider"], line["offer_id"], line["term"], line["accelerator"],
            line["num_gpus"])


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    shim = types.SimpleNamespace(datetime=_FrozenDatetime, timedelta=dt.timedelta,
                                 UTC=dt.UTC, date=dt.date)
    monkeypatch.setattr(quote_routes, "dt", shim)


@pytest.mark.usefixtures("frozen_clock")
def test_every_case_answers_and_stores_the_golden_bytes(
    client: TestClient, api_key: Callable[..., dict[str, str]], db_session: Session,
) -> None:
    headers = api_key("quotes:write", "quotes:read", "policies:write", "discounts:write",
                      "discounts:read")
    got = _run_cases(client, headers, db_session)
    assert got.keys() == {name for name, _ in CASES if not name.startswith("@")}
    backend = db_session.get_bind().dialect.name
    if REGENERATE and backend == "sqlite":
        GOLDENS.write_text(json.dumps(got, indent=1, ensure_ascii=False) + "\n",
                           encoding="utf-8")
    golden = json.loads(GOLDENS.read_text(encoding="utf-8"))
    assert golden.keys() == got.keys()
    for name, want in golden.items():
        have = got[name]
        if have["response"] != want["response"]:
            index = next(i for i, (a, b) in enumerate(zip(have["response"], want["response"],
                                                          strict=False)) if a != b)
            pytest.fail(f"{name}: the answer differs at character {index}: "
                        f"{have['response'][max(0, index - 80):index + 80]!r} against "
                        f"{want['response'][max(0, index - 80):index + 80]!r}")
        differing = [i for i, (a, b) in enumerate(zip(have["line_sha256_16"],
                                                      want["line_sha256_16"], strict=False))
                     if a != b]
        assert have["line_sha256_16"] == want["line_sha256_16"], (name, differing[:5])
        assert (have["lines_sha256"], have["lines_bytes"]) == (
            want["lines_sha256"], want["lines_bytes"]), name


def test_the_goldens_cover_every_workload_kind_and_rule() -> None:
    """The golden answers exercise each workload kind, a converted budget, amortised
    accounting, warned and failed rules, misfits and discounts."""
    golden = json.loads(GOLDENS.read_text(encoding="utf-8"))
    text = "".join(x["response"] for x in golden.values())
    for needle in ('"serving":{"accelerator"', '"plan":{"tp"', '"onprem":{"purchase_price',
                   '"in_budget_currency":{"currency":"EUR"', "amortised_accounting",
                   "stale_price", "undated_price", "region_not_allowed", "duration_over_limit",
                   "success_probability_below_minimum", "commitment_over_policy_limit",
                   "job_cost_over_policy_limit", "term_not_allowed", "provider_not_allowed",
                   "spot_capacity_unverified", "assumed_interruption_rate", "derived_price",
                   "no_offer_fits_plan", "estimate_uncertain", "deadline_missed",
                   '"list_unit_price":"', "within_budget", '"warnings":["',
                   "break_even_months"):
        assert needle in text, needle
    assert sum(x["lines_bytes"] for x in golden.values()) > 1_000_000
    assert re.search(r'"rank_by"|co2e_kg', text)
