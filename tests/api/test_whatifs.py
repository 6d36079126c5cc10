"""POST /v1/what-ifs (issue 42): variations of one estimate, side by side, on SQLite and
PostgreSQL."""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from service.api.routes import whatifs
from service.api.schemas.estimate import TimeBreakdownOut
from service.api.schemas.whatifs import (
    COMM_PARTS,
    MAX_VARIATIONS,
    OTHER_PARTS,
    WHAT_IF_BASE,
    WHAT_IF_EXAMPLE,
    path_problem,
)

PROBLEM = "application/problem+json"


def varied(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """The test's own copy of "the base with these paths set"."""
    body = copy.deepcopy(base)
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = body
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return body


def post(client: TestClient, body: dict[str, Any]) -> Any:
    # Written by hand so that NaN and Infinity reach the server (httpx refuses them).
    return client.post("/v1/what-ifs", content=json.dumps(body),
                       headers={"Content-Type": "application/json"})


def sweep(*variations: dict[str, Any], price: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"base": copy.deepcopy(WHAT_IF_BASE),
                            "variations": [{"set": v} for v in variations]}
    if price is not None:
        body["price_per_gpu_hour_usd"] = price
    return body


def comm_share(estimate: dict[str, Any]) -> float:
    parts = estimate["time"]["breakdown_s"]
    comm = sum(parts[p] for p in ("tp_comm", "cp_comm", "ep_comm", "pp_comm",
                                  "dp_comm_exposed"))
    return float(comm / estimate["time"]["step_s"])


class TestCreateWhatIf:
    def test_deltas_are_the_difference_of_two_estimates(self, client: TestClient) -> None:
        changes = [{"cluster.scaleout_bytes_per_s_per_gpu": 1.25e10},
                   {"cluster.num_gpus": 2048, "parallelism.dp": 64}]
        response = post(client, sweep(*changes, price="2.50"))
        assert response.status_code == 200, response.text
        answer = response.json()
        base = client.post("/v1/estimates", json=WHAT_IF_BASE).json()
        assert answer["base"]["tokens_per_s"] == base["time"]["tokens_per_s"]
        assert answer["base"]["comm_fraction"] == pytest.approx(comm_share(base), rel=1e-12)
        for index, change in enumerate(changes):
            alone = client.post("/v1/estimates", json=varied(WHAT_IF_BASE, change))
            assert alone.status_code == 200, alone.text
            other = alone.json()
            row = answer["variations"][index]
            assert row["index"] == index
            assert row["error"] is None
            assert row["summary"]["train_s"] == other["time"]["train_s"]
            delta = row["delta"]
            assert delta["tokens_per_s"] == pytest.approx(
                other["time"]["tokens_per_s"] - base["time"]["tokens_per_s"], rel=1e-12)
            assert delta["train_s"] == pytest.approx(
                other["time"]["train_s"] - base["time"]["train_s"], rel=1e-12)
            assert delta["train_s_fraction"] == pytest.approx(
                other["time"]["train_s"] / base["time"]["train_s"] - 1, rel=1e-9)
            assert delta["comm_fraction"] == pytest.approx(
                comm_share(other) - comm_share(base), rel=1e-9)
            cost = Decimal(row["summary"]["cost_usd"]) - Decimal(answer["base"]["cost_usd"])
            assert Decimal(delta["cost_usd"]) == cost
        # The slower network costs time; twice the GPUs saves more of it: ranked first.
        assert answer["variations"][0]["delta"]["train_s"] > 0
        assert [r["index"] for r in answer["ranking"]] == [1, 0]

    def test_cost_is_gpu_hours_times_the_price_as_a_decimal_string(
            self, client: TestClient) -> None:
        answer = post(client, sweep({"training.tokens": 1e12}, price="2.10")).json()
        base = answer["base"]
        assert isinstance(base["cost_usd"], str)
        expected = (Decimal(repr(base["gpu_hours"])) * Decimal("2.10")).quantize(
            Decimal("0.01"))
        assert Decimal(base["cost_usd"]) == expected
        assert answer["price_per_gpu_hour_usd"] == "2.10"
        without = post(client, sweep({"training.tokens": 1e12})).json()
        assert without["base"]["cost_usd"] is None
        assert without["variations"][0]["delta"]["cost_usd"] is None

    def test_the_documented_example_answers_every_variation(self, client: TestClient) -> None:
        response = post(client, WHAT_IF_EXAMPLE)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert [v["name"] for v in answer["variations"]] == [
            v["name"] for v in WHAT_IF_EXAMPLE["variations"]]
        assert all(v["error"] is None for v in answer["variations"])
        deltas = [abs(v["delta"]["train_s"]) for v in answer["variations"]]
        ranked = [abs(r["train_s_delta"]) for r in answer["ranking"]]
        assert ranked == sorted(deltas, reverse=True)

    def test_65_variations_are_refused_naming_the_limit(self, client: TestClient) -> None:
        body = sweep(*[{"cluster.num_gpus": 1024}] * (MAX_VARIATIONS + 1))
        response = post(client, body)
        assert response.status_code == 422
        assert response.headers["content-type"] == PROBLEM
        (error,) = response.json()["errors"]
        assert error["field"] == "variations"
        assert "at most 64" in error["message"]
        assert post(client, sweep(*[{"cluster.num_gpus": 1024}] * MAX_VARIATIONS)
                    ).status_code == 200

    def test_an_unknown_path_is_refused_naming_the_variation_and_the_path(
            self, client: TestClient) -> None:
        response = post(client, sweep({"cluster.num_gpus": 2048, "parallelism.dp": 64},
                                      {"cluster.fabirc.protocol": "roce"}))
        assert response.status_code == 422
        (error,) = response.json()["errors"]
        assert error["code"] == "unknown_path"
        assert error["field"] == "variations.1.set.cluster.fabirc.protocol"
        assert "variation 1" in error["message"]
        assert "cluster.fabirc.protocol" in error["message"]
        assert "no field 'fabirc'" in error["message"]

    @pytest.mark.parametrize(("path", "why"), [
        ("parallelism.tp.size", "parallelism.tp is not an object"),
        ("modle.preset", "the estimate request has no field 'modle'"),
        ("calibration_id", "set in the base only"),
        ("training..seq_len", "training has no field ''"),
    ])
    def test_paths_are_checked_against_the_schema(self, path: str, why: str) -> None:
        problem = path_problem(path)
        assert problem is not None
        assert why in problem

    def test_every_field_of_the_estimate_request_is_a_path(self) -> None:
        for path in ("model.preset", "cluster.num_gpus", "parallelism.offload",
                     "training.seq_len", "energy.pue", "parallelism", "cluster.gpus_per_node"):
            assert path_problem(path) is None, path

    def test_a_field_added_later_is_a_path_without_a_change_here(self) -> None:
        class Fabric(BaseModel):
            packet_loss_fraction: float = 0.0

        class Cluster(BaseModel):
            num_gpus: int
            fabric: Fabric | None = None

        class Later(BaseModel):
            cluster: Cluster

        assert path_problem("cluster.fabric.packet_loss_fraction", Later) is None
        assert "fabric has no field 'loss'" in (path_problem("cluster.fabric.loss", Later) or "")

    def test_every_step_part_is_classed_as_communication_or_not(self) -> None:
        assert set(COMM_PARTS) | set(OTHER_PARTS) == set(TimeBreakdownOut.model_fields)
        assert not set(COMM_PARTS) & set(OTHER_PARTS)

    def test_overlapping_paths_are_refused(self, client: TestClient) -> None:
        response = post(client, sweep({"parallelism": {"tp": 4}, "parallelism.pp": 8}))
        assert response.status_code == 422
        assert response.json()["errors"][0]["code"] == "overlapping_paths"

    def test_an_invalid_value_is_that_variations_error_and_the_others_answer(
            self, client: TestClient) -> None:
        response = post(client, sweep({"cluster.num_gpus": 2048, "parallelism.dp": 64},
                                      {"training.seq_len": 0},
                                      {"parallelism.tp": 7}))
        assert response.status_code == 200, response.text
        first, invalid, broken = response.json()["variations"]
        assert first["error"] is None
        assert invalid["summary"] is None
        assert invalid["error"]["code"] == "validation-error"
        assert invalid["error"]["errors"][0]["field"] == "training.seq_len"
        assert invalid["error"]["errors"][0]["code"] == "greater_than_equal"
        # A modelling rule the estimate breaks: the problem POST /v1/estimates answers.
        alone = client.post("/v1/estimates", json=varied(WHAT_IF_BASE, {"parallelism.tp": 7}))
        assert alone.status_code == 422
        assert broken["error"]["code"] == "invalid-spec"
        assert broken["error"]["detail"] == alone.json()["detail"]
        assert [r["index"] for r in response.json()["ranking"]] == [0]

    @pytest.mark.parametrize(("path", "value", "code"), [
        ("training.tokens", float("nan"), "finite_number"),
        ("training.tokens", float("inf"), "finite_number"),
        ("training.tokens", 1e300, "less_than_equal"),
        ("cluster.num_gpus", 1e300, "int_type"),
        ("cluster.num_gpus", -8, "greater_than_equal"),
        ("cluster.num_gpus", "2048", "int_type"),
        ("parallelism.sequence_parallel", 1, "bool_type"),
        ("training.precision", "fp7", "enum"),
        ("cluster", 5, "model_type"),
        ("energy.pue", -1.0, "greater_than_equal"),
    ])
    def test_bad_values_are_coded_errors_not_500(self, client: TestClient, path: str,
                                                 value: Any, code: str) -> None:
        response = post(client, sweep({path: value}))
        assert response.status_code == 200, response.text
        (row,) = response.json()["variations"]
        assert row["error"]["code"] == "validation-error"
        assert row["error"]["errors"][0]["code"] == code

    def test_an_unknown_accelerator_is_a_coded_error(self, client: TestClient) -> None:
        response = post(client, sweep({"cluster.accelerator": "h900"}))
        (row,) = response.json()["variations"]
        assert row["error"]["code"] == "invalid-spec"
        assert row["error"]["field"] == "cluster.accelerator"

    def test_intermediate_objects_are_created(self, client: TestClient) -> None:
        body = sweep({"energy.pue": 1.5})
        body["base"].pop("energy", None)
        response = post(client, body)
        assert response.status_code == 200, response.text
        assert response.json()["variations"][0]["error"] is None

    def test_auto_is_refused_in_a_variation_and_in_the_base(self, client: TestClient) -> None:
        row = post(client, sweep({"parallelism.micro_batch": "auto"})).json()["variations"][0]
        assert row["error"]["code"] == "auto-not-allowed"
        assert row["error"]["field"] == "parallelism.micro_batch"
        body = sweep({"cluster.num_gpus": 2048})
        body["base"]["parallelism"]["vp"] = "auto"
        response = post(client, body)
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == "base.parallelism.vp"

    def test_an_invalid_base_is_the_requests_problem(self, client: TestClient) -> None:
        body = sweep({"cluster.num_gpus": 2048})
        body["base"]["training"]["seq_len"] = -1
        response = post(client, body)
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == "base.training.seq_len"

    def test_too_many_paths_in_a_variation(self, client: TestClient) -> None:
        response = post(client, sweep({f"model.x{i}": 1 for i in range(33)}))
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == "variations.0.set"

    def test_a_deeply_nested_value_is_refused_not_a_500(self, client: TestClient) -> None:
        """Found by hand: a value nested 700 deep exhausted the stack of copying it (500)."""
        text = json.dumps(sweep({"model.name": "X"})).replace('"X"', "[" * 700 + "]" * 700)
        response = client.post("/v1/what-ifs", content=text,
                               headers={"Content-Type": "application/json"})
        assert response.status_code == 422
        assert response.json()["errors"][0]["code"] == "value_too_deep"
        shallow = json.dumps(sweep({"model.name": "X"})).replace('"X"', "[" * 16 + "]" * 16)
        row = client.post("/v1/what-ifs", content=shallow,
                          headers={"Content-Type": "application/json"}).json()["variations"][0]
        assert row["error"]["code"] == "validation-error"

    def test_past_the_deadline_the_sweep_is_refused_with_retry_after(
            self, client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
        """A clock that moves a minute per reading: the deadline (10 s) passes before the
        first estimate, whatever the machine's speed."""
        ticks = iter(range(0, 10**6, 60))
        monkeypatch.setattr(whatifs, "clock", lambda: float(next(ticks)))
        response = post(client, sweep({"cluster.num_gpus": 2048}))
        assert response.status_code == 503
        assert response.headers["content-type"] == PROBLEM
        assert int(response.headers["retry-after"]) >= 1
        assert response.json()["type"].endswith("search-deadline")
        assert "base" not in response.json()

    def test_the_operation_is_documented(self, client: TestClient) -> None:
        operation = client.app.openapi()["paths"]["/v1/what-ifs"]["post"]  # type: ignore[attr-defined]
        assert operation["operationId"] == "create_what_if"
        assert operation["tags"] == ["estimates"]
        assert {"200", "413", "422", "503"} <= set(operation["responses"])
        assert "Retry-After" in operation["responses"]["503"]["headers"]
