"""``cq budget-plan --objective largest_model`` shows the generated architecture, the rules it
was made by and what bound the answer (issue 39, item 7), from the API's own answer."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from typer.testing import CliRunner

from service.api import presentation as fmt
from service.cli import app
from service.cli.budget import bound_text

runner = CliRunner()
FLAGS = ["budget-plan", "--local", "--objective", "largest_model", "--accelerator",
         "h100-sxm5-80gb", "--gpus-range", "256:512:256", "--provider", "aws",
         "--term", "on_demand", "--term", "spot", "--term", "reserved_1y",
         "--deadline-days", "270", "--budget", "1000000"]


def flat(text: str) -> str:
    return re.sub(r"[│╭╮╰╯─\s]+", " ", text)


@pytest.fixture(scope="module")
def answer_and_text(local_url: str) -> tuple[dict[str, Any], str]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CQ_DATABASE_URL", local_url)
        shown = runner.invoke(app, FLAGS, env={"COLUMNS": "200"})
        assert shown.exit_code == 0, shown.output
        raw = runner.invoke(app, [*FLAGS, "--json"])
        assert raw.exit_code == 0, raw.output
    return json.loads(raw.stdout), shown.stdout


def test_the_generated_architecture_and_its_rules_are_shown(
        answer_and_text: tuple[dict[str, Any], str]) -> None:
    answer, text = answer_and_text
    largest = answer["largest_model"]
    assert largest is not None
    arch = largest["architecture"]
    assert arch is not None  # no candidate_models: the generated family was searched
    shown = flat(text)
    assert (f"architecture: {arch['num_layers']:,} layers × hidden {arch['hidden_size']:,}, "
            f"{arch['num_heads']:,} heads ({arch['num_kv_heads']:,} KV), FFN "
            f"{arch['ffn_hidden_size']:,}, vocabulary {arch['vocab_size']:,}") in shown
    assert f"shape rule: {flat(largest['shape_rule'])}" in shown
    assert f"tokens rule: {flat(largest['tokens_rule'])}" in shown
    assert f"{fmt.percent(largest['share_of_budget'])} of the budget" in shown


def test_what_bound_the_answer_is_named_with_the_size_it_stopped(
        answer_and_text: tuple[dict[str, Any], str]) -> None:
    answer, text = answer_and_text
    bound = answer["binding_constraint"]
    assert bound in {"budget", "deadline", "memory", "policy", "no_offer", "search_range",
                     "work_budget"}
    stopped = fmt.stopped_size(answer)
    if stopped is not None:  # the next size tried above the answer, with its own bound
        assert stopped["params"] > answer["largest_model"]["params"]
        assert stopped["bound"]
        assert f"next size tried: {stopped['preset']}" in flat(text)
    assert f"bound by: {bound}" in flat(text)


def test_the_models_tried_are_listed_smallest_first_with_shape_and_bound(
        answer_and_text: tuple[dict[str, Any], str]) -> None:
    answer, text = answer_and_text
    tried = answer["models_tried"]
    assert len(tried) >= 2
    rows = [row for row in text.splitlines() if row.startswith("│ ")]
    names = [row.split("│")[1].strip() for row in rows]
    names = [n for n in names if n]
    by_size = [m["preset"] for m in sorted(tried, key=lambda m: m["params"])]
    assert [n for n in names if n in by_size] == by_size
    for model in tried:
        row = next(r for r in rows if r.split("│")[1].strip() == model["preset"])
        assert fmt.architecture_text(model["architecture"], short=True) in row
        assert (model["bound"] or "—") in row


def test_bound_text_without_a_bound_or_a_stopped_size() -> None:
    assert bound_text({"binding_constraint": None}) is None
    assert bound_text({"binding_constraint": "search_range", "largest_model": {"params": 9},
                       "models_tried": [{"params": 9, "bound": None}]}) == "search_range"
    assert bound_text({"binding_constraint": "memory", "largest_model": None,
                       "models_tried": [{"preset": "a", "params": 5, "bound": "memory"},
                                        {"preset": "b", "params": 3, "bound": "memory"}]}) == (
        "memory (next size tried: b, 3.0 parameters, has no line)")
