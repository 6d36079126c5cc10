"""POST /v1/estimates with training.method rl and training.rl (issue 43)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.test_estimates import assert_problem

RL = {"steps": 50, "prompts_per_step": 64, "samples_per_prompt": 8, "prompt_tokens": 256,
      "response_tokens": 512}


def rl_body(rl: dict[str, Any] | None = None, **training: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"seq_len": 768, "global_batch_seqs": 128, "method": "rl",
                              "framework": "fsdp",
                              "rl": dict(RL) if rl is None else rl}
    values.update(training)
    return {
        "model": {"preset": "llama3.1-8b"},
        "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 8, "gpus_per_node": 8},
        "parallelism": {"tp": 1, "pp": 1, "dp": 8, "cp": 1, "micro_batch": 1,
                        "zero_stage": 3, "recompute": "full", "sequence_parallel": False},
        "training": values,
    }


def test_rl_estimate_reports_both_placements_by_phase(client: TestClient) -> None:
    response = client.post("/v1/estimates", json=rl_body())
    assert response.status_code == 200, response.text
    answer = response.json()
    rl = answer["rl"]
    assert rl["rollouts_per_step"] == 512
    assert rl["tokens_per_step"] == 512 * 768
    colocated, split = rl["colocated"], rl["disaggregated"]
    assert split is not None
    assert split["training_gpus"] + split["rollout_gpus"] == 8
    assert set(colocated["phases_s"]) == {"generation", "old_log_prob", "reference", "reward",
                                          "policy_update", "weight_sync", "offload"}
    faster = min((colocated, split), key=lambda f: f["step_s"])["placement"]
    assert rl["faster_placement"] == faster
    assert answer["time"]["train_s"] == pytest.approx(colocated["train_s"])
    assert answer["time"]["num_steps"] == 50
    assert any(d["code"] == "outside_validated_range" and d["field"] == "training.method"
               for d in answer["warning_details"])


def test_other_methods_answer_without_an_rl_block(client: TestClient) -> None:
    body = rl_body(method="full_finetune", tokens=1e9)
    del body["training"]["rl"]
    response = client.post("/v1/estimates", json=body)
    assert response.status_code == 200, response.text
    assert "rl" not in response.json()


@pytest.mark.parametrize(("rl", "training", "field"), [
    ({k: v for k, v in RL.items() if k != "response_tokens"}, {},
     "training.rl.response_tokens"),
    (None, {"tokens": 1e9}, "training.tokens"),
    (None, {"examples": 100, "mean_example_tokens": 300.0}, "training.examples"),
    (None, {"method": "lora"}, "training.rl"),
    (None, {"seq_len": 512}, "training.seq_len"),
    ({**RL, "placement": "elsewhere"}, {}, "training.rl.placement"),
    ({**RL, "rollout_engine": "nope"}, {}, "training.rl.rollout_engine"),
])
def test_bad_rl_input_is_a_422_naming_the_field(
    client: TestClient, rl: dict[str, Any] | None, training: dict[str, Any], field: str,
) -> None:
    response = client.post("/v1/estimates", json=rl_body(rl, **training))
    assert_problem(response, 422, field)


def test_method_rl_without_rollouts_is_a_422(client: TestClient) -> None:
    body = rl_body()
    del body["training"]["rl"]
    assert_problem(client.post("/v1/estimates", json=body), 422, "training.rl")


def plan_search(**training: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"seq_len": 768, "global_batch_seqs": 128, "framework": "fsdp"}
    values.update(training)
    return {"model": {"preset": "llama3.1-8b"}, "training": values,
            "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 8, "gpus_per_node": 8},
            "objective": "time", "top_k": 2}


def test_the_optimiser_plans_lora_and_the_estimate_agrees(client: TestClient) -> None:
    body = plan_search(method="lora", lora={"rank": 16}, tokens=1e9)
    response = client.post("/v1/parallelism-plans", json=body)
    assert response.status_code == 200, response.text
    best = response.json()["plans"][0]
    estimate = client.post("/v1/estimates", json={
        "model": body["model"], "cluster": body["cluster"], "parallelism": best["parallelism"],
        "training": body["training"]}).json()
    assert estimate["params"]["trainable"] < estimate["params"]["total"] / 50
    assert estimate["time"]["train_s"] == pytest.approx(best["time"]["train_s"], rel=1e-9)
    assert estimate["memory"] == best["memory"]


def test_the_optimiser_plans_rl_as_rl_jobs(client: TestClient) -> None:
    body = plan_search(method="rl", rl=dict(RL))
    response = client.post("/v1/parallelism-plans", json=body)
    assert response.status_code == 200, response.text
    best = response.json()["plans"][0]
    estimate = client.post("/v1/estimates", json={
        "model": body["model"], "cluster": body["cluster"], "parallelism": best["parallelism"],
        "training": body["training"]}).json()
    assert estimate["time"]["num_steps"] == RL["steps"]
    assert estimate["time"]["train_s"] == pytest.approx(best["time"]["train_s"], rel=1e-9)
    tokens = {**body, "training": {**body["training"], "tokens": 1e9}}
    assert_problem(client.post("/v1/parallelism-plans", json=tokens), 422, "training.tokens")


def test_a_quote_prices_an_rl_job_by_its_steps(client: TestClient, api_key: Any) -> None:
    headers = {**api_key("quotes:write", "quotes:read"), "Idempotency-Key": "rl-quote-1"}
    body = {"workload": {"estimate": rl_body()}, "providers": ["aws", "onprem"],
            "terms": ["on_demand"]}
    response = client.post("/v1/quotes", json=body, headers=headers)
    assert response.status_code == 201, response.text
    estimate = client.post("/v1/estimates", json=rl_body()).json()
    lines = response.json()["lines"]
    assert lines
    walls = [line["wall_clock_s"] for line in lines if line.get("wall_clock_s")]
    assert walls
    assert min(walls) >= estimate["time"]["train_s"] * 0.999
    verified = client.post(f"/v1/quotes/{response.json()['id']}/verify", headers=headers)
    assert verified.json()["matches"], verified.text[:300]


def test_the_train_tab_estimates_a_lora_job_and_names_a_bad_rank(client: TestClient) -> None:
    from service.api import presentation as fmt
    from tests.api.test_ui import ESTIMATE_BODY, FORM, error_of

    lora = {**ESTIMATE_BODY, "training": {**ESTIMATE_BODY["training"], "method": "lora",
                                          "lora": {"rank": 8}}}
    api = client.post("/v1/estimates", json=lora).json()
    plain = client.post("/v1/estimates", json=ESTIMATE_BODY).json()
    assert api["time"]["train_s"] != plain["time"]["train_s"]
    page = client.get("/ui").text
    assert 'name="method"' in page
    assert 'name="lora_rank"' in page
    html = client.post("/ui", data={**FORM, "method": "lora", "lora_rank": "8",
                                    "action": "estimate"}).text
    assert fmt.duration(api["time"]["train_s"]) in html
    bad = client.post("/ui", data={**FORM, "method": "lora", "lora_rank": "9000",
                                   "action": "estimate"})
    assert bad.status_code == 422
    assert "9000" in error_of(bad.text, "lora_rank")


def test_the_contract_documents_the_additions(repo_root: Any) -> None:
    """openapi/openapi.json (checked against the code by tests/api/test_openapi.py) holds
    training.rl with the issue's names, method rl, the rl answer, and the plan search's
    method, lora and rl; the released v1 document is extended, not changed."""
    import json

    from service.api.contract import breaking_changes

    document = json.loads((repo_root / "openapi" / "openapi.json").read_text())
    schemas = document["components"]["schemas"]
    assert "rl" in schemas["TrainingMethod"]["enum"]
    rl_in = schemas["RlIn"]
    assert set(rl_in["properties"]) >= {
        "steps", "prompts_per_step", "samples_per_prompt", "prompt_tokens", "response_tokens",
        "reference_model", "reward_model", "placement", "rollout_engine"}
    assert "response_tokens" in rl_in["required"]
    assert set(schemas["RlPlacement"]["enum"]) == {"colocated", "disaggregated"}
    assert set(schemas["RlPhasesOut"]["properties"]) == {
        "generation", "old_log_prob", "reference", "reward", "policy_update", "weight_sync",
        "offload"}
    assert "rl" in schemas["EstimateResponse"]["properties"]
    assert "rl" not in schemas["EstimateResponse"].get("required", [])
    assert {"method", "lora", "rl"} <= set(schemas["PlanTrainingIn"]["properties"])
    released = json.loads((repo_root / "openapi" / "released" / "v1.json").read_text())
    assert breaking_changes(released, document) == []
