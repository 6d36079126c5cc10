"""``cq serve-quote`` (issue 19): the serve-estimate deployment flags plus the quote flags,
sent as POST /v1/quotes with ``workload.serving``; printed by ``cq quote``'s renderers, which
show a serving line's fleet (replicas × GPUs per replica, accelerator) and the days it is held;
gated by ``--fail-on`` with cq quote's exit codes. ``cq quote --request`` with a serving body
prints the same."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api import presentation as fmt
from service.api.schemas.serving import SERVING_EXAMPLE
from service.api.ui import serve as ui_serve
from service.cli import report
from tests.cli.test_cli import cq, flat, legible
from tests.factories import seeded_database_with_key

YEAR_S = 31_557_600  # 12 months of 365.25 / 12 days
# SERVING_EXAMPLE as flags (no price: a quote prices from the catalogue).
SERVING_FLAGS = ["--model", "llama3.1-70b", "--accelerator", "h100-sxm5-80gb", "--tp", "4",
                 "--weight-precision", "fp8", "--kv-cache-precision", "fp8", "--engine",
                 "trtllm", "--max-batch", "256", "--prompt-tokens", "1024", "--output-tokens",
                 "256", "--qps", "10", "--ttft-p99", "2", "--tpot-p99", "0.1"]
QUOTE_FLAGS = ["--provider", "aws", "--provider", "gcp", "--provider", "lambda",
               "--term", "on_demand", "--term", "reserved_1y"]
VOLATILE = ("id", "created_at", "expires_at", "request_id", "principal")
"""What differs between two quotes of one request: who made each, when, and its id."""


def serving_quote_body(**extra: Any) -> dict[str, Any]:
    """SERVING_FLAGS plus QUOTE_FLAGS as the API's request body, held for a year."""
    estimate = copy.deepcopy(SERVING_EXAMPLE)
    return {"workload": {"serving": {"estimate": estimate, "duration_s": YEAR_S}},
            "providers": ["aws", "gcp", "lambda"], "terms": ["on_demand", "reserved_1y"],
            **extra}


@pytest.fixture(scope="module")
def writer(local_url: str) -> dict[str, str]:
    key = seeded_database_with_key(local_url, name="cli-serving-quote",
                                   scopes=["quotes:write", "quotes:read"])
    return {"Authorization": f"Bearer {key}"}


def _stable(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k not in VOLATILE}


def _posted(api: TestClient, writer: dict[str, str], body: dict[str, Any],
            key: str) -> dict[str, Any]:
    response = api.post("/v1/quotes", json=body, headers={**writer, "Idempotency-Key": key})
    assert response.status_code == 201, response.text
    answer: dict[str, Any] = response.json()
    return answer


def serve_quote_json(*args: str) -> dict[str, Any]:
    result = cq("serve-quote", "--local", "--format", "json", *SERVING_FLAGS, *args)
    assert result.exit_code == 0, result.output
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def test_a_month_is_a_twelfth_of_a_julian_year_in_the_cli_and_the_portal() -> None:
    assert report.MONTH_S == ui_serve.MONTH_S == 2_629_800  # 365.25 x 86,400 / 12
    assert 12 * report.MONTH_S == YEAR_S


def test_local_json_equals_the_api(local: str, api: TestClient,
                                   writer: dict[str, str]) -> None:
    answer = serve_quote_json(*QUOTE_FLAGS, "--budget", "2000000", "--idempotency-key", "sq-1")
    expected = _posted(api, writer, serving_quote_body(
        budget={"amount": "2000000", "currency": "USD"}), "api-sq-1")
    assert _stable(answer) == _stable(expected)
    assert answer["principal"].startswith("local:")
    fleet = answer["recommended"]["serving"]
    assert fleet["duration_s"] == YEAR_S  # the default: 12 months
    assert (fleet["gpus_per_replica"], fleet["accelerator"]) == (4, "h100-sxm5-80gb")
    assert answer["recommended"]["plan"] is None
    # --months and --replicas: half a year of 3 replicas.
    half = serve_quote_json(*QUOTE_FLAGS, "--months", "6", "--replicas", "3")
    assert half["recommended"]["serving"]["duration_s"] == YEAR_S / 2 == 15_778_800
    assert half["recommended"]["serving"]["replicas"] == 3
    assert half["recommended"]["num_gpus"] == 12


