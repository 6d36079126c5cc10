"""Plans and quotes agree (issue 39, item 6): a parallelism plan carries the quote's failure
and checkpoint goodput, so a 98,304-GPU plan says, as the quote does, that its job cannot make
progress, and a job that can gets the quote's wall-clock."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.schemas.plans import PlanReliabilityIn
from service.api.schemas.quotes import ReliabilityIn
from service.core.plausibility import NO_PROGRESS

KeyMaker = Callable[..., dict[str, str]]


def job(num_gpus: int, preset: str = "llama3.1-405b", tokens: float = 15.6e12,
        batch: int = 16384) -> dict[str, Any]:
    return {"model": {"preset": preset},
            "training": {"seq_len": 8192, "global_batch_seqs": batch, "tokens": tokens},
            "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": num_gpus,
                        "gpus_per_node": 8}}


def plan_of(client: TestClient, spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    response = client.post("/v1/parallelism-plans", json={**spec, "top_k": 1, **extra})
    assert response.status_code == 200, response.text[:500]
    return response.json()["plans"][0]  # type: ignore[no-any-return]


def quote_of(client: TestClient, headers: dict[str, str], spec: dict[str, Any],
             **extra: Any) -> dict[str, Any]:
    body = {"workload": {"optimise": {"model": spec["model"], "training": spec["training"],
                                      "clusters": [spec["cluster"]]}},
            "providers": ["aws", "onprem"], "terms": ["on_demand", "onprem"], **extra}
    response = client.post("/v1/quotes", json=body,
                           headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
    assert response.status_code == 201, response.text[:500]
    return response.json()  # type: ignore[no-any-return]


def test_a_98304_gpu_plan_and_its_quote_agree_the_job_cannot_progress(
    client: TestClient, api_key: KeyMaker,
) -> None:
    spec = job(98_304)
    plan = plan_of(client, spec)
    quote = quote_of(client, api_key("quotes:write"), spec)
    # The quote: every line infeasible, checkpoints and restarts take 119% of the time.
    lines = quote["lines"]
    assert lines
    assert all(not line["feasible"] for line in lines)
    reasons = {line["infeasible_reason"] for line in lines}
    assert len(reasons) == 1
    reason = reasons.pop()
    assert "cannot make progress" in reason
    # The plan (before issue 39: "10.0 days", no failures): the same verdict, the same words.
    failures = plan["failures"]
    assert failures["progresses"] is False
    assert failures["reason"] == reason
    assert failures["goodput_fraction"] == 0.0
    assert failures["train_s_with_failures"] is None
    assert failures["interruptions_per_hour"] == pytest.approx(2.2e-5 * 98_304, rel=1e-12)
    coded = [d for d in plan["warning_details"] if d["code"] == NO_PROGRESS]
    assert len(coded) == 1
    assert coded[0]["field"] == "reliability"
    assert reason in coded[0]["message"]
    assert coded[0]["message"] in plan["warnings"]


def test_a_job_that_can_progress_gets_the_quotes_wall_clock(
    client: TestClient, api_key: KeyMaker,
) -> None:
    # 405B on 16,384 H100 (Llama 3's own scale): about 36% lost at the quote's defaults.
    spec = job(16_384)
    plan = plan_of(client, spec)
    quote = quote_of(client, api_key("quotes:write"), spec)
    failures = plan["failures"]
    assert failures["progresses"] is True
    assert 0.2 < failures["lost_fraction"] < 0.6
    expected = plan["time"]["train_s"] * (1 + failures["lost_fraction"])
    assert failures["train_s_with_failures"] == pytest.approx(expected, rel=1e-12)
    assert failures["goodput_fraction"] == pytest.approx(1 / (1 + failures["lost_fraction"]),
                                                         rel=1e-12)
    # The on-prem line is timed on the plan's own node (the reference estimate): the same
    # wall-clock, within the cents-exact Decimal arithmetic of its billed hours.
    onprem = [line for line in quote["lines"] if line["provider"] == "onprem"]
    assert len(onprem) == 1
    assert onprem[0]["feasible"]
    for dimension, value in plan["parallelism"].items():  # the quote sized the same plan
        assert onprem[0]["plan"][dimension] == value, dimension
    assert onprem[0]["goodput_loss_fraction"] == pytest.approx(failures["lost_fraction"],
                                                               rel=1e-12)
    assert onprem[0]["wall_clock_s"] == pytest.approx(failures["train_s_with_failures"],
                                                      rel=1e-9)
    # Cloud lines count instances x GPUs per instance: the same loss.
    aws = [line for line in quote["lines"] if line["provider"] == "aws" and line["feasible"]]
    assert aws
    for line in aws:
        assert line["goodput_loss_fraction"] == pytest.approx(failures["lost_fraction"],
                                                              rel=1e-9)


def test_the_request_overrides_the_failure_defaults_as_the_quote_does(
    client: TestClient, api_key: KeyMaker,
) -> None:
    spec = job(98_304)
    faster_storage = {"reliability": {"checkpoint_bytes_per_s": 1e12}}  # 1 TB/s
    plan = plan_of(client, spec, **faster_storage)
    quote = quote_of(client, api_key("quotes:write"), spec, **faster_storage)
    failures = plan["failures"]
    assert failures["progresses"] is True
    assert failures["checkpoint_bytes_per_s"] == {
        "value": 1e12, "source": "request (reliability.checkpoint_bytes_per_s)"}
    assert "Dubey" in failures["failure_rate_per_gpu_hour"]["source"]
    assert not [d for d in plan["warning_details"] if d["code"] == NO_PROGRESS]
    onprem = next(line for line in quote["lines"] if line["provider"] == "onprem")
    assert onprem["goodput_loss_fraction"] == pytest.approx(failures["lost_fraction"],
                                                            rel=1e-12)
    assert onprem["wall_clock_s"] == pytest.approx(failures["train_s_with_failures"],
                                                   rel=1e-9)


def test_a_sweep_ranks_a_job_that_cannot_progress_last_with_the_code(
    client: TestClient,
) -> None:
    body = {"model": {"preset": "llama3.1-8b"},
            "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 1e12},
            "clusters": [{"accelerator": "h100-sxm5-80gb", "num_gpus": 512},
                         {"accelerator": "h100-sxm5-80gb", "num_gpus": 64}],
            "constraints": {"vary": ["tp", "pp", "micro_batch"]},
            # 512 GPUs interrupted every 59 min, less than a 1 h restart: no progress.
            "reliability": {"failure_rate_per_gpu_hour": 2e-3, "restart_s": 3600.0},
            "top_k": 100}
    response = client.post("/v1/parallelism-plans", json=body)
    assert response.status_code == 200, response.text[:500]
    plans = response.json()["plans"]
    counts = [p["num_gpus"] for p in plans]
    assert counts[0] == 64
    assert 512 in counts
    assert counts == sorted(counts)
    for p in plans:
        stuck = [d for d in p["warning_details"] if d["code"] == NO_PROGRESS]
        assert bool(stuck) == (p["num_gpus"] == 512)
        assert p["failures"]["progresses"] == (p["num_gpus"] == 64)
    assert all(p["num_gpus"] == 64 for p in response.json()["pareto"])


def test_the_plans_reliability_fields_are_the_quotes() -> None:
    ours, theirs = PlanReliabilityIn.model_fields, ReliabilityIn.model_fields
    assert set(ours) == set(theirs)
    for name, field in ours.items():
        assert field.default == theirs[name].default
        assert field.metadata == theirs[name].metadata
