"""``cq what-if`` (issue 42): the sweep's table at 80 columns, every figure whole, and
``--format json`` equal to the API's answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from service.api import presentation as fmt
from service.api.schemas.whatifs import WHAT_IF_BASE
from service.cli import app
from service.cli.whatif import parse_set
from tests.readme.test_readme_blocks import CUT_AMOUNT

runner = CliRunner()
WIDTH = 80
SETS = ["--set", "cluster.scaleout_bytes_per_s_per_gpu=1.25e10",
        "--set", "cluster.num_gpus=2048;parallelism.dp=64",
        "--set", "training.global_batch_seqs=1024",
        "--set", "parallelism.tp=7"]


def cq(*args: str) -> Any:
    result = runner.invoke(app, list(args), env={"COLUMNS": str(WIDTH)})
    assert "Traceback" not in result.output
    return result


@pytest.fixture
def base_file(tmp_path: Path) -> Path:
    path = tmp_path / "base.json"
    path.write_text(json.dumps(WHAT_IF_BASE))
    return path


def test_parse_set_reads_json_values_and_plain_words() -> None:
    assert parse_set("cluster.num_gpus=2048; parallelism.dp=64") == {
        "cluster.num_gpus": 2048, "parallelism.dp": 64}
    assert parse_set("parallelism.recompute=full") == {"parallelism.recompute": "full"}
    assert parse_set("training.tokens=1e12") == {"training.tokens": 1e12}
    with pytest.raises(typer.BadParameter):
        parse_set("cluster.num_gpus")


def test_the_table_fits_80_columns_with_every_figure_whole(
        local: str, api: TestClient, base_file: Path) -> None:
    result = cq("what-if", "--local", "--request", str(base_file), *SETS, "--price", "2.50")
    assert result.exit_code == 0, result.output
    text = result.stdout
    for row in text.splitlines():
        assert len(row) <= WIDTH, row
        assert not CUT_AMOUNT.search(row), row
    assert "…" not in text
    answer = api.post("/v1/what-ifs", json={
        "base": WHAT_IF_BASE, "price_per_gpu_hour_usd": "2.50",
        "variations": [{"set": parse_set(v)} for v in SETS[1::2]]}).json()
    # Every figure of the answer appears whole on one line of the table.
    for row in answer["variations"][:3]:
        delta = row["delta"]
        assert fmt.duration(row["summary"]["train_s"]) in text
        assert f"{delta['train_s_fraction'] * 100:+.1f}%" in text
        assert fmt.money(delta["cost_usd"]).removesuffix(" USD").lstrip("-") in text
    assert fmt.money(answer["base"]["cost_usd"]) in text
    # The variation names wrap between words, never inside a number.
    words = {word.strip(",") for word in text.split()}
    assert {"12500000000.0", "2048", "64", "1024"} <= words
    # The invalid variation is named with its reason, and the ranking is printed.
    assert "variation 3:" in text
    assert "must be a multiple of" in " ".join(text.split())
    assert "By |Δ time|: 1 (" in text


def test_format_json_is_the_apis_answer(local: str, api: TestClient, base_file: Path,
                                        tmp_path: Path) -> None:
    variations = tmp_path / "variations.json"
    variations.write_text(json.dumps([
        {"name": "twice the GPUs", "set": {"cluster.num_gpus": 2048, "parallelism.dp": 64}},
        {"training.seq_len": 4096, "training.global_batch_seqs": 1024}]))
    result = cq("what-if", "--local", "--request", str(base_file), "--variations",
                str(variations), "--format", "json")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    expected = api.post("/v1/what-ifs", json={"base": WHAT_IF_BASE, "variations": [
        {"name": "twice the GPUs", "set": {"cluster.num_gpus": 2048, "parallelism.dp": 64}},
        {"set": {"training.seq_len": 4096, "training.global_batch_seqs": 1024}}]}).json()
    assert answer == expected
    assert answer["variations"][0]["name"] == "twice the GPUs"


def test_an_unknown_path_is_the_apis_problem_and_exit_1(local: str, base_file: Path) -> None:
    result = cq("what-if", "--local", "--request", str(base_file), "--set",
                "cluster.fabirc.protocol=roce")
    assert result.exit_code == 1
    assert "cluster.fabirc.protocol" in result.output


def test_no_variation_is_a_usage_error(local: str, base_file: Path) -> None:
    result = cq("what-if", "--local", "--request", str(base_file))
    assert result.exit_code == 2
    assert "--set" in result.output