def test_the_table_fits_80_columns_and_shows_the_fleet(local: str) -> None:
    answer = serve_quote_json(*QUOTE_FLAGS, "--budget", "2000000", "--idempotency-key", "sq-2")
    result = cq("serve-quote", "--local", *SERVING_FLAGS, *QUOTE_FLAGS, "--budget", "2000000",
                "--idempotency-key", "sq-2", columns=80)
    assert result.exit_code == 0, result.output
    text = flat(legible(result.stdout))
    rec = answer["recommended"]
    fleet = f"{rec['serving']['replicas']:,} × 4 h100-sxm5-80gb"
    assert f"recommended: {report.line_where(rec)}, {fleet} ({rec['num_gpus']:,} GPUs)" in text
    assert (f"fleet: {fleet} ({rec['num_gpus']:,} GPUs), tp4 fp8/fp8 b256 trtllm; p99 TTFT "
            f"{fmt.duration(rec['serving']['ttft_p99_s'])}") in text
    assert "held for 365.2 days" in text
    assert "days held" in text
    assert "p10–p90" not in text  # a fleet has no band
    assert f"verdict: {answer['verdict']}" in text
    # Piped (200 columns), one row per line: every line is its fleet, then where.
    wide = cq("serve-quote", "--local", *SERVING_FLAGS, *QUOTE_FLAGS, "--budget", "2000000",
              "--idempotency-key", "sq-2").stdout
    for line in answer["lines"]:
        label = f"{report.fleet(line)} on {report.line_where(line)}"
        row = next((r for r in wide.splitlines() if label in r), None)
        assert row is not None, label
        assert report.commitment(line).removesuffix(" USD") in row
        assert re.search(r"\b365\.2\b", row)
        assert not re.search(rf"^\W*{line['num_gpus']} × {line['provider']}", row)


def test_fail_on_reject_exits_3_and_warn_exits_4(local: str) -> None:
    tiny = ["--provider", "aws", "--term", "on_demand", "--budget", "1.00"]
    assert cq("serve-quote", "--local", *SERVING_FLAGS, *tiny).exit_code == 0  # no gate
    for fail_on in ("reject", "warn"):
        result = cq("serve-quote", "--local", "--json", "--fail-on", fail_on, *SERVING_FLAGS,
                    *tiny)
        assert result.exit_code == 3, result.output
        answer = json.loads(result.stdout)  # printed before the gate
        assert answer["verdict"] == "reject"
        assert "commitment_over_budget" in [d["code"] for d in answer["reason_details"]]
        assert "exit 3" in flat(result.stderr)
    # Spot's interruption rate is an assumption: the default policy approves with a warning.
    spot = ["--provider", "aws", "--term", "spot", "--budget", "10000000"]
    warned = serve_quote_json(*spot)
    assert (warned["verdict"], warned["policy_result"]["outcome"]) == ("approve", "warn")
    assert cq("serve-quote", "--local", "--fail-on", "reject", *SERVING_FLAGS,
              *spot).exit_code == 0
    assert cq("serve-quote", "--local", "--fail-on", "warn", *SERVING_FLAGS,
              *spot).exit_code == 4
    # A budget the fleet meets but its band's slow end does not (decision 428) warns
    # estimate_uncertain; one that covers the slow end passes clean.
    on_demand = ["--provider", "aws", "--term", "on_demand"]
    plenty = serve_quote_json(*on_demand, "--budget", "1000000000")
    line = plenty["recommended"]
    slow_end = line["uncertainty"]["commitment_total"]["p90"]
    assert float(slow_end) > float(line["total"])
    between = serve_quote_json(*on_demand, "--budget", line["total"])
    assert ("estimate_uncertain", "warn") in [
        (d["code"], d["outcome"]) for d in between["reason_details"]]
    assert cq("serve-quote", "--local", "--fail-on", "warn", *SERVING_FLAGS, *on_demand,
              "--budget", line["total"]).exit_code == 4
    assert cq("serve-quote", "--local", "--fail-on", "warn", *SERVING_FLAGS, *on_demand,
              "--budget", slow_end).exit_code == 0


