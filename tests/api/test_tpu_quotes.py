"""TPU in the catalogue and in quotes (issue 17): slices are offers in chips, priced per chip
as GCP publishes it, and a training run on TPU v5p can be quoted."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from fastapi.testclient import TestClient

from tests.api.test_quotes_api import KeyMaker, all_lines

TPU_RUN: dict[str, Any] = {
    "workload": {"estimate": {
        "model": {"preset": "llama3.1-8b"},
        "cluster": {"accelerator": "tpu-v5p", "num_gpus": 256},
        "parallelism": {"tp": 4, "pp": 1, "dp": 64},
        "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 1e11,
                     "precision": "bf16"},
    }},
    "terms": ["on_demand", "spot"], "providers": ["gcp"], "regions": ["us-central1"],
}


def test_tpu_slices_are_offers_in_chips_at_the_per_chip_price(client: TestClient) -> None:
    items = client.get("/v1/offers", params={
        "accelerator": "tpu-v5p", "region": "us-central1", "term": "on_demand",
        "page_size": 200}).json()["items"]
    by_name = {o["instance_type"]: o for o in items}
    assert {"v5p-8", "v5p-512", "v5p-17920"} <= set(by_name)  # 4 chips .. the 8,960-chip pod
    for name, chips in (("v5p-8", 4), ("v5p-512", 256), ("v5p-17920", 8960)):
        offer = by_name[name]
        assert offer["gpus_per_instance"] == chips
        assert offer["nvlink_domain"] == chips  # the slice's ICI torus
        assert Decimal(offer["price_per_gpu_hour"]) == Decimal("4.200000")  # per chip
    assert all(o["region_carbon_g_per_kwh"] for o in items)


def test_a_training_run_on_tpu_v5p_is_quoted(client: TestClient, api_key: KeyMaker) -> None:
    headers = api_key("quotes:write")
    answer = client.post("/v1/quotes", json=TPU_RUN,
                         headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
    assert answer.status_code == 201, answer.text
    quote = answer.json()
    lines = [x for x in all_lines(client, quote, headers) if x["feasible"]]
    assert lines
    assert {x["accelerator"] for x in lines} == {"tpu-v5p"}
    exact = [x for x in lines if x["instance_type"] == "v5p-512" and x["term"] == "on_demand"]
    assert len(exact) == 1
    line = exact[0]
    assert line["instances"] == 1
    assert not line["rounded_up"]
    # 256 chips x the billed hours x 4.20 per chip-hour, to the cent.
    assert Decimal(line["job_cost_total"]) == (
        Decimal(line["gpu_hours"]) * Decimal("4.2")).quantize(Decimal("0.01"))
    # Smaller slices cannot hold the job without a multislice network, which is not offered.
    rejected = {g["instance_type"]: g["code"] for g in quote["rejected_offers"]["groups"]}
    assert rejected["v5p-8"] == "interconnect_unknown"
