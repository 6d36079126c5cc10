"""Request ids, JSON access logs and Prometheus metrics."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from service.api.observability import JsonFormatter
from tests.api.test_estimates import assert_problem


def test_a_well_formed_request_id_is_echoed_in_the_header_and_problem(
    client: TestClient,
) -> None:
    response = client.get("/v1/offers/off_000000000000000000000000",
                          headers={"X-Request-ID": "trace-123.abc"})
    problem = assert_problem(response, 404)
    assert response.headers["x-request-id"] == "trace-123.abc"
    assert problem["request_id"] == "trace-123.abc"


@pytest.mark.parametrize("given", ["", "has space", "x" * 65, "ünïcode", "a;DROP"])
def test_a_malformed_request_id_is_replaced(client: TestClient, given: str) -> None:
    response = client.get("/livez", headers={"X-Request-ID": given.encode("utf-8")})  # type: ignore[dict-item]
    made = response.headers["x-request-id"]
    assert made != given
    assert len(made) == 32
    int(made, 16)


def test_one_json_log_line_per_request_with_the_route_template(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="service.access"):
        client.get("/v1/accelerators/h100-sxm5-80gb", headers={
            "X-Request-ID": "req-1", "Authorization": "Bearer cq_secret_should_not_appear"})
    records = [r for r in caplog.records if r.name == "service.access"]
    assert len(records) == 1
    line = json.loads(JsonFormatter().format(records[0]))
    assert line["request_id"] == "req-1"
    assert line["route"] == "/v1/accelerators/{accelerator_id}"
    assert line["status"] == 200
    assert line["duration_ms"] >= 0
    assert "cq_secret" not in json.dumps(line)


def test_metrics_count_requests_by_route_and_status(client: TestClient) -> None:
    client.get("/v1/accelerators/h100-sxm5-80gb")
    client.get("/v1/accelerators/nope")
    text = client.get("/metrics").text
    assert ('http_requests_total{method="GET",route="/v1/accelerators/{accelerator_id}",'
            'status="200"} 1.0') in text
    assert ('http_requests_total{method="GET",route="/v1/accelerators/{accelerator_id}",'
            'status="404"} 1.0') in text
    assert "http_request_duration_seconds_bucket" in text


def test_metrics_count_quotes_rejections_and_candidates(
    client: TestClient, api_key: Callable[..., dict[str, str]]
) -> None:
    body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 1000,
                                       "num_gpus": 64}},
            "providers": ["lambda"], "deadline_s": 60.0}
    headers = {**api_key("quotes:write"), "Idempotency-Key": uuid.uuid4().hex}
    assert client.post("/v1/quotes", json=body, headers=headers).status_code == 201
    assert client.post("/v1/quotes", json=body, headers=headers).status_code == 201  # replay
    client.post("/v1/parallelism-plans", json={
        "model": {"preset": "llama3.1-8b"}, "cluster": {"accelerator": "h100-sxm5-80gb",
                                                        "num_gpus": 8},
        "training": {"seq_len": 4096, "global_batch_seqs": 64, "tokens": 1e11}})
    text = client.get("/metrics").text
    assert "quotes_created_total 1.0" in text
    assert "budget_rejections_total 1.0" in text
    evaluated = next(line for line in text.splitlines()
                     if line.startswith("optimiser_candidates_evaluated_total "))
    assert float(evaluated.split()[1]) > 100
