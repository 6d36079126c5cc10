"""Amounts are never cut at 80 columns (issue 41, item 6): the tables of ``cq quote``,
``cq quotes get``, ``cq budget-plan --objective largest_model`` and ``cq catalog refresh``,
drawn from answers with long amounts (1,234,567,890.12 USD) and long names, fit 80 columns and
show every amount whole.

Before the fix rich fitted these tables by cutting every column, amounts included
("1,234,56…"); an infeasible line's reason sat in the commitment column and squeezed the rest
away; a budget-plan model's note (prose with amounts in it) was cut word by word; the
refresh's prices were cut to make room for the offer ids. Each command runs here as a reader
runs it (``CliRunner``, ``COLUMNS=80``), on a client that answers the given JSON, so the
figures are the test's own and no server is involved.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from service.api import presentation as fmt
from service.cli import app
from service.cli import budget as cli_budget
from service.cli import catalog as cli_catalog
from service.cli import quote as cli_quote
from service.cli import tables as tb
from tests.readme.test_readme_blocks import CUT_AMOUNT

runner = CliRunner()
WIDTH = 80
BIG = "1234567890.12"  # 1,234,567,890.12 USD: 16 characters in a cell
DAY_S = 86_400.0


class _Answer:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def json(self) -> dict[str, Any]:
        return self.body


class _Client:
    """Answers every call with one JSON body (the command's rendering is what is tested)."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def call(self, method: str, path: str, **_: Any) -> _Answer:
        return _Answer(self.body)


def answering(monkeypatch: pytest.MonkeyPatch, module: Any, body: dict[str, Any]) -> None:
    @contextmanager
    def connect(api: str, api_key: str | None, local: bool) -> Iterator[_Client]:
        yield _Client(body)

    monkeypatch.setattr(module, "connect", connect)


def shown(*args: str) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": str(WIDTH)})
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    return result.stdout


def assert_whole(text: str, amounts: list[str]) -> None:
    """Every line fits, no cell is a number cut short, and each amount appears whole."""
    for row in text.splitlines():
        assert len(row) <= WIDTH, row
        assert not CUT_AMOUNT.search(row), row
    assert "…" not in text
    for amount in amounts:
        assert amount in text, amount


def line(provider: str, region: str, instance: str, term: str, commitment: str,
         job_cost: str, **extra: Any) -> dict[str, Any]:
    days = 44.2 * DAY_S
    return {"provider": provider, "region": region, "zone": None, "instance_type": instance,
            "term": term, "num_gpus": 4096, "currency": "USD", "accounting": "commitment",
            "commitment_total": commitment, "job_cost_total": job_cost, "total": job_cost,
            "feasible": True, "infeasible_reason": None, "within_budget": False,
            "policy_outcome": "fail", "flags": ["undated_price", "indicative_price"],
            "offer_id": f"off_{provider}_{term}", "wall_clock_s": days,
            "uncertainty": {"wall_clock_s": {"p10": 0.8 * days, "p50": days,
                                             "p90": 1.2 * days}},
            **extra}


LONG = [line("azure", "northcentralus-long-region-name", "Standard_ND96isr_H100_v5_extended",
             "reserved_3y", BIG, "987654321.98"),
        line("gcp", "northamerica-northeast2", "a3-edgegpu-8g-megascale", "capacity_block",
             "123456789.01", BIG)]
INFEASIBLE = line("azure", "northcentralus", "Standard_ND96isr_H100_v5", "spot", "0", "0",
                  feasible=False, commitment_total=None, job_cost_total=None, total=None,
                  infeasible_reason="interrupted every 281 s on average, less than the 600 s "
                                    "a restart takes (Λ·R = 2.13 ≥ 1): the job cannot make "
                                    "progress")


def quote_answer(accounting: str = "commitment") -> dict[str, Any]:
    lines = [{**x, "accounting": accounting,
              **({"total": "1111111111.11"} if accounting == "amortised" and x["feasible"]
                 else {})}
             for x in [*LONG, INFEASIBLE]]
    return {"id": "q_0123456789abcdef0123456789abcdef", "accounting": accounting,
            "lines": lines, "cheapest_per_term": {}, "recommended": lines[1],
            "summary": {"lines": 3, "feasible_lines": 2, "min_total": "123456789.01",
                        "max_total": BIG, "currency": "USD"},
            "budget": {"amount": "2000000000.00", "currency": "USD"}, "verdict": "reject",
            "reasons": [], "reason_details": [],
            "policy_result": {"name": "default", "revision": None, "outcome": "fail"},
            "rejected_offers": {"count": 0}, "catalog_version": "cv_000001",
            "estimator_version": "0.1.0"}


def money(amount: str) -> str:
    return fmt.money(amount, "USD").removesuffix(" USD")


AMOUNTS = [money(BIG), money("987654321.98"), money("123456789.01")]


@pytest.mark.parametrize("accounting", ["commitment", "amortised"])
def test_cq_quote_shows_long_amounts_whole_at_80_columns(
        monkeypatch: pytest.MonkeyPatch, accounting: str) -> None:
    answering(monkeypatch, cli_quote, quote_answer(accounting))
    text = shown("quote", "--gpu-hours", "1000", "--accelerator", "h100-sxm5-80gb",
                 "--gpus", "4096")
    assert_whole(text, [*AMOUNTS, "(35.4–53.0)",
                        *([money("1111111111.11")] if accounting == "amortised" else [])])
    # The infeasible line's reason is prose under the table, whole, not a cell.
    flat = " ".join(text.split())
    assert "infeasible: 4,096 × azure northcentralus Standard_ND96isr_H100_v5 spot: " \
           "interrupted every 281 s on average" in flat
    assert "(Λ·R = 2.13 ≥ 1): the job cannot make progress" in flat


def test_cq_quotes_get_shows_long_amounts_whole_at_80_columns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    answering(monkeypatch, cli_quote, quote_answer())
    text = shown("quotes", "get", "q_0123456789abcdef0123456789abcdef")
    assert_whole(text, [*AMOUNTS, "(35.4–53.0)"])
    assert "days p50" in text  # this one fits as a grid: the band keeps its own column


def budget_answer() -> dict[str, Any]:
    arch = {"num_layers": 93, "hidden_size": 10_240, "num_heads": 80, "num_kv_heads": 8,
            "ffn_hidden_size": 27_392, "vocab_size": 128_256, "mlp": "swiglu"}
    note = ("nothing fits the budget: the cheapest line the policy allows has a commitment "
            f"total of {fmt.money(BIG, 'USD')} (103% of the budget); the cheapest, 4,096 × "
            "aws us-east-1 p5.48xlarge spot at 987,654,321.98 USD, fails "
            "forbid_unverified_spot_capacity")
    tried = [{"preset": "llama3-style-h10240-l93", "params": 1.023e11, "tokens": 2.0e12,
              "architecture": arch, "lines_within": 12_345, "bound": None,
              "note": "fits the budget and deadline"},
             {"preset": "llama3-style-h12288-l101", "params": 1.8e11, "tokens": 3.6e12,
              "architecture": arch, "lines_within": 0, "bound": "budget", "note": note}]
    return {"budget": {"amount": "2000000000.00", "currency": "USD"}, "deadline_s": 60 * DAY_S,
            "policy": {"name": "default", "revision": None}, "catalog_version": "cv_000001",
            "accounting": "commitment", "objective": "largest_model",
            "largest_model": {"preset": "llama3-style-h10240-l93", "params": 1.023e11,
                              "tokens": 2.0e12, "architecture": arch, "line": LONG[0],
                              "share_of_budget": 0.617},
            "binding_constraint": "budget", "models_tried": tried,
            "soonest_within_budget": LONG, "cheapest_before_deadline": [*LONG, INFEASIBLE],
            "explanation": ""}


def test_cq_budget_plan_largest_model_shows_long_amounts_whole_at_80_columns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    answering(monkeypatch, cli_budget, budget_answer())
    text = shown("budget-plan", "--objective", "largest_model", "--accelerator",
                 "h100-sxm5-80gb", "--gpus-range", "256:512:256", "--budget", "2000000000")
    assert_whole(text, [*AMOUNTS, "(35.4–53.0)"])
    flat = " ".join(text.split())
    # The long note is under the table, its amounts whole; the short one stays in its row.
    assert (f"(1) llama3-style-h12288-l101: nothing fits the budget: the cheapest line the "
            f"policy allows has a commitment total of {fmt.money(BIG, 'USD')}") in flat
    assert "at 987,654,321.98 USD, fails" in flat
    assert "llama3-style-h10240-l93" in text  # a model's name is not folded either


def refresh_answer() -> dict[str, Any]:
    offer = "off_0123456789abcdef01234567"  # 28 characters, as the catalogue's ids
    return {"provider": "aws", "version_id": None, "added": 1, "changed": 1, "removed": 1,
            "unchanged": 0, "skipped": {}, "threshold_fraction": "0.05",
            "moves_over_threshold": [
                {"offer_id": offer, "instance_type": "p5en.48xlarge-extended",
                 "region": "ap-southeast-5-long", "zone": "ap-southeast-5-long-1a",
                 "term": "capacity_block", "before": "123456789.012345",
                 "after": "1234567890.123456", "change_fraction": "9.0000001"}],
            "removals": [
                {"offer_id": offer, "instance_type": "g6e.48xlarge", "region": "us-east-1",
                 "zone": None, "term": "reserved_3y", "price_per_hour": "1234567890.123456"}]}


def test_cq_catalog_refresh_shows_long_prices_whole_at_80_columns(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    answering(monkeypatch, cli_catalog, refresh_answer())
    document = tmp_path / "offer.json"
    document.write_text("{}")
    text = shown("catalog", "refresh", "--provider", "aws", "--from-file", str(document),
                 "--dry-run", "--threshold", "0.05")
    assert_whole(text, ["123456789.012345", "1234567890.123456", "+900.0%"])
    assert "off_0123456789abcdef01234567" in text  # the id whole, on its own line


def render(table: tb.FitTable, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()


def test_a_table_too_wide_for_its_numbers_folds_then_stacks_but_never_cuts() -> None:
    """The renderer's own guarantee: narrower than its numbers, a table first moves its
    secondary columns under the first text cell, then prints one block per row."""
    table = tb.table("T", [tb.Col("where"), tb.Col("days", secondary=True),
                           tb.num("commitment"), tb.num("job cost"), tb.num("judged")])
    table.add_row("aws us-east-1 p5.48xlarge", "44.2 (37.9–50.7)", "1,234,567,890.12",
                  "987,654,321.98", "1,111,111,111.11")
    wide = render(table, 100)
    assert "days" in wide.splitlines()[1]  # a column of its own where it fits
    folded = render(table, 70)
    assert "days: 44.2" in folded
    stacked = render(table, 40)
    assert "  commitment: 1,234,567,890.12" in stacked
    for text, width in ((wide, 100), (folded, 70), (stacked, 40)):
        for row in text.splitlines():
            assert len(row.rstrip()) <= width, row
            assert not CUT_AMOUNT.search(row), row
        for amount in ("1,234,567,890.12", "987,654,321.98", "1,111,111,111.11"):
            assert amount in text
        assert re.search(r"\d…", text) is None