def test_markdown_shows_the_fleet_and_the_days_held(local: str) -> None:
    flags = [*QUOTE_FLAGS, "--budget", "1.00", "--idempotency-key", "sq-md"]
    answer = serve_quote_json(*flags)
    result = cq("serve-quote", "--local", "--format", "markdown", "--fail-on", "reject",
                *SERVING_FLAGS, *flags)
    assert result.exit_code == 3
    md = result.stdout
    assert md.startswith(f"### ❌ reject: ComputeQuote `{answer['id']}`")
    rec = answer["recommended"]
    fleet = f"{rec['serving']['replicas']:,} × 4 h100-sxm5-80gb"
    assert f"{report.line_where(rec)}, {fleet} ({rec['num_gpus']:,} GPUs) · held 365.2 days" \
        in md
    rows = [row for row in md.splitlines() if row.startswith("| ")]
    assert rows[0] == ("| provider | region | instance | term | fleet | commitment | job cost "
                       "| days held |")
    assert rows[1].startswith(f"| ★ {rec['provider']} | {rec['region']} | "
                              f"{rec['instance_type']} | {rec['term']} | {fleet} |")
    assert all(row.endswith(" | 365.2 |") for row in rows[1:])


def test_cq_quote_request_renders_a_serving_quote(local: str, api: TestClient,
                                                  writer: dict[str, str],
                                                  tmp_path: Path) -> None:
    path = tmp_path / "serving-quote.json"
    path.write_text(json.dumps(serving_quote_body()))
    result = cq("quote", "--local", "--json", "--request", str(path), "--idempotency-key",
                "q-req")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert _stable(answer) == _stable(_posted(api, writer, serving_quote_body(), "api-q-req"))
    # The same quote as serve-quote's flags.
    assert _stable(answer) == _stable(serve_quote_json(*QUOTE_FLAGS))
    table = cq("quote", "--local", "--request", str(path), "--idempotency-key", "q-req",
               columns=80)
    assert table.exit_code == 0, table.output
    text = flat(legible(table.stdout))
    rec = answer["recommended"]
    fleet = f"{rec['serving']['replicas']:,} × 4 h100-sxm5-80gb"
    assert f"{report.line_where(rec)}, {fleet} ({rec['num_gpus']:,} GPUs)" in text
    assert "days held" in text
    md = cq("quote", "--local", "--format", "markdown", "--request", str(path),
            "--idempotency-key", "q-req").stdout
    assert "| fleet |" in md
    assert f"| {fleet} |" in md


def test_request_takes_a_serving_estimate_or_a_serving_quote(
        local: str, tmp_path: Path) -> None:
    reference = serve_quote_json(*QUOTE_FLAGS)
    # A serve-estimate request file: its price is left out (with a note), flags override.
    estimate = copy.deepcopy(SERVING_EXAMPLE)
    estimate["deployment"]["price_per_gpu_hour_usd"] = "2.50"
    estimate["traffic"]["requests_per_s"] = 99
    path = tmp_path / "estimate.json"
    path.write_text(json.dumps(estimate))
    result = cq("serve-quote", "--local", "--json", "--request", str(path), "--qps", "10",
                *QUOTE_FLAGS)
    assert result.exit_code == 0, result.output
    assert _stable(json.loads(result.stdout)) == _stable(reference)
    assert "price_per_gpu_hour_usd (2.50) is not sent" in flat(result.stderr)
    # A serving quote body: its duration is kept unless --months is given.
    body = serving_quote_body()
    body["workload"]["serving"]["duration_s"] = YEAR_S / 4
    path.write_text(json.dumps(body))
    quarter = cq("serve-quote", "--local", "--json", "--request", str(path))
    assert json.loads(quarter.stdout)["recommended"]["serving"]["duration_s"] == YEAR_S / 4
    again = cq("serve-quote", "--local", "--json", "--request", str(path), "--months", "12")
    assert _stable(json.loads(again.stdout)) == _stable(reference)
    # Not one deployment: cq quote takes it, serve-quote says so.
    body["workload"] = {"serving": {"plan": {}, "duration_s": YEAR_S}}
    path.write_text(json.dumps(body))
    refused = cq("serve-quote", "--local", "--request", str(path))
    assert refused.exit_code == 2
    assert "cq quote --request takes any quote" in flat(refused.output)


def test_a_deployment_that_misses_the_slo_is_a_problem(local: str) -> None:
    result = cq("serve-quote", "--local", *SERVING_FLAGS, "--ttft-p99", "0.001")
    assert result.exit_code == 1
    assert "POST /v1/serving-plans finds one that does" in flat(result.stderr)


def test_help_lists_serve_quote() -> None:
    assert "serve-quote" in cq("--help").stdout
    text = flat(cq("serve-quote", "--help", columns=100).stdout)
    for flag in ("--months", "--budget", "--provider", "--term", "--policy", "--fail-on",
                 "--idempotency-key", "--format", "--qps", "--ttft-p99"):
        assert flag in text, flag
    assert "--price" not in text  # a quote prices from the catalogue
