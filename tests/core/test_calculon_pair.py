"""``benchmarks/calculon_pair.py`` without Calculon: a clear message, never a traceback (it
is not a dependency); our side of each case is a valid estimate on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import calculon_pair


def test_no_path_names_where_to_get_calculon(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("CALCULON_PATH", raising=False)
    with pytest.raises(SystemExit) as exited:
        calculon_pair.main([])
    assert exited.value.code == 2
    assert "CALCULON_PATH" in capsys.readouterr().err


def test_a_path_without_calculon_says_so(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exited:
        calculon_pair.main([str(tmp_path)])
    message = str(exited.value.code)
    assert str(tmp_path) in message
    assert "calculon/llm/llm.py" in message
    assert "github.com/calculon-ai/calculon" in message


@pytest.mark.parametrize("case", calculon_pair.CASES, ids=lambda c: c.name)
def test_our_side_of_each_case_is_a_plan_of_the_stated_gpus(
        case: calculon_pair.Case) -> None:
    step_s = calculon_pair._our_call(case)()
    assert 0 < step_s < 600
    exe = case.calculon_exe
    if isinstance(exe, dict):  # the same layout on both sides
        assert (exe["tensor_par"], exe["pipeline_par"], exe["data_par"]) == (
            case.plan.tp, case.plan.pp, case.plan.dp)
        assert exe["batch_size"] == case.training.global_batch_seqs
