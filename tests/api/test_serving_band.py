"""POST /v1/serving-estimates (issue 40): coded warnings of an uncalibrated engine x
accelerator pair and of mixture-of-experts serving, in warning_details and warnings."""

from __future__ import annotations

import copy
from typing import Any

from fastapi.testclient import TestClient

from service.api.schemas.serving import SERVING_EXAMPLE


def body(**deployment: Any) -> dict[str, Any]:
    result = copy.deepcopy(SERVING_EXAMPLE)
    result["deployment"].update(deployment)
    return result


def test_an_uncalibrated_pair_is_coded_and_a_calibrated_one_is_not(client: TestClient) -> None:
    calibrated = client.post("/v1/serving-estimates", json=body(engine_version="0.16")).json()
    assert "uncalibrated_engine" not in {d["code"] for d in calibrated["warning_details"]}
    response = client.post("/v1/serving-estimates", json=body(
        accelerator="mi300x-192gb", engine="sglang", engine_version="0.4"))
    assert response.status_code == 200, response.text
    e = response.json()
    [detail] = [d for d in e["warning_details"] if d["code"] == "uncalibrated_engine"]
    assert detail["field"] == "deployment.engine"
    assert "sglang" in detail["message"]
    assert "mi300x-192gb" in detail["message"]
    assert detail["message"] in e["warnings"]


def test_moe_serving_is_coded_outside_the_validated_range(client: TestClient) -> None:
    request = body(engine_version="0.16")
    request["model"] = {"preset": "mixtral-8x7b"}
    e = client.post("/v1/serving-estimates", json=request).json()
    [detail] = [d for d in e["warning_details"]
                if d["code"] == "outside_validated_range" and d["field"] == "model"]
    assert detail["message"] in e["warnings"]
    assert e["throughput"]["output_tokens_per_s"] > 0
