"""``cq`` through typer's CliRunner: in process on a local database (``--local``) and over HTTP
against a live server (``--api``). The figures must equal the API's own answers."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from service.api import presentation as fmt
from service.api.schemas.estimate import ESTIMATE_EXAMPLE
from service.cli import app
from service.settings import Settings
from tests.factories import seeded_database_with_key
from tests.live_server import STARTUP_WAIT_S, free_port, live_server

runner = CliRunner()
ESTIMATE_FLAGS = ["--model", "llama3.1-70b", "--accelerator", "h100-sxm5-80gb", "--gpus", "64",
                  "--tokens", "15e12", "--seq-len", "8192", "--global-batch", "128",
                  "--tp", "4", "--pp", "4", "--cp", "2"]


def flat(text: str) -> str:
    """Output without rich's box drawing and line wrapping."""
    return re.sub(r"[│╭╮╰╯─\s]+", " ", text)


def cq(*args: str, columns: int | None = None) -> Any:
    result = runner.invoke(app, list(args),
                           env=None if columns is None else {"COLUMNS": str(columns)})
    assert "Traceback" not in result.output
    return result


def bare(amount: str | None, currency: str = "USD") -> str:
    """An amount as a table shows it when its header names the currency."""
    return fmt.money(amount, currency).removesuffix(f" {currency}")


def column_of(text: str, header: str) -> int:
    """Where a header starts in a table's (possibly several-line) header."""
    rows = text.splitlines()
    rule = next(i for i, row in enumerate(rows) if row.startswith("───"))
    return min(row.index(header) for row in rows[:rule] if header in row)


def legible(text: str, width: int = 80) -> str:
    """Asserts that no line is wider than the terminal and nothing was cut with an ellipsis;
    returns the text."""
    for row in text.splitlines():
        assert len(row) <= width, row
    assert "…" not in text
    return text


def test_estimate_local_json_equals_the_api(local: str, api: TestClient) -> None:
    result = cq("estimate", "--local", "--json", *ESTIMATE_FLAGS)
    assert result.exit_code == 0, result.output
    body = {"model": {"preset": "llama3.1-70b"},
            "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 64},
            "parallelism": {"tp": 4, "pp": 4, "cp": 2},
            "training": {"seq_len": 8192, "global_batch_seqs": 128, "tokens": 15e12}}
    expected = api.post("/v1/estimates", json=body).json()
    assert json.loads(result.stdout) == expected
    assert expected["resolved"]["parallelism"]["dp"] == 2


def test_estimate_table_shows_the_figures(local: str, api: TestClient) -> None:
    answer = json.loads(cq("estimate", "--local", "--json", *ESTIMATE_FLAGS).stdout)
    result = cq("estimate", "--local", *ESTIMATE_FLAGS)
    assert result.exit_code == 0, result.output
    assert fmt.duration(answer["time"]["train_s"]) in result.stdout
    assert fmt.percent(answer["time"]["mfu_fraction"]) in result.stdout
    assert fmt.gib(answer["memory"]["peak_bytes_per_gpu"]) in result.stdout
    assert "pipeline bubble" in result.stdout


def test_request_file_and_flags_override(local: str, api: TestClient, tmp_path: Path) -> None:
    path = tmp_path / "estimate.json"
    path.write_text(json.dumps(ESTIMATE_EXAMPLE))
    from_file = json.loads(cq("estimate", "--local", "--json", "--request", str(path)).stdout)
    assert from_file == api.post("/v1/estimates", json=ESTIMATE_EXAMPLE).json()
    doubled = json.loads(cq("estimate", "--local", "--json", "--request", str(path),
                            "--tokens", str(2 * ESTIMATE_EXAMPLE["training"]["tokens"])).stdout)
    assert doubled["time"]["train_s"] == pytest.approx(2 * from_file["time"]["train_s"])


def test_a_problem_prints_title_and_detail_and_exits_1(local: str) -> None:
    result = cq("estimate", "--local", *ESTIMATE_FLAGS[:2], "--accelerator", "no-such-gpu",
                "--gpus", "8", "--tokens", "1e9")
    assert result.exit_code == 1
    assert "422" in result.output
    assert "not an accelerator of the catalogue" in result.output
    assert "no-such-gpu" not in result.output  # input is never echoed (issue 14)


