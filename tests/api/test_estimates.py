"""POST /v1/estimates over HTTP, on SQLite and PostgreSQL."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.schemas.estimate import ESTIMATE_EXAMPLE

PROBLEM = "application/problem+json"


def body(**changes: Any) -> dict[str, Any]:
    """The documented example with dotted-path overrides: body(**{"training.seq_len": 4096})."""
    result = copy.deepcopy(ESTIMATE_EXAMPLE)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = result
        for part in parents:
            node = node[part]
        node[leaf] = value
    return result


def assert_problem(response: Any, status: int, field: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    problem = response.json()
    assert {"type", "title", "status", "detail", "instance"} <= set(problem)
    assert problem["status"] == status
    if field is not None:
        fields = [e["field"] for e in problem.get("errors", [])] + [problem.get("field")]
        assert field in fields, problem
    return problem


class TestCreateEstimate:
    def test_documented_example_matches_the_published_run(self, client: TestClient) -> None:
        # The example is the DGX Cloud Llama 3.1 70B recipe: 1113 tokens/s/GPU measured.
        response = client.post("/v1/estimates", json=ESTIMATE_EXAMPLE)
        assert response.status_code == 200, response.text
        data = response.json()
        assert data["params"]["total"] == pytest.approx(70.55e9, rel=0.01)
        assert data["time"]["tokens_per_s_per_gpu"] == pytest.approx(1113, rel=0.1)
        assert data["memory"]["fits"] is True
        breakdown = data["memory"]["breakdown_bytes"]
        assert sum(breakdown.values()) == pytest.approx(data["memory"]["peak_bytes_per_gpu"])
        assert sum(data["time"]["breakdown_s"].values()) == pytest.approx(data["time"]["step_s"])
        assert data["time"]["gpu_hours"] == pytest.approx(
            15e12 / data["time"]["tokens_per_s"] * 64 / 3600)
        assert data["energy"]["kwh"] > 0
        assert data["energy"]["co2e_kg"] > 0

    def test_custom_moe_architecture(self, client: TestClient) -> None:
        model = {"num_layers": 32, "hidden_size": 4096, "num_heads": 32, "num_kv_heads": 8,
                 "ffn_hidden_size": 14336, "vocab_size": 32000, "mlp": "swiglu",
                 "num_experts": 8, "experts_per_token": 2}
        response = client.post("/v1/estimates", json=body(
            model=model, **{"parallelism.ep": 2, "parallelism.cp": 1, "parallelism.dp": 4}))
        assert response.status_code == 200, response.text
        params = response.json()["params"]
        assert params["total"] == pytest.approx(46.7e9, rel=0.01)
        assert params["active"] == pytest.approx(12.9e9, rel=0.01)

    def test_a_model_without_a_vocabulary_is_estimated_with_a_warning(
            self, client: TestClient) -> None:
        """Issue 15: four published runs were refused for a missing vocab_size."""
        model = {"num_layers": 32, "hidden_size": 4096, "num_heads": 32, "num_kv_heads": 8,
                 "ffn_hidden_size": 14336, "mlp": "swiglu"}
        without = client.post("/v1/estimates", json=body(model=model))
        assert without.status_code == 200, without.text
        assert any("vocab_size not given: assumed 128,256" in w
                   for w in without.json()["warnings"])
        given = client.post("/v1/estimates", json=body(model={**model, "vocab_size": 128256}))
        assert given.json()["params"] == without.json()["params"]
        assert not any("vocab_size" in w for w in given.json()["warnings"])
        # A preset with an architecture field is still refused, vocab_size included.
        assert_problem(client.post("/v1/estimates", json=body(
            model={"preset": "llama3.1-8b", "vocab_size": 1000})), 422)

    def test_dp_defaults_to_the_remaining_gpus(self, client: TestClient) -> None:
        request = body()
        del request["parallelism"]["dp"]
        response = client.post("/v1/estimates", json=request)
        assert response.status_code == 200
        assert response.json()["resolved"]["parallelism"]["dp"] == 2

    def test_energy_overrides_change_carbon(self, client: TestClient) -> None:
        base = client.post("/v1/estimates", json=body()).json()["energy"]
        clean = client.post("/v1/estimates", json=body(energy={"grid_gco2e_per_kwh": 48.0}))
        assert clean.json()["energy"]["co2e_kg"] == pytest.approx(base["co2e_kg"] / 10)

    def test_plan_that_does_not_fit_is_estimated_with_a_warning(self, client: TestClient) -> None:
        response = client.post("/v1/estimates", json=body(**{
            "model": {"preset": "llama3.1-405b"}, "cluster.num_gpus": 8,
            "parallelism": {"tp": 8, "pp": 1, "dp": 1}, "training.global_batch_seqs": 8}))
        assert response.status_code == 200
        data = response.json()
        assert data["memory"]["fits"] is False
        assert any("does not fit" in w for w in data["warnings"])

    def test_impossible_layout_names_the_rule(self, client: TestClient) -> None:
        problem = assert_problem(
            client.post("/v1/estimates", json=body(**{"cluster.num_gpus": 128})), 422,
            "parallelism")
        assert "must equal cluster.num_gpus (128)" in problem["detail"]

    def test_unknown_accelerator_is_a_422_naming_the_field(self, client: TestClient) -> None:
        problem = assert_problem(
            client.post("/v1/estimates", json=body(**{"cluster.accelerator": "h999-echo"})),
            422, "cluster.accelerator")
        assert "h100-sxm5-80gb" in problem["detail"]
        assert "h999" not in problem["detail"]  # input is never echoed (issue 14)

    def test_unknown_preset_lists_the_known_ones(self, client: TestClient) -> None:
        problem = assert_problem(
            client.post("/v1/estimates", json=body(model={"preset": "gpt5-echo-me"})), 422,
            "model.preset")
        assert "llama3.1-70b" in problem["detail"]
        assert "echo-me" not in problem["detail"]  # input is never echoed (issue 14)

    @pytest.mark.parametrize(("raw", "field"), [
        ('"training": {"seq_len": NaN', "training.seq_len"),
        ('"training": {"seq_len": Infinity', "training.seq_len"),
        ('"training": {"seq_len": 1e400', "training.seq_len"),
        ('"training": {"seq_len": -1', "training.seq_len"),
        ('"training": {"seq_len": 0', "training.seq_len"),
        ('"training": {"seq_len": 1000000000000000000', "training.seq_len"),
        ('"training": {"seq_len": "8192"', "training.seq_len"),
        ('"training": {"seq_len": true', "training.seq_len"),
    ])
    def test_bad_numbers_are_422_problems_naming_the_field(
        self, client: TestClient, raw: str, field: str
    ) -> None:
        text = ('{"model": {"preset": "llama3.1-8b"}, "cluster": {"accelerator": '
                '"h100-sxm5-80gb", "num_gpus": 8}, ' + raw +
                ', "global_batch_seqs": 8, "tokens": 1e9}}')
        response = client.post("/v1/estimates", content=text,
                               headers={"content-type": "application/json"})
        problem = assert_problem(response, 422, field)
        assert "NaN" not in json.dumps(problem["errors"])  # input is not echoed

    def test_unknown_field_is_rejected(self, client: TestClient) -> None:
        assert_problem(client.post("/v1/estimates", json=body(**{"training.epochs": 3})), 422,
                       "training.epochs")

    def test_preset_and_architecture_together_are_rejected(self, client: TestClient) -> None:
        problem = assert_problem(client.post("/v1/estimates", json=body(
            model={"preset": "llama3.1-8b", "num_layers": 3})), 422, "model")
        assert "not both" in problem["detail"]

    @pytest.mark.parametrize("text", ["{", '{"model": ', "", "[]", "null"])
    def test_malformed_or_empty_json_is_a_problem(self, client: TestClient, text: str) -> None:
        response = client.post("/v1/estimates", content=text,
                               headers={"content-type": "application/json"})
        assert_problem(response, 422)

    def test_oversized_body_is_413_before_parsing(self, client: TestClient) -> None:
        response = client.post("/v1/estimates", content=b"{" + b" " * 70_000 + b"}",
                               headers={"content-type": "application/json"})
        problem = assert_problem(response, 413)
        assert problem["limit_bytes"] == 64 * 1024

    def test_oversized_chunked_body_is_413(self, client: TestClient) -> None:
        def chunks() -> Any:
            for _ in range(20):
                yield b" " * 8192
        response = client.post("/v1/estimates", content=chunks(),
                               headers={"content-type": "application/json"})
        assert_problem(response, 413)


class TestFrameworkBand:
    """training.framework picks the stack's fitted efficiency and the 80% band's regime
    (issue 15): a named stack with published runs gets its own out-of-sample band, unknown
    the pooled, widest one."""

    def band(self, client: TestClient, framework: str | None) -> tuple[float, float, Any]:
        body = copy.deepcopy(ESTIMATE_EXAMPLE)
        body["training"].pop("framework", None)
        if framework is not None:
            body["training"]["framework"] = framework
        answer = client.post("/v1/estimates", json=body)
        assert answer.status_code == 200, answer.text
        time = answer.json()["time"]
        return (time["tokens_per_s_low"] / time["tokens_per_s"],
                time["tokens_per_s_high"] / time["tokens_per_s"], answer.json())

    def test_unknown_is_the_default_and_the_widest(self, client: TestClient) -> None:
        default = self.band(client, None)
        unknown = self.band(client, "unknown")
        megatron = self.band(client, "megatron")
        assert default[:2] == unknown[:2]
        assert unknown[0] < megatron[0] < 1.0 < megatron[1] < unknown[1]
        assert any("'megatron' regime" in a for a in megatron[2]["assumptions"])
        assert any("'unknown' regime" in a for a in default[2]["assumptions"])
        # A stack never named gets the geometric mean of the fitted stacks' efficiency, below
        # Megatron-Core's (calibration.stack_efficiency).
        assert megatron[2]["time"]["tokens_per_s"] > unknown[2]["time"]["tokens_per_s"]

    def test_an_unknown_stack_name_is_422_naming_the_field(self, client: TestClient) -> None:
        body = copy.deepcopy(ESTIMATE_EXAMPLE)
        body["training"]["framework"] = "pytorch-lightning-9000"
        assert_problem(client.post("/v1/estimates", json=body), 422, "training.framework")


class TestAutoFields:
    """vp, micro_batch and recompute may be "auto" (issue 15): callers who do not know a
    run's value get the optimiser's fastest that fits, not vp = 1 or a refusal."""

    def test_auto_picks_a_fitting_layout_no_slower_than_the_defaults(
            self, client: TestClient) -> None:
        fixed = client.post("/v1/estimates", json=body(**{
            "parallelism.vp": 1, "parallelism.micro_batch": 1, "parallelism.recompute": "full"}))
        auto = client.post("/v1/estimates", json=body(**{
            "parallelism.vp": "auto", "parallelism.micro_batch": "auto",
            "parallelism.recompute": "auto"}))
        assert auto.status_code == 200, auto.text
        data = auto.json()
        assert data["memory"]["fits"] is True
        assert data["time"]["tokens_per_s"] >= fixed.json()["time"]["tokens_per_s"] * (1 - 1e-9)
        chosen = data["resolved"]["parallelism"]
        assert chosen["recompute"] in ("none", "selective", "full")
        assert isinstance(chosen["vp"], int)
        notes = [a for a in data["assumptions"] if '"auto": the optimiser chose' in a]
        assert len(notes) == 3
        # Estimating the chosen layout directly gives the same figures.
        again = client.post("/v1/estimates", json=body(**{
            f"parallelism.{k}": chosen[k] for k in ("vp", "micro_batch", "recompute")}))
        assert again.json()["time"]["tokens_per_s"] == data["time"]["tokens_per_s"]

    def test_auto_is_refused_in_a_searchs_fixed_fields(self, client: TestClient) -> None:
        request = {"model": {"preset": "llama3.1-8b"},
                   "training": {"seq_len": 4096, "global_batch_seqs": 256, "tokens": 1e11},
                   "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 8},
                   "constraints": {"fixed": {"vp": "auto"}}}
        response = client.post("/v1/parallelism-plans", json=request)
        assert response.status_code == 422


def test_memory_reports_its_headroom(client: TestClient) -> None:
    data = client.post("/v1/estimates", json=ESTIMATE_EXAMPLE).json()["memory"]
    assert data["headroom_bytes"] == pytest.approx(
        data["capacity_bytes_per_gpu"] - data["peak_bytes_per_gpu"])
    assert (data["headroom_bytes"] >= 0) == data["fits"]
    tight = client.post("/v1/estimates", json=body(**{"parallelism.tp": 1, "parallelism.pp": 1,
                                                      "parallelism.cp": 1, "parallelism.dp": 64,
                                                      "parallelism.vp": 1})).json()["memory"]
    assert tight["fits"] is False
    assert tight["headroom_bytes"] < 0
