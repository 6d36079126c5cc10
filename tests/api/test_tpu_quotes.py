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
    # Smaller slices hold it as Multislice over the documented DCN (50 Gbit/s per chip): the
    # same chip-hours' price per hour, but a slower step than one ICI torus.
    multi = [x for x in lines if x["instance_type"] == "v5p-128" and x["term"] == "on_demand"]
    assert len(multi) == 1
    assert multi[0]["instances"] == 4  # 4 slices of 64 chips
    assert multi[0]["inter_node_gbps"] == 64 * 50
    assert multi[0]["wall_clock_s"] >= line["wall_clock_s"]
    assert "Multislice" in multi[0]["fabric_source"]


def test_a_multislice_v5e_job_is_priced_and_v6e_without_a_documented_dcn_is_not(
        client: TestClient, api_key: KeyMaker) -> None:
    """The worst honest case for a TPU fabric: a job larger than any v5e slice (the pod is
    256 chips) runs on 32 slices over the DCN Google documents (2 x 100 Gbit/s per 8-chip
    host); v6e, whose DCN is not documented, gets no line for a job larger than its pod."""
    headers = api_key("quotes:write")
    run = {**TPU_RUN, "regions": [], "terms": ["on_demand"]}
    run["workload"] = {"estimate": {**TPU_RUN["workload"]["estimate"], "cluster": {
        "accelerator": "tpu-v5e", "num_gpus": 8192}, "parallelism": {
        "tp": 4, "pp": 1, "dp": 2048}, "training": {
        "seq_len": 8192, "global_batch_seqs": 8192, "tokens": 1e11, "precision": "bf16"}}}
    answer = client.post("/v1/quotes", json=run,
                         headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
    assert answer.status_code == 201, answer.text
    lines = [x for x in all_lines(client, answer.json(), headers) if x["feasible"]]
    pod = [x for x in lines if x["instance_type"] == "v5litepod-256"]
    assert pod
    assert {x["instances"] for x in pod} == {32}
    assert {x["inter_node_gbps"] for x in pod} == {256 * 25}
    run["workload"]["estimate"]["cluster"] = {"accelerator": "tpu-v6e", "num_gpus": 512}
    run["workload"]["estimate"]["parallelism"] = {"tp": 4, "pp": 1, "dp": 128}
    v6e = client.post("/v1/quotes", json=run,
                      headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
    assert v6e.status_code == 201, v6e.text
    assert [x for x in all_lines(client, v6e.json(), headers) if x["feasible"]] == []
    codes = {g["instance_type"]: g["code"] for g in v6e.json()["rejected_offers"]["groups"]}
    assert codes["v6e-256"] == "interconnect_unknown"  # the whole pod, and still too small


def test_an_estimate_across_tpu_slices_pays_for_the_dcn_not_the_ici(
        client: TestClient) -> None:
    """DCN between slices is the hardware catalogue's scale-out (50 Gbit/s per v5p chip, from
    Google's v5p page); ICI within a slice is the scale-up domain. The same ZeRO-3 job on one
    1,024-chip slice and on 256 four-chip slices differs only in that."""
    accelerator = client.get("/v1/accelerators/tpu-v5p").json()
    assert accelerator["scaleout_gbits_per_s"] == 50
    assert "Data center network (DCN) bandwidth per chip" in accelerator["notes"]

    def run(slice_chips: int) -> dict[str, Any]:
        response = client.post("/v1/estimates", json={
            "model": {"preset": "llama3.1-70b"},
            "cluster": {"accelerator": "tpu-v5p", "num_gpus": 1024,
                        "gpus_per_node": slice_chips},
            "parallelism": {"tp": 4, "pp": 1, "zero_stage": 3},
            "training": {"seq_len": 8192, "global_batch_seqs": 256, "tokens": 1e11}})
        assert response.status_code == 200, response.text
        time: dict[str, Any] = response.json()["time"]
        return time

    one, many = run(1024), run(4)
    assert many["breakdown_s"]["compute"] == one["breakdown_s"]["compute"]
    assert many["breakdown_s"]["dp_comm_exposed"] > 10 * one["breakdown_s"]["dp_comm_exposed"]
    assert many["tokens_per_s_per_gpu"] < one["tokens_per_s_per_gpu"]
