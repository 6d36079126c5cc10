"""``cq calibrate create|get`` (issue 37): the documented CSV format, the JSON forms, a
Megatron-LM log's iteration times, and the answer in process (``--local``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from service.cli import app
from service.cli.calibrate import megatron_step_s, run_of_row, runs_of_csv
from service.cli.client import CliError

runner = CliRunner()
CSV = """\
model,accelerator,gpus,tp,pp,micro_batch,global_batch,seq_len,zero_stage,recompute,\
framework,step_time_s
llama3.1-8b,h100-sxm5-80gb,8,1,1,1,32,4096,1,full,megatron,2.3
llama3.1-8b,h100-sxm5-80gb,8,2,1,2,32,4096,1,full,megatron,2.4
llama3.1-8b,h100-sxm5-80gb,16,2,1,2,64,4096,1,full,megatron,2.5
"""


def test_a_csv_row_is_an_estimate_body_and_a_measured_step() -> None:
    runs = runs_of_csv(CSV)
    assert len(runs) == 3
    assert runs[1] == {
        "estimate": {
            "model": {"preset": "llama3.1-8b"},
            "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 8},
            "parallelism": {"tp": 2, "pp": 1, "micro_batch": 2, "zero_stage": 1,
                            "recompute": "full"},
            "training": {"seq_len": 4096, "global_batch_seqs": 32, "tokens": 1e9,
                         "framework": "megatron"}},
        "measured": {"step_time_s": 2.4}}


def test_a_custom_architecture_and_flags() -> None:
    run = run_of_row({"num_layers": "8", "hidden_size": "1024", "num_heads": "8",
                      "num_kv_heads": "8", "ffn_hidden_size": "4096", "accelerator": "a",
                      "gpus": "1", "seq_len": "2048", "global_batch": "8",
                      "step_time_s": "0.5", "sequence_parallel": "false",
                      "torch_compile": "true", "framework_version": "2.5"}, 2)
    assert run["estimate"]["model"] == {"num_layers": 8, "hidden_size": 1024, "num_heads": 8,
                                        "num_kv_heads": 8, "ffn_hidden_size": 4096}
    assert run["estimate"]["parallelism"] == {"sequence_parallel": False}
    assert run["estimate"]["training"]["torch_compile"] is True
    assert run["estimate"]["training"]["framework_version"] == "2.5"


@pytest.mark.parametrize(("change", "message"), [
    ({"step_time_s": ""}, "step_time_s must be given"),
    ({"gpus": "eight"}, "gpus must be a whole number"),
    ({"colour": "red"}, "unknown column"),
    ({"model": ""}, "give model"),
])
def test_bad_rows_name_the_line_and_column(change: dict[str, str], message: str) -> None:
    header, first = CSV.splitlines()[:2]
    row = dict(zip(header.split(","), first.split(","), strict=True)) | change
    with pytest.raises(CliError, match=message) as caught:
        run_of_row(row, 2)
    assert "line 2" in str(caught.value)


def test_the_megatron_log_median_skips_the_warmup() -> None:
    lines = [f" iteration {i}/ 100 | elapsed time per iteration (ms): {ms} | loss 2.1"
             for i, ms in enumerate([9000.0, 5000.0, 2100.0, 2000.0, 2200.0], 1)]
    assert megatron_step_s("\n".join(lines), 2) == pytest.approx(2.1)
    with pytest.raises(CliError, match="at least 6"):
        megatron_step_s("\n".join(lines), 5)


def test_create_and_get_in_process(local: str, tmp_path: Path) -> None:
    runs = tmp_path / "runs.csv"
    runs.write_text(CSV, encoding="utf-8")
    made = runner.invoke(app, ["calibrate", "create", str(runs), "--local", "--json"])
    assert made.exit_code == 0, made.output
    answer = json.loads(made.output)
    assert answer["name"] == "runs"
    assert answer["runs_used"] == 3
    assert "communication" in answer["uninformed"]
    got = runner.invoke(app, ["calibrate", "get", answer["id"], "--local", "--json"])
    assert got.exit_code == 0
    assert json.loads(got.output) == answer
    table = runner.invoke(app, ["calibrate", "get", answer["id"], "--local"])
    assert "not informed" in table.output
    assert answer["id"] in table.output
    # The same runs as JSON (the list form), and a refused run: exit 1 naming the field.
    as_json = tmp_path / "runs.json"
    bad = [*answer_runs(CSV)]
    bad[0]["measured"]["step_time_s"] = 0
    as_json.write_text(json.dumps(bad), encoding="utf-8")
    refused = runner.invoke(app, ["calibrate", "create", str(as_json), "--local"])
    assert refused.exit_code == 1
    assert "runs.0.measured.step_time_s" in refused.output


def answer_runs(text: str) -> list[dict[str, object]]:
    return runs_of_csv(text)
