"""Custom accelerators (issue 17): an in-house "NPU" is one request away; estimates, plans and
on-prem quotes use it at once, with the conservative prior, the widest band and a warning."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.schemas.catalog import ACCELERATOR_EXAMPLE
from service.api.schemas.estimate import ESTIMATE_EXAMPLE
from service.core.calibration import DEFAULT_CALIBRATION
from service.main import create_app, dispose
from service.settings import Settings
from tests.api.test_estimates import assert_problem
from tests.factories import seeded_database_with_key


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def committed(request: pytest.FixtureRequest,
              database_url_factory: Callable[[str], str]) -> Iterator[tuple[TestClient, str]]:
    """The app on its own database with real commits: the accelerator cache reads through its
    own connection, as in production, so a stored accelerator must be committed to be seen."""
    url = database_url_factory(request.param)
    key = seeded_database_with_key(url, name="npu", scopes=["catalog:write", "quotes:write"])
    app = create_app(Settings(database_url=url, search_workers=0))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client, key
    dispose(app)


def _estimate(client: TestClient, accelerator: str) -> Any:
    body = copy.deepcopy(ESTIMATE_EXAMPLE)
    body["cluster"]["accelerator"] = accelerator
    body["training"]["framework"] = "megatron"
    return client.post("/v1/estimates", json=body)


def test_an_npu_is_one_request_away_and_estimates_say_it_is_uncalibrated(
        committed: tuple[TestClient, str]) -> None:
    client, key = committed
    headers = {"Authorization": f"Bearer {key}"}
    assert _estimate(client, "acme-npu-2").status_code == 422  # not there yet
    created = client.post("/v1/accelerators", json=ACCELERATOR_EXAMPLE, headers=headers)
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/v1/accelerators/acme-npu-2"
    stored = client.get("/v1/accelerators/acme-npu-2").json()
    assert stored == created.json()
    assert (stored["calibrated"], stored["purchase_price_usd"]) == (False, "18000.00")
    assert client.get("/v1/accelerators/h100-sxm5-80gb").json()["calibrated"] is True
    answer = _estimate(client, "acme-npu-2")
    assert answer.status_code == 200, answer.text
    estimate = answer.json()
    assert any("no published training runs" in w for w in estimate["warnings"])
    h100 = _estimate(client, "h100-sxm5-80gb").json()
    # The widest band: the 'unknown' regime's, wider than the fitted Megatron one.
    unknown = DEFAULT_CALIBRATION.bands["unknown"]
    megatron = DEFAULT_CALIBRATION.bands["megatron"]
    assert unknown.high_fraction - unknown.low_fraction > megatron.high_fraction - \
        megatron.low_fraction

    def width(e: dict[str, Any]) -> float:
        t = e["time"]
        return float((t["tokens_per_s_high"] - t["tokens_per_s_low"]) / t["tokens_per_s"])

    assert width(estimate) > width(h100)


def test_an_onprem_quote_prices_the_npu_with_its_own_purchase_price(
        committed: tuple[TestClient, str]) -> None:
    client, key = committed
    headers = {"Authorization": f"Bearer {key}"}
    assert client.post("/v1/accelerators", json=ACCELERATOR_EXAMPLE,
                       headers=headers).status_code == 201
    quote = client.post("/v1/quotes", headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
                        json={"workload": {"gpu_hours": {"accelerator": "acme-npu-2",
                                                         "gpu_hours": 10_000, "num_gpus": 64}},
                              "terms": ["onprem"], "providers": ["onprem"]})
    assert quote.status_code == 201, quote.text
    line = quote.json()["cheapest"]
    assert line["accelerator"] == "acme-npu-2"
    assert Decimal(line["onprem"]["purchase_price_per_gpu"]) == Decimal("18000")


def test_an_accelerator_is_immutable_and_needs_the_scope(client: TestClient,
                                                         api_key: Any) -> None:
    writer = api_key("catalog:write")
    assert client.post("/v1/accelerators", json=ACCELERATOR_EXAMPLE,
                       headers=writer).status_code == 201
    again = {**ACCELERATOR_EXAMPLE, "bf16_tflops": 700}
    assert_problem(client.post("/v1/accelerators", json=again, headers=writer), 409)
    assert client.get("/v1/accelerators/acme-npu-2").json()["bf16_tflops"] == 600
    seeded = {**ACCELERATOR_EXAMPLE, "id": "h100-sxm5-80gb"}
    assert_problem(client.post("/v1/accelerators", json=seeded, headers=writer), 409)
    other = {**ACCELERATOR_EXAMPLE, "id": "acme-npu-3"}
    assert_problem(client.post("/v1/accelerators", json=other,
                               headers=api_key("quotes:write")), 403)
    assert_problem(client.post("/v1/accelerators", json=other), 401)


@pytest.mark.parametrize(("change", "field"), [
    ({"memory_gib": -1}, "memory_gib"),
    ({"memory_gib": 1e9}, "memory_gib"),
    ({"hbm_tbytes_per_s": 0}, "hbm_tbytes_per_s"),
    ({"bf16_tflops": None, "fp16_tflops": None}, None),
    ({"tdp_w": "hot"}, "tdp_w"),
    ({"scaleup_domain_size": 0}, "scaleup_domain_size"),
    ({"id": "NPU 2!"}, "id"),
    ({"price_basis": None}, None),
    ({"colour": "red"}, "colour"),
    ({"as_of": "yesterday"}, "as_of"),
])
def test_bad_datasheets_are_422_naming_the_field(client: TestClient, api_key: Any,
                                                 change: dict[str, Any],
                                                 field: str | None) -> None:
    body = {**ACCELERATOR_EXAMPLE, "id": f"npu-{uuid.uuid4().hex[:8]}", **change}
    assert_problem(client.post("/v1/accelerators", json=body,
                               headers=api_key("catalog:write")), 422, field)


def test_a_nan_peak_is_422(client: TestClient, api_key: Any) -> None:
    text = ('{"id": "npu-nan", "vendor": "A", "name": "A", "memory_gib": 96, '
            '"hbm_tbytes_per_s": 2, "bf16_tflops": NaN, "tdp_w": 500, '
            '"scaleup_domain_size": 8, "scaleup_gbytes_per_s": 300, '
            '"scaleout_gbits_per_s": 400, "source": "x", "as_of": "2026-01-01"}')
    response = client.post("/v1/accelerators", content=text.encode(),
                           headers={**api_key("catalog:write"),
                                    "Content-Type": "application/json"})
    assert_problem(response, 422)


@pytest.mark.parametrize(("field", "value"), [("bf16_tflops", True), ("memory_gib", "96"),
                                              ("scaleup_domain_size", 8.5), ("tdp_w", False)])
def test_numbers_must_be_numbers(client: TestClient, api_key: Any, field: str,
                                 value: Any) -> None:
    """Found by the fuzz test: lax parsing read true as 1.0 TFLOP/s."""
    body = {**ACCELERATOR_EXAMPLE, "id": f"npu-{uuid.uuid4().hex[:8]}", field: value}
    assert_problem(client.post("/v1/accelerators", json=body,
                               headers=api_key("catalog:write")), 422, field)
