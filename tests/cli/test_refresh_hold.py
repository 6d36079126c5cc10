"""``cq catalog refresh --hold-on-moves`` holds removals as well as price moves (issue 39):
before, a refresh that moved no price over the threshold was stored however many offers it
removed. The module's own local database (tests/cli/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from service.cli import app

SAMPLE = Path(__file__).resolve().parents[1] / "data/importers/aws_ec2_offer.json"
runner = CliRunner()


def cq(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert "Traceback" not in result.output
    return result


def _current(local: str) -> str:
    answer = cq("catalog", "versions", "--local", "--json")
    assert answer.exit_code == 0, answer.output
    return str(json.loads(answer.stdout)["items"][0]["id"])


def test_a_refresh_that_removes_offers_is_held_and_then_one_that_removes_none_is_stored(
        local: str) -> None:
    before = _current(local)
    # A threshold of 5 (500 %): no price move is listed, but the us-east-1 file removes the
    # 48 AWS us-east-1 on-demand and reserved offers it no longer has.
    held = cq("catalog", "refresh", "--local", "--provider", "aws", "--from-file", str(SAMPLE),
              "--threshold", "5", "--hold-on-moves")
    assert held.exit_code == 4, held.output
    assert "held: 48 offers would be removed; nothing stored" in held.stdout
    assert "Removed: 48" in held.stdout
    assert _current(local) == before
    as_json = cq("catalog", "refresh", "--local", "--provider", "aws", "--from-file",
                 str(SAMPLE), "--threshold", "5", "--hold-on-moves", "--json")
    assert as_json.exit_code == 4, as_json.output
    report = json.loads(as_json.stdout)
    assert (report["version_id"], report["removed"], report["moves_over_threshold"]) == (
        None, 48, [])
    assert {r["region"] for r in report["removals"]} == {"us-east-1"}
    assert _current(local) == before

    # Reviewed: stored without the hold. The same file again removes nothing and moves
    # nothing, so the hold lets it through.
    stored = cq("catalog", "refresh", "--local", "--provider", "aws", "--from-file",
                str(SAMPLE), "--threshold", "5")
    assert stored.exit_code == 0, stored.output
    assert "-48 removed" in stored.stdout
    reviewed = _current(local)
    assert reviewed != before
    again = cq("catalog", "refresh", "--local", "--provider", "aws", "--from-file",
               str(SAMPLE), "--threshold", "5", "--hold-on-moves")
    assert again.exit_code == 0, again.output
    assert "-0 removed" in again.stdout
    assert _current(local) != reviewed
