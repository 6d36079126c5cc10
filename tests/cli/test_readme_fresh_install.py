"""The README's first ``cq quote`` and its ``cq budget-plan`` as written, on a fresh seed (no
refresh, no import): a verdict a reader can act on (issue 39). Before, every seed price
without a publication date failed ``undated_price``, so the quote was a reject and the budget
plan said "nothing fits the budget" of lines that fit it. The clock is frozen nine days after
the seed's AWS file was read (2026-11-22), as ``tests/api/test_price_dates.py`` freezes it."""

from __future__ import annotations

import datetime as dt
import json
import shlex
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.api.routes import quotes as quote_routes
from service.cli import app
from tests.databases import migrate_and_seed

README = Path(__file__).resolve().parents[2] / "README.md"
NOW = dt.datetime(2026, 12, 1, 12, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def local_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh ``make run``'s database: migrated and seeded, nothing dated by hand."""
    url = f"sqlite:///{tmp_path_factory.mktemp('fresh')}/local.sqlite3"
    migrate_and_seed(url)
    return url


@pytest.fixture(autouse=True)
def frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    class Frozen(dt.datetime):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> dt.datetime:  # type: ignore[override]
            return NOW if tz is not None else NOW.replace(tzinfo=None)

    monkeypatch.setattr(quote_routes, "dt", types.SimpleNamespace(
        datetime=Frozen, timedelta=dt.timedelta, UTC=dt.UTC, date=dt.date))


def readme_command(prefix: str) -> list[str]:
    """The README's first command line starting ``prefix``, its continuations joined, its
    comment and ``--api-key "$CQ_API_KEY"`` (a server's key; ``--local`` needs none) left
    out."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(prefix))
    text = ""
    for line in lines[start:]:
        text += " " + line.split("#")[0].strip().removesuffix("\\")
        if not line.split("#")[0].rstrip().endswith("\\"):
            break
    args = shlex.split(text)
    if "--api-key" in args:
        at = args.index("--api-key")
        del args[at:at + 2]
    return args[1:]


def run(args: list[str]) -> dict[str, object]:
    result = CliRunner().invoke(app, [*args, "--local", "--json"])
    assert result.exit_code == 0, result.output
    answer: dict[str, object] = json.loads(result.stdout)
    return answer


def test_the_readme_first_quote_approves_with_the_observed_date_warning(
        local_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CQ_DATABASE_URL", local_url)
    args = readme_command("cq quote --gpu-hours")
    assert "--budget" in args
    quote = run(args)
    assert quote["verdict"] == "approve", quote["reasons"]
    reasons = quote["reason_details"]
    assert isinstance(reasons, list)
    warned = [r for r in reasons if r["code"] == "price_date_unknown_observed"]
    assert warned, reasons
    assert (warned[0]["date"], warned[0]["age_days"], warned[0]["limit_days"]) == (
        "2026-11-22", 9, 30.0)
    assert "read on 2026-11-22, 9 days ago" in warned[0]["message"]


def test_the_readme_budget_plan_has_lines_and_nothing_to_explain(
        local_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CQ_DATABASE_URL", local_url)
    plan = run(readme_command("cq budget-plan --model"))
    assert plan["soonest_within_budget"], plan["explanation"]
    assert plan["explanation"] == ""