def test_a_bad_request_file_is_a_usage_error(local: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    result = cq("estimate", "--local", "--request", str(path))
    assert result.exit_code == 2
    assert "not a JSON file" in flat(result.output)


def test_an_unreachable_api_exits_2_with_advice() -> None:
    result = cq("offers", "--api", "http://127.0.0.1:9")
    assert result.exit_code == 2
    assert "cannot reach the service" in flat(result.output)
    assert "--local" in result.output


def test_optimise_local_ranks_plans_like_the_api(local: str, api: TestClient) -> None:
    flags = ["--model", "gpt3-175b", "--accelerator", "a100-sxm4-80gb", "--gpus", "256",
             "--tokens", "300e9", "--seq-len", "2048", "--global-batch", "1536", "--top-k", "3"]
    result = cq("optimise", "--local", "--json", *flags)
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert [p["rank"] for p in answer["plans"]] == [1, 2, 3]
    times = [p["time"]["train_s"] for p in answer["plans"]]
    assert times == sorted(times)
    table = cq("optimise", "--local", *flags)
    assert fmt.layout(answer["plans"][0]["parallelism"], short=True) in table.stdout
    assert f"{answer['search']['candidates_evaluated']:,} layouts evaluated" in table.stdout
    assert table.stderr == ""  # no progress bar when not on a terminal


def test_quote_local_is_stored_and_gated(local: str, api: TestClient) -> None:
    result = cq("quote", "--local", "--json", "--gpu-hours", "100000", "--accelerator",
                "h100-sxm5-80gb", "--gpus", "512", "--provider", "aws", "--term",
                "on_demand", "--budget", "1.00")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["verdict"] == "reject"  # nothing costs a dollar
    assert answer["principal"].startswith("local:")
    assert api.get(f"/v1/quotes/{answer['id']}").status_code == 401  # quotes have owners
    auditor = seeded_database_with_key(local, name=f"auditor-{uuid.uuid4().hex[:6]}",
                                       scopes=["quotes:admin"])
    stored = api.get(f"/v1/quotes/{answer['id']}", headers={"Authorization": f"Bearer {auditor}"})
    assert stored.status_code == 200
    assert stored.json()["summary"] == answer["summary"]
    line = answer["cheapest_per_term"]["on_demand"]
    table = cq("quote", "--local", "--gpu-hours", "100000", "--accelerator", "h100-sxm5-80gb",
               "--gpus", "512", "--provider", "aws", "--term", "on_demand")
    assert bare(line["total"], line["currency"]) in table.stdout


def test_budget_plan_and_offers_local(local: str, api: TestClient) -> None:
    result = cq("budget-plan", "--local", "--json", "--model", "llama3.1-8b", "--accelerator",
                "h100-sxm5-80gb", "--gpus-range", "8:32:8", "--tokens", "1e11", "--budget",
                "200000", "--deadline-days", "60")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    totals = [float(line["total"]) for line in answer["cheapest_before_deadline"]]
    assert totals == sorted(totals)
    offers = cq("offers", "--local", "--json", "--accelerator", "h100-sxm5-80gb", "--term",
                "spot", "--limit", "5")
    items = json.loads(offers.stdout)["items"]
    assert 0 < len(items) <= 5
    assert {o["accelerator"] for o in items} == {"h100-sxm5-80gb"}
    assert {o["term"] for o in items} == {"spot"}
    prices = [float(o["price_per_gpu_hour"]) for o in items]
    assert prices == sorted(prices)


LARGEST_FLAGS = ["--objective", "largest_model", "--candidate-model", "llama3.1-8b",
                 "--candidate-model", "llama3.1-70b", "--accelerator", "h100-sxm5-80gb",
                 "--gpus-range", "256:512:256", "--provider", "aws", "--deadline-days", "60"]


def test_budget_plan_table_shows_commitment_first(local: str) -> None:
    flags = ["budget-plan", "--local", "--model", "llama3.1-8b", "--accelerator",
             "h100-sxm5-80gb", "--gpus-range", "8:32:8", "--tokens", "1e11", "--budget",
             "200000", "--deadline-days", "60", "--provider", "aws"]
    answer = json.loads(cq(*flags, "--json").stdout)
    assert {line["provider"] for line in answer["soonest_within_budget"]} == {"aws"}
    result = cq(*flags, columns=80)
    assert result.exit_code == 0, result.output
    legible(result.stdout)
    assert column_of(result.stdout, "commitment") < column_of(result.stdout, "job cost") \
        < column_of(result.stdout, "days")
    first = answer["soonest_within_budget"][0]
    assert re.search(rf"^\s*1\s+{re.escape(bare(first['commitment_total']))}\s+"
                     rf"{re.escape(bare(first['job_cost_total']))}\s", result.stdout, re.M)
    lines = answer["soonest_within_budget"]
    assert (f"Soonest within the budget: {min(len(lines), 10)} of {len(lines)} lines"
            if len(lines) > 10 else f"Soonest within the budget: {len(lines)} lines") \
        in flat(result.stdout)
    assert "why:" not in result.stdout  # neither list is empty


def test_budget_plan_largest_model_local(local: str) -> None:
    result = cq("budget-plan", "--local", *LARGEST_FLAGS, "--budget", "2000000")
    assert result.exit_code == 0, result.output
    answer = json.loads(cq("budget-plan", "--local", "--json", *LARGEST_FLAGS, "--budget",
                           "2000000").stdout)
    largest = answer["largest_model"]
    assert answer["objective"] == "largest_model"
    assert largest is not None
    assert largest["tokens"] == pytest.approx(20 * largest["params"])
    text = flat(result.stdout)
    assert f"largest model: {largest['preset']}," in text
    line = largest["line"]
    assert (f"its best line: commitment {fmt.money(line['commitment_total'], 'USD')}, job cost "
            f"{fmt.money(line['job_cost_total'], 'USD')}") in text
    assert "Models tried" in text
    for model in answer["models_tried"]:
        assert model["preset"] in text
        assert model["note"] in text
    ratio = json.loads(cq("budget-plan", "--local", "--json", *LARGEST_FLAGS, "--budget",
                          "2000000", "--tokens-per-param", "10").stdout)
    assert ratio["models_tried"][0]["tokens"] == pytest.approx(
        10 * ratio["models_tried"][0]["params"])


def test_budget_plan_explains_a_10_usd_budget(local: str) -> None:
    result = cq("budget-plan", "--local", *LARGEST_FLAGS, "--budget", "10")
    assert result.exit_code == 0, result.output
    text = flat(result.stdout)
    assert "largest model: none" in text
    assert "Soonest within the budget: no line is within the budget" in text
    assert "why: nothing fits the budget: the cheapest line's commitment total is" in text
    soonest = cq("budget-plan", "--local", "--model", "llama3.1-8b", "--tokens", "1e11",
                 "--accelerator", "h100-sxm5-80gb", "--gpus", "8", "--provider", "aws",
                 "--budget", "10")
    assert soonest.exit_code == 0, soonest.output
    assert "why: nothing fits the budget" in flat(soonest.stdout)


def test_catalog_versions_export_and_import(local: str, tmp_path: Path) -> None:
    exported = tmp_path / "catalog.csv"
    assert cq("catalog", "export", "--local", "-o", str(exported)).exit_code == 0
    rows = exported.read_text().splitlines()
    assert len(rows) > 1000
    patch = tmp_path / "patch.csv"
    patch.write_text(rows[0] + "\n" + rows[1] + "\n")  # re-assert one offer as a patch
    result = cq("catalog", "import", "--local", "--json", str(patch), "--note", "cli test")
    assert result.exit_code == 0, result.output
    version = json.loads(result.stdout)
    versions = json.loads(cq("catalog", "versions", "--local", "--json").stdout)["items"]
    assert versions[0]["id"] == version["id"]
    assert versions[0]["note"] == "cli test"


@pytest.mark.postgres
def test_remote_quote_needs_a_key(database_url_factory: Callable[[str], str]) -> None:
    url = database_url_factory("postgres")
    key = seeded_database_with_key(url, name="cli", scopes=["quotes:write", "quotes:read"])
    flags = ["--gpu-hours", "1000", "--accelerator", "h100-sxm5-80gb", "--gpus", "8",
             "--provider", "lambda"]
    with live_server(Settings(database_url=url, search_workers=0)) as base:
        refused = cq("quote", "--api", base, *flags)
        assert refused.exit_code == 1
        assert "401" in refused.output
        result = cq("quote", "--api", base, "--api-key", key, "--json",
                    "--idempotency-key", "cli-1", *flags)
        assert result.exit_code == 0, result.output
        answer = json.loads(result.stdout)
        assert answer["principal"] == "cli"
        again = json.loads(cq("quote", "--api", base, "--api-key", key, "--json",
                              "--idempotency-key", "cli-1", *flags).stdout)
        assert again == answer  # a retried command replays the stored quote
        read = httpx.get(f"{base}/v1/quotes/{answer['id']}",
                         headers={"Authorization": f"Bearer {key}"})
        assert read.json()["id"] == answer["id"]


def test_a_terminal_gets_a_progress_bar(local: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from service.cli import common

    screen = io.StringIO()
    monkeypatch.setattr(common, "err", Console(file=screen, force_terminal=True, width=100))
    result = cq("optimise", "--local", "--json", "--model", "llama3.1-8b", "--accelerator",
                "h100-sxm5-80gb", "--gpus-range", "8:64:8", "--tokens", "1e11")
    assert result.exit_code == 0, result.output
    assert "searching layouts" in screen.getvalue()
    assert json.loads(result.stdout)["plans"]  # the JSON on stdout is untouched


def test_cq_serve_migrates_seeds_and_serves(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "CQ_DATABASE_URL": f"sqlite:///{tmp_path}/served.sqlite3",
           "CQ_SEARCH_WORKERS": "0", "CQ_LOG_LEVEL": "warning"}
    process = subprocess.Popen([str(Path(sys.executable).parent / "cq"), "serve",  # noqa: S603
                                "--port", str(port)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + STARTUP_WAIT_S
        while True:
            assert process.poll() is None, "cq serve exited"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "cq serve did not become ready"
            time.sleep(0.2)
        offers = httpx.get(f"http://127.0.0.1:{port}/v1/offers",
                           params={"page_size": 5}).json()
        assert len(offers["items"]) == 5  # the seeded catalogue
    finally:
        process.terminate()
        process.wait(timeout=20)


# --- cq as a CI gate: --fail-on, --format markdown, cq quotes get|verify|requote|diff ------

AWS_512 = ["--gpu-hours", "100000", "--accelerator", "h100-sxm5-80gb", "--gpus", "512",
           "--provider", "aws"]
AWS_8_RESERVED = ["--gpu-hours", "10000", "--accelerator", "h100-sxm5-80gb", "--gpus", "8",
                  "--provider", "aws", "--term", "reserved_1y"]


@pytest.fixture(scope="module")
def lenient(local_url: str, api: TestClient) -> str:
    """A stored policy under which indicative (derived) prices only warn."""
    key = seeded_database_with_key(local_url, name="cli-policies", scopes=["policies:write"])
    created = api.post("/v1/policies", json={"name": "lenient",
                                             "rules": {"forbid_indicative": False}},
                       headers={"Authorization": f"Bearer {key}"})
    assert created.status_code == 201, created.text
    return "lenient"


def quote_json(*args: str) -> dict[str, Any]:
    result = cq("quote", "--local", "--format", "json", *args)
    assert result.exit_code == 0, result.output
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def test_fail_on_reject_exits_3_after_printing(local: str) -> None:
    flags = [*AWS_512, "--term", "on_demand", "--budget", "1.00"]
    assert cq("quote", "--local", *flags).exit_code == 0  # no gate: exit 0 whatever the verdict
    for fail_on in ("reject", "warn"):  # reject takes precedence over warn
        result = cq("quote", "--local", "--json", "--fail-on", fail_on, *flags)
        assert result.exit_code == 3, result.output
        answer = json.loads(result.stdout)  # the answer is printed before the gate
        assert answer["verdict"] == "reject"
        assert "exit 3" in flat(result.stderr)


def test_fail_on_passes_an_approved_quote(local: str) -> None:
    result = cq("quote", "--local", "--json", "--fail-on", "warn", *AWS_512, "--term",
                "on_demand", "--budget", "100000000")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert (answer["verdict"], answer["policy_result"]["outcome"]) == ("approve", "pass")


def test_fail_on_warn_exits_4_on_a_policy_warning(local: str, lenient: str) -> None:
    answer = quote_json(*AWS_8_RESERVED, "--policy", lenient)
    assert answer["verdict"] == "approve"
    assert answer["policy_result"]["outcome"] == "warn"
    assert answer["policy_result"]["name"] == lenient
    assert cq("quote", "--local", "--fail-on", "reject", "--policy", lenient,
              *AWS_8_RESERVED).exit_code == 0
    warned = cq("quote", "--local", "--fail-on", "warn", "--policy", lenient, *AWS_8_RESERVED)
    assert warned.exit_code == 4, warned.output
    # The built-in policy fails the same derived price: reject, exit 3 even with --fail-on warn.
    assert cq("quote", "--local", "--fail-on", "warn", "--budget", "1000000",
              *AWS_8_RESERVED).exit_code == 3


def test_a_quote_without_a_verdict_passes_the_gate_with_a_note(local: str) -> None:
    result = cq("quote", "--local", "--json", "--fail-on", "warn", *AWS_8_RESERVED)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["verdict"] is None
    assert "no verdict" in flat(result.stderr)


def test_markdown_is_a_pull_request_comment(local: str) -> None:
    flags = [*AWS_512, "--budget", "1.00", "--idempotency-key", "md-reject"]
    answer = quote_json(*flags)
    result = cq("quote", "--local", "--format", "markdown", "--fail-on", "reject", *flags)
    assert result.exit_code == 3
    md = result.stdout
    assert md.startswith(f"### ❌ reject: ComputeQuote `{answer['id']}`")
    line = answer["recommended"]
    assert (f"Commitment {fmt.money(line['commitment_total'], 'USD')} vs budget "
            f"{fmt.money('1.00', 'USD')}") in md
    assert f"job cost {fmt.money(line['job_cost_total'], 'USD')}" in md
    rows = [row for row in md.splitlines() if row.startswith("| ")]
    assert rows[0].startswith("| provider | region | instance | term | GPUs | commitment | "
                              "job cost | days p50 (p10–p90) |")
    assert 1 <= len(rows) - 1 <= 3
    assert rows[1].startswith(f"| ★ aws | {line['region']} | {line['instance_type']} | "
                              f"{line['term']} | 512 |")
    assert len(answer["lines"]) > 3  # more lines than the comment shows
    for reason in answer["reason_details"]:
        assert f"`{reason['code']}`" in md
    assert "`commitment_over_budget`" in md
    assert answer["catalog_version"] in md
    assert answer["estimator_version"] in md
    assert "`default@built-in`" in md


def test_markdown_heading_for_approve_and_warn(local: str, lenient: str) -> None:
    approved = cq("quote", "--local", "--format", "markdown", *AWS_512, "--term", "on_demand",
                  "--budget", "100000000")
    assert approved.stdout.startswith("### ✅ approve")
    warned = cq("quote", "--local", "--format", "markdown", "--policy", lenient,
                *AWS_8_RESERVED)
    assert warned.stdout.startswith("### ⚠️ warn")
    assert "`derived_price`" in warned.stdout
    assert f"`{lenient}@1`" in warned.stdout


def test_json_and_format_disagreeing_is_a_usage_error(local: str) -> None:
    result = cq("quote", "--local", "--json", "--format", "markdown", *AWS_8_RESERVED)
    assert result.exit_code == 2
    assert "disagree" in flat(result.output)


def test_amortised_accounting_flags(local: str) -> None:
    answer = quote_json(*AWS_8_RESERVED, "--utilisation", "0.5")
    assert answer["accounting"] == "amortised"
    line = answer["recommended"]
    assert line["total"] != line["commitment_total"]
    table = cq("quote", "--local", *AWS_8_RESERVED, "--utilisation", "0.5")
    assert "judged" in table.stdout
    assert bare(line["total"]) in table.stdout
    # The commitment comes before the job cost in the table.
    commitment = bare(line["commitment_total"])
    assert table.stdout.index(commitment) < table.stdout.index(bare(line["job_cost_total"]))
    refused = cq("quote", "--local", *AWS_8_RESERVED, "--accounting", "amortised")
    assert refused.exit_code == 1
    assert "reservation_utilisation_fraction" in flat(refused.output)


def test_quotes_get_and_verify(local: str, api: TestClient) -> None:
    answer = quote_json(*AWS_512, "--term", "on_demand", "--budget", "1.00")
    got = cq("quotes", "get", "--local", "--json", answer["id"])
    assert got.exit_code == 0, got.output
    assert json.loads(got.stdout) == answer
    assert cq("quotes", "get", "--local", "--fail-on", "reject", answer["id"]).exit_code == 3
    table = cq("quotes", "get", "--local", answer["id"])
    assert "commitment_over_budget" in table.stdout
    verified = cq("quotes", "verify", "--local", "--json", answer["id"])
    assert verified.exit_code == 0, verified.output
    assert json.loads(verified.stdout)["matches"] is True
    assert "verifies" in cq("quotes", "verify", "--local", answer["id"]).stdout
    missing = cq("quotes", "get", "--local", "q_" + "0" * 32)
    assert missing.exit_code == 1
    assert "404" in missing.output


def test_quotes_diff_after_a_price_change(local: str, tmp_path: Path) -> None:
    before = quote_json(*AWS_512, "--term", "on_demand", "--budget", "1000000")
    exported = tmp_path / "catalog.csv"
    assert cq("catalog", "export", "--local", "-o", str(exported)).exit_code == 0
    import csv

    with exported.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    row = next(r for r in rows if r["provider"] == "aws" and r["region"] == "us-west-1"
               and r["instance_type"] == "p5.48xlarge" and r["term"] == "on_demand")
    row["price_per_hour"] = f"{float(row['price_per_hour']) * 2:.6f}"
    patch = tmp_path / "patch.csv"
    with patch.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerow(row)
    imported = cq("catalog", "import", "--local", str(patch), "--note", "double us-west-1")
    assert imported.exit_code == 0, imported.output
    requoted = cq("quotes", "requote", "--local", "--json", before["id"])
    assert requoted.exit_code == 0, requoted.output
    after = json.loads(requoted.stdout)
    assert after["requote_of"] == before["id"]
    assert after["catalog_version"] != before["catalog_version"]

    result = cq("quotes", "diff", "--local", "--json", before["id"], after["id"])
    assert result.exit_code == 0, result.output
    diff = json.loads(result.stdout)
    fields = {f["field"]: f for f in diff["fields"]}
    assert fields["catalog_version"]["changed"]
    assert fields["catalog_version"]["b"] == after["catalog_version"]
    assert fields["policy"]["a"] == "default@built-in"
    changed = [r for r in diff["lines"] if r["status"] == "changed"]
    assert [(r["provider"], r["region"], r["instance_type"], r["term"]) for r in changed] == [
        ("aws", "us-west-1", "p5.48xlarge", "on_demand")]
    line = changed[0]
    assert float(line["b"]["commitment_total"]) == pytest.approx(
        2 * float(line["a"]["commitment_total"]), rel=1e-3)
    assert line["total_change"] == f"{float(line['b']['total']) - float(line['a']['total']):.2f}"
    assert diff["counts"]["unchanged"] > 0
    assert diff["counts"]["added"] == diff["counts"]["removed"] == 0

    table = cq("quotes", "diff", "--local", before["id"], after["id"])
    assert "us-west-1" in table.stdout
    assert after["catalog_version"] in table.stdout
    md = cq("quotes", "diff", "--local", "--format", "markdown", before["id"], after["id"])
    assert f"**catalog_version**: `{before['catalog_version']}` → " in md.stdout
    assert "| aws | us-west-1 | p5.48xlarge | on_demand | changed |" in md.stdout


def test_quotes_over_http(local_url: str, local: str) -> None:
    answer = quote_json(*AWS_8_RESERVED, "--budget", "1.00")
    # The quote is local:<user>'s; an auditor's key reads every principal's quotes.
    key = seeded_database_with_key(local_url, name="cli-reader", scopes=["quotes:admin"])
    with live_server(Settings(database_url=local_url, search_workers=0)) as base:
        got = cq("quotes", "get", "--api", base, "--api-key", key, "--format", "markdown",
                 "--fail-on", "reject", answer["id"])
        assert got.exit_code == 3, got.output
        assert got.stdout.startswith("### ❌ reject")
        diff = cq("quotes", "diff", "--api", base, "--api-key", key, "--json", answer["id"],
                  answer["id"])
        assert diff.exit_code == 0, diff.output
        assert json.loads(diff.stdout)["counts"]["changed"] == 0


def test_catalog_refresh_dry_run_reports_the_diff_without_storing(local: str) -> None:
    sample = Path(__file__).resolve().parents[1] / "data/importers/azure_retail_prices.json"
    before = json.loads(cq("catalog", "versions", "--local", "--json").stdout)["items"][0]
    result = cq("catalog", "refresh", "--local", "--provider", "azure", "--from-file",
                str(sample), "--as-of", "2026-11-20", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "azure: dry run, nothing stored: +2 added, ~1 changed" in result.stdout
    assert "skipped 1: Windows" in result.stdout
    after = json.loads(cq("catalog", "versions", "--local", "--json").stdout)["items"][0]
    assert after["id"] == before["id"]


def test_catalog_refresh_of_aws_needs_a_downloaded_file(local: str) -> None:
    result = cq("catalog", "refresh", "--local", "--provider", "aws")
    assert result.exit_code != 0
    assert "--from-file" in result.output


def test_catalog_refresh_holds_a_price_move_for_review(local: str) -> None:
    sample = Path(__file__).resolve().parents[1] / "data/importers/aws_ec2_offer.json"
    before = json.loads(cq("catalog", "versions", "--local", "--json").stdout)["items"][0]
    # The file's p5 1-year rate (33.00) is 9 % above the seed's derived one (30.272).
    held = cq("catalog", "refresh", "--local", "--provider", "aws", "--from-file", str(sample),
              "--threshold", "0.05", "--hold-on-moves")
    assert held.exit_code == 4, held.output
    assert "held" in held.stdout
    assert "p5.48xlarge" in held.stdout
    after = json.loads(cq("catalog", "versions", "--local", "--json").stdout)["items"][0]
    assert after["id"] == before["id"]


def test_a_eur_budget_prints_the_recommended_line_in_euros_with_its_fixing(local: str) -> None:
    args = [*AWS_512, "--term", "on_demand", "--budget", "5000000", "--currency", "EUR"]
    answer = quote_json(*args)
    shown = answer["recommended"]["in_budget_currency"]
    assert shown["currency"] == "EUR"
    text = cq("quote", "--local", *args)
    assert text.exit_code in (0, 3), text.output
    flat = " ".join(text.output.split())
    assert f"in EUR: commitment {fmt.money(shown['commitment_total'], 'EUR')}" in flat
    assert answer["fx"]["fixing_date"] in flat


# --- issue 18: commands, flags, 80-column tables, bands, errors, retry, start-up, keys ------

def test_version_and_shell_completion() -> None:
    from importlib.metadata import version

    result = cq("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"cq {version('computequote')}"
    help_text = cq("--help").stdout
    assert "--install-completion" in help_text
    assert "--show-completion" in help_text
    assert "cq models" in flat(cq("estimate", "--help").stdout)  # the help names it: it exists
    script = cq("--show-completion", "bash")
    assert script.exit_code == 0, script.output
    assert "complete" in script.stdout


def test_models_and_accelerators_list_the_catalogue(local: str, api: TestClient) -> None:
    models = json.loads(cq("models", "--local", "--json").stdout)["items"]
    assert [m["name"] for m in models] == [m["name"] for m in
                                          api.get("/v1/models", params={"page_size": 200})
                                          .json()["items"]]
    table = legible(cq("models", "--local", columns=80).stdout)
    assert f"Model presets: {len(models)}" in table
    for m in models:
        assert m["name"] in table
    accelerators = json.loads(cq("accelerators", "--local", "--json").stdout)["items"]
    assert {a["id"] for a in accelerators} >= {"h100-sxm5-80gb", "a100-sxm4-80gb"}
    table = legible(cq("accelerators", "--local", columns=80).stdout)
    for a in accelerators:
        assert a["id"] in table


def test_estimate_takes_every_layout_flag(local: str, api: TestClient) -> None:
    flags = ["--vp", "5", "--micro-batch", "2", "--zero-stage", "2", "--recompute",
             "selective", "--no-sequence-parallel", "--ep", "1"]
    result = cq("estimate", "--local", "--json", *ESTIMATE_FLAGS, *flags)
    assert result.exit_code == 0, result.output
    resolved = json.loads(result.stdout)["resolved"]["parallelism"]
    assert (resolved["vp"], resolved["micro_batch"], resolved["zero_stage"],
            resolved["recompute"], resolved["sequence_parallel"], resolved["ep"]) == (
        5, 2, 2, "selective", False, 1)
    body = {"model": {"preset": "llama3.1-70b"},
            "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 64},
            "parallelism": {"tp": 4, "pp": 4, "cp": 2, "vp": 5, "micro_batch": 2,
                            "zero_stage": 2, "recompute": "selective",
                            "sequence_parallel": False, "ep": 1},
            "training": {"seq_len": 8192, "global_batch_seqs": 128, "tokens": 15e12}}
    assert json.loads(result.stdout) == api.post("/v1/estimates", json=body).json()
    auto = json.loads(cq("estimate", "--local", "--json", *ESTIMATE_FLAGS, "--micro-batch",
                         "auto").stdout)
    assert auto["resolved"]["parallelism"]["micro_batch"] >= 1
    assert cq("estimate", "--local", *ESTIMATE_FLAGS, "--zero-stage", "4").exit_code == 2


def test_estimate_shows_the_band_and_a_cost(local: str, api: TestClient) -> None:
    answer = json.loads(cq("estimate", "--local", "--json", *ESTIMATE_FLAGS, "--price",
                           "2.50").stdout)
    time_ = answer["time"]
    cost = answer["cost"]
    assert cost["price_per_gpu_hour"] == "2.50"
    assert float(cost["total"]) == pytest.approx(2.5 * time_["gpu_hours"], abs=0.01)
    assert float(cost["total_low"]) < float(cost["total"]) < float(cost["total_high"])
    table = legible(cq("estimate", "--local", *ESTIMATE_FLAGS, "--price", "2.50",
                       columns=80).stdout)
    text = flat(table)
    assert (f"tokens/s, 80% band {fmt.number(time_['tokens_per_s_low'])} – "
            f"{fmt.number(time_['tokens_per_s_high'])}") in text
    low_s = time_["train_s"] * time_["tokens_per_s"] / time_["tokens_per_s_high"]
    assert f"time, 80% band {fmt.duration(low_s)} –" in text
    assert f"cost {fmt.money(cost['total'], 'USD')} at 2.50 USD per GPU-hour" in text
    assert (f"cost, 80% band {fmt.money(cost['total_low'], 'USD')} – "
            f"{fmt.money(cost['total_high'], 'USD')}") in text
    # --provider: that provider's cheapest on-demand offer of the accelerator, named.
    offer = api.get("/v1/offers", params={"accelerator": "h100-sxm5-80gb", "provider": "aws",
                                          "term": "on_demand", "page_size": 1}).json()["items"][0]
    priced = json.loads(cq("estimate", "--local", "--json", *ESTIMATE_FLAGS, "--provider",
                           "aws").stdout)["cost"]
    assert (priced["price_per_gpu_hour"], priced["offer_id"]) == (offer["price_per_gpu_hour"],
                                                                  offer["id"])
    assert offer["id"] in flat(cq("estimate", "--local", *ESTIMATE_FLAGS, "--provider",
                                  "aws").stdout)
    both = cq("estimate", "--local", *ESTIMATE_FLAGS, "--price", "1", "--provider", "aws")
    assert both.exit_code == 2
    nobody = cq("estimate", "--local", *ESTIMATE_FLAGS, "--provider", "no-such-cloud")
    assert nobody.exit_code == 2
    assert "no on-demand offer" in flat(nobody.output)


def test_offers_side_by_side_at_80_columns(local: str, api: TestClient) -> None:
    result = cq("offers", "--local", "--accelerator", "h100-sxm5-80gb", "--limit", "10",
                columns=80)
    assert result.exit_code == 0, result.output
    table = legible(result.stdout)
    on_demand = _every(api, {"accelerator": "h100-sxm5-80gb", "term": "on_demand"})
    spot = _every(api, {"accelerator": "h100-sxm5-80gb", "term": "spot"})
    keys = {(o["provider"], o["region"], o["zone"], o["instance_type"]) for o in on_demand + spot}
    assert f"Offers: 10 of {len(keys)} instance types ({len(on_demand) + len(spot)} offers)" \
        in flat(table)
    assert "on-demand ▲" in table
    assert "spot" in table
    assert column_of(table, "on-demand") < column_of(table, "spot")
    cheapest = on_demand[0]
    row = next(r for r in table.splitlines() if r.startswith(cheapest["provider"]))
    assert bare(cheapest["price_per_gpu_hour"]) in row  # per GPU-hour, the price it sorts by
    pair = next((o for o in spot if (o["provider"], o["region"], o["zone"],
                                     o["instance_type"]) == (cheapest["provider"],
                                                             cheapest["region"],
                                                             cheapest["zone"],
                                                             cheapest["instance_type"])), None)
    if pair is not None:
        assert bare(pair["price_per_gpu_hour"]) in row
    # The zone is shown where an offer has one.
    zoned = cq("offers", "--local", "--limit", "200", "--term", "spot")
    zones = [o for o in _every(api, {"term": "spot"}) if o.get("zone")][:1]
    for offer in zones:
        assert offer["zone"] in zoned.stdout


def _every(api: TestClient, params: dict[str, str]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token = None
    while True:
        page = api.get("/v1/offers", params={**params, "page_size": 200,
                                             **({"page_token": token} if token else {})}).json()
        items += page["items"]
        token = page.get("next_page_token")
        if not token:
            return items


def test_gpu_counts_are_integers_and_fractions_stay() -> None:
    from service.cli import tables

    assert tables.gpus(8.0) == "8"
    assert tables.gpus(1024.0) == "1,024"
    assert tables.gpus(0.25) == "0.25"


def test_plans_with_identical_figures_share_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    from service.cli import common
    from service.cli import plan as cli_plan

    def plan(rank: int, tp: int, train_s: float) -> dict[str, Any]:
        return {"rank": rank, "accelerator": "h100-sxm5-80gb", "num_gpus": 64,
                "global_batch_seqs": 512, "cost_usd": "1234567.891",
                "parallelism": {"tp": tp, "pp": 2, "dp": 64 // (2 * tp), "micro_batch": 1,
                                "zero_stage": 1, "recompute": "none"},
                "time": {"train_s": train_s, "gpu_hours": 1000.0, "mfu_fraction": 0.5},
                "memory": {"peak_bytes_per_gpu": 50 * 2**30}}

    answer = {"objective": "time", "plans": [plan(1, 2, 100.0), plan(2, 4, 100.0),
                                             plan(3, 8, 200.0)],
              "pareto": [], "search": {"candidates_evaluated": 10, "elapsed_s": 0.1,
                                       "feasible": 1234, "truncated": False}}
    screen = io.StringIO()
    monkeypatch.setattr(common.out, "_file", screen)  # undone to None: sys.stdout again
    monkeypatch.setenv("COLUMNS", "80")
    cli_plan.render_plans(answer)
    text = legible(screen.getvalue())
    assert "3 of 1,234 feasible plans, 1 alike folded" in flat(text)
    assert "(+1 alike)" in flat(text)
    assert "tp4" not in text  # the permutation folded into rank 1's row
    assert "1,234,567.89" in text  # money to the cent, never cut


def test_tables_are_legible_at_80_columns(local: str) -> None:
    optimise = cq("optimise", "--local", "--model", "gpt3-175b", "--accelerator",
                  "a100-sxm4-80gb", "--gpus", "256", "--tokens", "300e9", "--seq-len", "2048",
                  "--global-batch", "1536", "--top-k", "5", "--price", "2.10", columns=80)
    assert optimise.exit_code == 0, optimise.output
    answer = json.loads(cq("optimise", "--local", "--json", "--model", "gpt3-175b",
                           "--accelerator", "a100-sxm4-80gb", "--gpus", "256", "--tokens",
                           "300e9", "--seq-len", "2048", "--global-batch", "1536", "--top-k",
                           "5", "--price", "2.10").stdout)
    text = legible(optimise.stdout)
    assert f"of {answer['search']['feasible']:,} feasible plans" in flat(text)
    assert bare(answer["plans"][0]["cost_usd"]) in text
    quote = cq("quote", "--local", *AWS_512, "--budget", "1.00", columns=80)
    answer = quote_json(*AWS_512, "--budget", "1.00")
    text = legible(quote.stdout)
    shown = len(answer["lines"]) if answer.get("lines") else len(answer["cheapest_per_term"])
    assert f"{shown} of {answer['summary']['lines']} lines" in flat(text)
    for line in answer["lines"] or answer["cheapest_per_term"].values():
        assert bare(line["commitment_total"]) in text
        assert bare(line["job_cost_total"]) in text
        assert f"{line['num_gpus']:,} ×" in text
    assert re.search(r"^\s+job cost\s*$|job cost", text)
    assert "flags: a " in text  # letters, explained under the table


def test_a_rejected_quote_shows_formatted_amounts(local: str) -> None:
    answer = quote_json(*AWS_512, "--term", "on_demand", "--budget", "1.00")
    assert answer["verdict"] == "reject"
    text = flat(legible(cq("quote", "--local", *AWS_512, "--term", "on_demand", "--budget",
                           "1.00", columns=80).stdout))
    line = answer["recommended"]
    commitment = fmt.money(line["commitment_total"], "USD")
    assert re.search(r"\d{1,3}(,\d{3})+\.\d{2} USD", commitment)
    assert f"commitment {commitment} exceeds the budget of 1.00 USD" in text
    assert f"vs budget {fmt.money('1.00', 'USD')}" in text
    plan = flat(cq("budget-plan", "--local", *LARGEST_FLAGS, "--budget", "10").stdout)
    assert re.search(r"commitment total is \d{1,3}(,\d{3})*\.\d{2} USD", plan)


def test_json_errors_are_json_on_stdout(local: str) -> None:
    problem = cq("estimate", "--local", "--json", "--model", "llama3.1-70b", "--accelerator",
                 "no-such-gpu", "--gpus", "8", "--tokens", "1e9")
    assert problem.exit_code == 1
    body = json.loads(problem.stdout)
    assert body["status"] == 422
    assert body["exit_code"] == 1
    assert body["type"].endswith("validation-error") or body["title"]
    unreachable = cq("offers", "--json", "--api", "http://127.0.0.1:9")
    assert unreachable.exit_code == 2
    body = json.loads(unreachable.stdout)
    assert "cannot reach the service" in body["detail"]
    assert body["exit_code"] == 2
    usage = cq("estimate", "--local", "--json", "--price", "1", "--provider", "aws")
    assert usage.exit_code == 2
    assert json.loads(usage.stdout)["option"] == "--price"
    quote = cq("quotes", "get", "--local", "--format", "json", "q_" + "0" * 32)
    assert quote.exit_code == 1
    assert json.loads(quote.stdout)["status"] == 404


def _api_with(answers: list[httpx.Response]) -> tuple[Any, list[float]]:
    from service.cli.client import Api

    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return answers[len(sent) - 1]

    client = Api(httpx.Client(transport=httpx.MockTransport(handler),
                              base_url="http://service"), None)
    waits: list[float] = []
    client.sleep = waits.append
    return client, waits


def test_one_bounded_retry_honours_retry_after() -> None:
    from service.cli.client import MAX_RETRY_WAIT_S, ApiProblemError, retry_wait_s

    client, waits = _api_with([httpx.Response(503, headers={"Retry-After": "2"}),
                               httpx.Response(200, json={"ok": True})])
    assert client.call("GET", "/v1/offers").json() == {"ok": True}
    assert waits == [2.0]
    client, waits = _api_with([httpx.Response(503, headers={"Retry-After": "1"}),
                               httpx.Response(503, headers={"Retry-After": "1"},
                                              json={"title": "Overloaded", "detail": "shed"})])
    with pytest.raises(ApiProblemError) as raised:
        client.call("POST", "/v1/estimates", json={})
    assert raised.value.status == 503
    assert waits == [1.0]  # one retry, not more
    client, waits = _api_with([httpx.Response(503, headers={"Retry-After": "3600"})])
    with pytest.raises(ApiProblemError):
        client.call("GET", "/v1/offers")
    assert waits == []  # longer than the cap: reported, not waited for
    client, waits = _api_with([httpx.Response(500), httpx.Response(200)])
    with pytest.raises(ApiProblemError):
        client.call("GET", "/v1/offers")  # only a 503 is retried
    assert retry_wait_s(None) == 1.0
    assert retry_wait_s("Wed, 25 Nov 2026 12:00:05 GMT", now_s=1795608000.0) == 5.0
    assert retry_wait_s(str(int(MAX_RETRY_WAIT_S) + 1)) is None


def test_cq_help_imports_no_heavy_layer() -> None:
    """cq --help and remote commands start without the database layer, settings, pydantic,
    FastAPI or httpx (timed by benchmarks/cli_startup.py)."""
    from benchmarks.cli_startup import HEAVY

    probe = ("import sys, service.cli; print(' '.join(m for m in " + repr(HEAVY)
             + " if m in sys.modules))")
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,  # noqa: S603
                           check=True, cwd=Path(__file__).resolve().parents[2]).stdout.split()
    assert found == []


def test_keys_use_one_database_whatever_the_directory(
        local_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.delenv("CQ_DATABASE_URL", raising=False)
    monkeypatch.delenv("CQ_DATA_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    expected = tmp_path / "xdg" / "computequote" / "computequote.sqlite3"
    assert Settings().resolved_database_url == f"sqlite:///{expected}"
    missing = cq("keys", "list")
    assert missing.exit_code == 1
    assert "no database at" in flat(missing.output)
    assert not expected.exists()  # nothing created
    assert not (elsewhere / "data").exists()
    expected.parent.mkdir(parents=True)
    expected.touch()  # a file that is not a migrated database
    unmigrated = cq("keys", "list")
    assert unmigrated.exit_code == 1
    assert "cannot use the database" in flat(unmigrated.output)
    monkeypatch.setenv("CQ_DATABASE_URL", local_url)  # honoured over the default
    name = f"anywhere-{uuid.uuid4().hex[:6]}"
    created = cq("keys", "create", "--name", name, "--scope", "quotes:read")
    assert created.exit_code == 0, created.output
    assert name in cq("keys", "list").stdout
    assert cq("keys", "revoke", name).exit_code == 0


README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_uses_one_key_variable_with_the_scopes_its_examples_need() -> None:
    text = README.read_text()
    assert "$CQ_KEY" not in text
    assert '"$KEY"' not in text
    assert "CQ_API_KEY" in text
    create = re.search(r"export CQ_API_KEY=\$\(\.venv/bin/cq keys create (.*?)\)", text,
                       re.S)
    assert create is not None
    scopes = set(re.findall(r"--scope (\S+)", create.group(1)))
    # cq quote / quotes requote write quotes, quotes get|verify|diff read them, and
    # cq catalog import writes the catalogue.
    assert {"quotes:write", "quotes:read", "catalog:write"} <= scopes


def test_readme_catalog_lines_work_as_written(local: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import shlex

    monkeypatch.chdir(tmp_path)
    lines = [line.split("#")[0].strip() for line in README.read_text().splitlines()
             if line.startswith(("cq catalog versions", "cq catalog export",
                                 "cq catalog import"))]
    assert [shlex.split(line)[2] for line in lines] == ["versions", "export", "import"]
    for line in lines:
        assert "|" not in line
        args = shlex.split(line)[1:]
        result = cq(*args, "--local")  # the README's server, in process
        assert result.exit_code == 0, (line, result.output)
    assert (tmp_path / "prices.csv").stat().st_size > 0


def test_quotes_diff_and_verify_are_legible_at_80_columns(local: str, tmp_path: Path) -> None:
    """Issue 18: every table fits 80 columns; the diff's lines table shows B's commitment
    and both changes, amounts whole."""
    first = quote_json(*AWS_512, "--term", "on_demand", "--budget", "1000000")
    second = quote_json(*AWS_512, "--term", "on_demand", "--budget", "2000000")
    diff = cq("quotes", "diff", "--local", "--all", first["id"], second["id"], columns=80)
    assert diff.exit_code == 0, diff.output
    text = legible(diff.output)
    assert "commitment B" in text
    assert "Δ job cost" in text
    rec = second["recommended"]
    assert bare(rec["commitment_total"], rec["currency"]) in text
    verify = cq("quotes", "verify", "--local", first["id"], columns=80)
    assert verify.exit_code == 0, verify.output
    legible(verify.output)


def test_an_amortised_quote_is_legible_at_80_columns(local: str) -> None:
    """The amortised table has one more amount column (the amount judged); it still fits."""
    result = cq("quote", "--local", *AWS_8_RESERVED, "--accounting", "amortised",
                "--utilisation", "0.7", columns=80)
    assert result.exit_code in (0, 3), result.output
    text = legible(result.output)
    assert "judged" in text


def test_numbers_are_right_aligned(local: str) -> None:
    """Issue 18: in a table every amount of one column ends at the same column, whatever
    its width (a left-aligned or centred column would not)."""
    answer = quote_json(*AWS_512, "--budget", "1.00")
    text = legible(cq("quote", "--local", *AWS_512, "--budget", "1.00", columns=80).stdout)
    shown = answer["lines"] or list(answer["cheapest_per_term"].values())
    rows = text.splitlines()
    for key in ("commitment_total", "job_cost_total"):
        ends: set[int] = set()
        widths: set[int] = set()
        for line in shown:
            value = bare(line[key])
            row = next(r for r in rows if value in r and f"{line['num_gpus']:,} ×" in r)
            # On demand the two amounts are equal: the commitment comes first, the job cost
            # second.
            at = row.index(value) if key == "commitment_total" else row.rindex(value)
            ends.add(at + len(value))
            widths.add(len(value))
        assert len(ends) == 1, (key, ends)
    # The check has teeth only when the amounts differ in width.
    assert len({len(bare(x["commitment_total"])) for x in shown}) > 1 or len(widths) > 1



SERVICE_TEXT = "see [docs/serving.md] for why; :warning: [bold]not a style[/]"


def test_the_service_text_is_printed_as_written(api: TestClient,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Warnings and problem details come from the service: console markup would drop
    "[docs/serving.md]" and style "[bold]", and emoji codes would turn ":warning:" into a
    symbol. cq prints them as written (its own labels are styled Text parts)."""
    import io

    import typer

    from service.cli import common, estimate
    from service.cli.client import ApiProblemError

    screen, errors = io.StringIO(), io.StringIO()
    monkeypatch.setattr(common.out, "_file", screen)  # undone to None: sys.stdout again
    monkeypatch.setattr(common.err, "_file", errors)
    monkeypatch.setenv("COLUMNS", "400")
    answer = api.post("/v1/estimates", json=ESTIMATE_EXAMPLE).json()
    answer["warnings"] = [SERVICE_TEXT]
    estimate.render_estimate(answer)
    assert f"warning: {SERVICE_TEXT}" in screen.getvalue()

    @common.handled
    def fails() -> None:
        raise ApiProblemError(status=422, title="Request validation failed",
                              detail=SERVICE_TEXT)

    with pytest.raises(typer.Exit):
        fails()
    assert errors.getvalue().strip() == f"422 Request validation failed: {SERVICE_TEXT}"


def test_estimate_states_hybrid_sharding(local: str, api: TestClient) -> None:
    flags = ["--model", "llama3.1-8b", "--accelerator", "h100-sxm5-80gb", "--gpus", "64",
             "--tokens", "1e11", "--seq-len", "4096", "--global-batch", "128", "--tp", "1",
             "--pp", "1", "--zero-stage", "3", "--dp-shard", "8"]
    result = cq("estimate", "--local", "--json", *flags)
    assert result.exit_code == 0, result.output
    body = {"model": {"preset": "llama3.1-8b"},
            "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 64},
            "parallelism": {"tp": 1, "pp": 1, "zero_stage": 3, "dp_shard": 8},
            "training": {"seq_len": 4096, "global_batch_seqs": 128, "tokens": 1e11}}
    assert json.loads(result.stdout) == api.post("/v1/estimates", json=body).json()
    assert json.loads(result.stdout)["resolved"]["parallelism"]["dp_shard"] == 8
    refused = cq("estimate", "--local", "--json", *flags[:-1], "3")
    assert refused.exit_code == 1
    assert "parallelism.dp_shard" in refused.stdout


# cq estimate --method lora --lora-rank and --method rl (issue 43); here, not in a module of
# their own, to share this module's local server (about 5 s to start).
FINETUNE_LAYOUT = ["--model", "llama3.1-8b", "--accelerator", "h100-sxm5-80gb", "--gpus",
                   "8", "--dp", "8", "--tp", "1", "--pp", "1", "--zero-stage", "3",
                   "--recompute", "full"]


def _finetune_body(**training: Any) -> dict[str, Any]:
    """FINETUNE_LAYOUT's request body at 1e9 tokens of 2,048, 64 a batch, with ``training``."""
    return {
        "model": {"preset": "llama3.1-8b"},
        "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 8},
        "parallelism": {"tp": 1, "pp": 1, "dp": 8, "zero_stage": 3, "recompute": "full"},
        "training": {"seq_len": 2048, "global_batch_seqs": 64, "tokens": 1e9, **training}}


def test_lora_rank_reaches_the_estimate(local: str, api: TestClient) -> None:
    result = cq("estimate", "--local", "--json", *FINETUNE_LAYOUT, "--tokens", "1e9",
                "--seq-len", "2048", "--global-batch", "64", "--method", "lora",
                "--lora-rank", "16")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    expected = api.post("/v1/estimates", json=_finetune_body(
        method="lora", lora={"rank": 16})).json()
    assert answer == expected
    assert answer["params"]["trainable"] < answer["params"]["total"] / 50


def test_optimizer_and_loss_kernel_reach_the_estimate(local: str, api: TestClient) -> None:
    """--optimizer adamw_8bit and --loss-kernel fused (issue 43) are the API's fields: the
    same answer as the body, less memory than the defaults, and a bad kernel names its
    field."""
    flags = [*FINETUNE_LAYOUT, "--tokens", "1e9", "--seq-len", "2048", "--global-batch", "64",
             "--method", "lora", "--lora-rank", "16"]
    result = cq("estimate", "--local", "--json", *flags, "--optimizer", "adamw_8bit",
                "--loss-kernel", "fused")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    expected = api.post("/v1/estimates", json=_finetune_body(
        method="lora", lora={"rank": 16}, optimizer="adamw_8bit", loss_kernel="fused")).json()
    assert answer == expected
    plain = json.loads(cq("estimate", "--local", "--json", *flags).stdout)
    assert answer["memory"]["peak_bytes_per_gpu"] < plain["memory"]["peak_bytes_per_gpu"]
    refused = cq("estimate", "--local", "--json", *flags, "--loss-kernel", "magic")
    assert refused.exit_code == 1
    assert "training.loss_kernel" in refused.stdout


def test_rl_shows_both_placements_by_phase(local: str) -> None:
    flags = [*FINETUNE_LAYOUT, "--method", "rl", "--rl-steps", "20", "--prompts-per-step", "64",
             "--samples-per-prompt", "8", "--prompt-tokens", "256", "--response-tokens", "512"]
    answer = json.loads(cq("estimate", "--local", "--json", *flags).stdout)
    assert answer["rl"]["rollouts_per_step"] == 512
    assert answer["time"]["num_steps"] == 20
    table = cq("estimate", "--local", *flags, columns=160)
    assert table.exit_code == 0, table.output
    text = flat(table.stdout)
    assert f"faster: {answer['rl']['faster_placement']}" in text
    for word in ("generation", "weight sync", "disaggregated"):
        assert word in text


def test_rl_without_a_response_length_names_the_field(local: str) -> None:
    result = cq("estimate", "--local", "--json", *FINETUNE_LAYOUT, "--method", "rl",
                "--rl-steps", "20", "--prompts-per-step", "64", "--samples-per-prompt", "8",
                "--prompt-tokens", "256")
    assert result.exit_code != 0
    assert "training.rl.response_tokens" in result.stdout

# --- cq portfolio create (issue 44): YAML in, a Markdown decision memo, the gate -----------

PORTFOLIO_PLAN = {
    "name": "cli portfolio", "horizon": {"start": "2027-01", "months": 2},
    "jobs": [{"id": "a", "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb",
                                                    "gpu_hours": 8000, "num_gpus": 8}},
              "earliest_start": "2027-01", "deadline": "2027-02"}],
    "providers": ["aws"], "regions": ["us-east-1"],
}


def _portfolio(plan: dict[str, object], tmp_path: Path, *args: str) -> object:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return runner.invoke(app, ["portfolio", "create", str(path), "--local", *args],
                         catch_exceptions=False)


def test_portfolio_markdown_memo_and_the_gate(local: str, tmp_path: Path) -> None:
    memo = _portfolio(PORTFOLIO_PLAN, tmp_path, "--format", "markdown", "--fail-on", "reject")
    assert memo.exit_code == 0, memo.output  # type: ignore[attr-defined]
    text = memo.output  # type: ignore[attr-defined]
    assert "Portfolio cli portfolio: approve" in text
    assert "| all_on_demand |" in text
    assert "### Cash per month" in text
    budget = {"amount": "1.00", "currency": "USD", "per": "month"}
    broke = _portfolio({**PORTFOLIO_PLAN, "budget": budget}, tmp_path,
                       "--format", "markdown", "--fail-on", "reject")
    assert broke.exit_code == 3  # type: ignore[attr-defined]
    assert "budget_exceeded" in broke.output  # type: ignore[attr-defined]


@pytest.mark.parametrize("text", ["- just\n- a list\n", "{unclosed: [\n"])
def test_a_portfolio_plan_that_is_no_mapping_is_a_usage_error(local: str, tmp_path: Path,
                                                    text: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["portfolio", "create", str(path), "--local"])
    assert result.exit_code == 2
