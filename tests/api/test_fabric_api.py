"""``cluster.fabric`` and ``training.gradient_compression`` on ``POST /v1/estimates`` (issue 42):
bounds with a 422 naming the field, and the issue's what-if questions on one 70B job."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.test_estimates import assert_problem

SEVENTY_B_1024: dict[str, Any] = {
    "model": {"preset": "llama3.1-70b"},
    "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 1024},
    "parallelism": {"tp": 8, "pp": 4, "dp": 32},
    "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 15e12},
}


def job(fabric: dict[str, Any] | None = None,
        compression: dict[str, Any] | None = None) -> dict[str, Any]:
    body = copy.deepcopy(SEVENTY_B_1024)
    if fabric is not None:
        body["cluster"]["fabric"] = fabric
    if compression is not None:
        body["training"]["gradient_compression"] = compression
    return body


def raw_body(section: str, inner: str) -> str:
    """The 70B job as JSON text with ``inner`` as the body of ``cluster.fabric`` or
    ``training.gradient_compression``: NaN and Infinity cannot be written by ``json=``."""
    text = json.dumps(SEVENTY_B_1024)
    if section == "fabric":
        return text.replace('"num_gpus": 1024', '"num_gpus": 1024, "fabric": {' + inner + "}")
    return text.replace('"tokens": 15000000000000.0',
                        '"tokens": 15000000000000.0, "gradient_compression": {' + inner + "}")


class TestFabricBounds:
    @pytest.mark.parametrize(("inner", "field"), [
        ('"latency_s": NaN', "cluster.fabric.latency_s"),
        ('"latency_s": Infinity', "cluster.fabric.latency_s"),
        ('"latency_s": -1e-6', "cluster.fabric.latency_s"),
        ('"latency_s": 1.0', "cluster.fabric.latency_s"),
        ('"latency_s": "fast"', "cluster.fabric.latency_s"),
        ('"packet_loss_fraction": NaN', "cluster.fabric.packet_loss_fraction"),
        ('"packet_loss_fraction": -0.001', "cluster.fabric.packet_loss_fraction"),
        ('"packet_loss_fraction": 0.5', "cluster.fabric.packet_loss_fraction"),
        ('"packet_loss_fraction": "0.001"', "cluster.fabric.packet_loss_fraction"),
        ('"oversubscription": Infinity', "cluster.fabric.oversubscription"),
        ('"oversubscription": 0.5', "cluster.fabric.oversubscription"),
        ('"oversubscription": 32', "cluster.fabric.oversubscription"),
        ('"oversubscription": true', "cluster.fabric.oversubscription"),
        ('"rails": 0', "cluster.fabric.rails"),
        ('"rails": -2', "cluster.fabric.rails"),
        ('"rails": 17', "cluster.fabric.rails"),
        ('"rails": 2.5', "cluster.fabric.rails"),
        ('"rails": "8"', "cluster.fabric.rails"),
        ('"protocol": "myrinet"', "cluster.fabric.protocol"),
        ('"protocol": 3', "cluster.fabric.protocol"),
        ('"jumbo_frames": true', "cluster.fabric.jumbo_frames"),
    ])
    def test_a_bad_fabric_value_is_a_422_naming_the_field(
            self, client: TestClient, inner: str, field: str) -> None:
        response = client.post("/v1/estimates", content=raw_body("fabric", inner),
                               headers={"content-type": "application/json"})
        problem = assert_problem(response, 422, field)
        assert "myrinet" not in json.dumps(problem)  # the input is not echoed

    def test_a_fabric_that_is_not_an_object_is_a_422(self, client: TestClient) -> None:
        body = job()
        body["cluster"]["fabric"] = "roce"
        assert_problem(client.post("/v1/estimates", json=body), 422, "cluster.fabric")


class TestGradientCompressionBounds:
    @pytest.mark.parametrize(("inner", "field"), [
        ('"method": "topk"', "training.gradient_compression.method"),
        ('"method": "powersgd", "rank": 0', "training.gradient_compression.rank"),
        ('"method": "powersgd", "rank": -4', "training.gradient_compression.rank"),
        ('"method": "powersgd", "rank": 4096', "training.gradient_compression.rank"),
        ('"method": "powersgd", "rank": 4.5', "training.gradient_compression.rank"),
        ('"method": "powersgd", "rank": NaN', "training.gradient_compression.rank"),
        ('"method": "powersgd", "rank": Infinity', "training.gradient_compression.rank"),
        ('"method": "powersgd", "rank": "4"', "training.gradient_compression.rank"),
        ('"method": "powersgd", "warm_start": true', "training.gradient_compression.warm_start"),
    ])
    def test_a_bad_compression_value_is_a_422_naming_the_field(
            self, client: TestClient, inner: str, field: str) -> None:
        response = client.post("/v1/estimates", content=raw_body("compression", inner),
                               headers={"content-type": "application/json"})
        assert_problem(response, 422, field)


VARIANTS: dict[str, dict[str, Any]] = {
    "roce": {"fabric": {"protocol": "roce"}},
    "roce loss 0.01%": {"fabric": {"protocol": "roce", "packet_loss_fraction": 0.0001}},
    "roce loss 0.1%": {"fabric": {"protocol": "roce", "packet_loss_fraction": 0.001}},
    "infiniband": {"fabric": {"protocol": "infiniband"}},
    "roce 1:1": {"fabric": {"protocol": "roce", "oversubscription": 1.0}},
    "roce 2:1": {"fabric": {"protocol": "roce", "oversubscription": 2.0}},
    "roce powersgd r4": {"fabric": {"protocol": "roce"},
                         "compression": {"method": "powersgd", "rank": 4}},
}


class TestTheSeventyBWhatIfs:
    """The issue's example: the same 70B job on 1,024 H100, one variation at a time."""

    @pytest.fixture
    def answers(self, client: TestClient) -> dict[str, dict[str, Any]]:
        out = {}
        for name, variant in {"catalogue": {}, **VARIANTS}.items():
            response = client.post("/v1/estimates", json=job(**variant))
            assert response.status_code == 200, response.text
            out[name] = response.json()
        return out

    @staticmethod
    def step(answer: dict[str, Any]) -> float:
        return float(answer["time"]["step_s"])

    def test_step_times_order_as_the_fabric_terms_say(
            self, answers: dict[str, dict[str, Any]]) -> None:
        step = {name: self.step(a) for name, a in answers.items()}
        assert step["infiniband"] == step["catalogue"]  # the fitted network is InfiniBand's
        assert step["infiniband"] < step["roce"]  # 1.5 us hops against 3 us
        assert step["roce"] < step["roce loss 0.01%"] < step["roce loss 0.1%"]
        assert step["roce 1:1"] == step["roce"]
        assert step["roce 2:1"] > step["roce 1:1"]
        assert step["roce powersgd r4"] < step["roce"]

    def test_each_difference_is_explained_in_the_assumptions(
            self, answers: dict[str, dict[str, Any]]) -> None:
        def says(name: str, opening: str) -> list[str]:
            return [a for a in answers[name]["assumptions"] if a.startswith(opening)]

        assert not says("catalogue", "fabric")
        for name in VARIANTS:
            assert says(name, "fabric latency: "), name
            assert says(name, "fabric protocol bandwidth: "), name
        assert "roce at 3.0 us" in says("roce", "fabric latency: ")[0]
        assert "+0.0 us" in says("infiniband", "fabric latency: ")[0]
        assert not says("roce", "fabric packet loss")
        assert "0.0100%" in says("roce loss 0.01%", "fabric packet loss")[0]
        loss = says("roce loss 0.1%", "fabric packet loss")[0]
        assert "go-back-N" in loss
        assert "0.1000%" in loss
        assert not says("roce 1:1", "fabric oversubscription")
        assert says("roce 2:1", "fabric oversubscription 2:1")[0].endswith(": pp")
        assert says("roce powersgd r4", "gradient compression powersgd rank 4")

    def test_the_breakdown_puts_each_difference_where_it_belongs(
            self, answers: dict[str, dict[str, Any]]) -> None:
        parts = {name: a["time"]["breakdown_s"] for name, a in answers.items()}
        # Loss slows the data-parallel reduction; oversubscription the pipeline's sends
        # (the data-parallel groups stay inside a 32-node leaf); PowerSGD cuts the DP traffic
        # and pays its matmuls in the optimizer time.
        assert parts["roce loss 0.1%"]["dp_comm_exposed"] > parts["roce"]["dp_comm_exposed"]
        assert parts["roce 2:1"]["pp_comm"] > 1.9 * parts["roce 1:1"]["pp_comm"]
        assert parts["roce 2:1"]["tp_comm"] == parts["roce 1:1"]["tp_comm"]
        assert (parts["roce powersgd r4"]["dp_comm_exposed"]
                < 0.5 * parts["roce"]["dp_comm_exposed"])
        assert parts["roce powersgd r4"]["optimizer"] > parts["roce"]["optimizer"]

    def test_compression_carries_the_convergence_warning(
            self, answers: dict[str, dict[str, Any]]) -> None:
        coded = {(d["code"], d["field"]) for d in answers["roce powersgd r4"]["warning_details"]}
        assert ("outside_validated_range", "training.gradient_compression") in coded
        assert not any(d["field"] == "training.gradient_compression"
                       for d in answers["roce"]["warning_details"])


class TestCompressionMethods:
    def test_casting_fp32_gradients_to_bf16_halves_their_traffic_time(
            self, client: TestClient) -> None:
        # 8B on 64 GPUs, pure data parallel with ZeRO-0 so the all-reduce is the only DP
        # traffic; fp32 gradients on the megatron stack.
        body: dict[str, Any] = {
            "model": {"preset": "llama3.1-8b"},
            "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 64,
                        "scaleout_bytes_per_s_per_gpu": 1e9},
            "parallelism": {"tp": 1, "pp": 1, "dp": 64, "zero_stage": 0},
            "training": {"seq_len": 4096, "global_batch_seqs": 64, "tokens": 1e12,
                         "framework": "megatron"},
        }
        plain = client.post("/v1/estimates", json=body).json()["time"]["breakdown_s"]
        body["training"]["gradient_compression"] = {"method": "bf16"}
        cast = client.post("/v1/estimates", json=body).json()["time"]["breakdown_s"]
        assert cast["dp_comm_exposed"] < 0.6 * plain["dp_comm_exposed"]

    def test_method_none_changes_nothing(self, client: TestClient) -> None:
        plain = client.post("/v1/estimates", json=job()).json()
        none = client.post("/v1/estimates", json=job(compression={"method": "none"})).json()
        assert none["time"] == plain["time"]
        assert none["warning_details"] == plain["warning_details"]


class TestEstimatorVersion:
    def test_the_fingerprint_covers_the_fabric_constants(self) -> None:
        from service.api import quoting
        from service.core import fabric

        names = dict(quoting._constants(*quoting.core_modules()))
        for constant in ("PROTOCOL_DEFAULTS", "REFERENCE_LATENCY_S", "TCP_FLOWS_PER_NIC",
                         "LEAF_DOWNLINKS", "POWERSGD_HBM_BYTES_PER_ELEMENT"):
            assert f"service.core.fabric.{constant}" in names
        assert fabric in quoting.core_modules()


def test_a_quote_times_every_line_on_the_stated_fabric(
        client: TestClient, api_key: Any) -> None:
    """A quote's lines are re-timed on each offer's network; the fabric the request states
    (protocol, loss, oversubscription, rails) stays in that timing, so a worse fabric gives
    longer lines, and no fabric answers as before (issue 42: quoting dropped it)."""
    import uuid

    headers = api_key("quotes:write")

    def quote(fabric: dict[str, Any] | None) -> dict[tuple[str, str], float]:
        body = {"workload": {"estimate": job(fabric)}, "terms": ["on_demand"],
                "providers": ["aws"]}
        body["workload"]["estimate"]["cluster"]["num_gpus"] = 1024
        response = client.post("/v1/quotes", json=body,
                               headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
        assert response.status_code == 201, response.text[:300]
        return {(line["offer_id"], line["term"]): line["wall_clock_s"]
                for line in response.json()["lines"] if line["wall_clock_s"] is not None}

    plain, lossy = quote(None), quote({"protocol": "roce", "packet_loss_fraction": 0.001,
                                       "oversubscription": 4.0, "rails": 1})
    assert plain.keys() == lossy.keys()
    assert plain
    assert all(lossy[k] > plain[k] for k in plain)
    assert quote(None) == plain


def test_a_plan_search_runs_on_the_stated_fabric_and_matches_its_estimate(
        client: TestClient) -> None:
    """POST /v1/parallelism-plans takes ``cluster.fabric`` (it refused it as an extra input):
    the best plan on a lossy 1-rail 4:1 RoCE fabric is slower than on the default network,
    and its step time is what POST /v1/estimates gives for that layout on that fabric."""
    from service.api.schemas.plans import PLAN_SEARCH_EXAMPLE

    body = copy.deepcopy(PLAN_SEARCH_EXAMPLE)
    plain = client.post("/v1/parallelism-plans", json=body)
    assert plain.status_code == 200, plain.text[:300]
    fabric = {"protocol": "roce", "packet_loss_fraction": 0.001, "oversubscription": 4.0,
              "rails": 1}
    body["cluster"]["fabric"] = fabric
    lossy = client.post("/v1/parallelism-plans", json=body)
    assert lossy.status_code == 200, lossy.text[:300]
    best = lossy.json()["plans"][0]
    assert best["time"]["step_s"] > plain.json()["plans"][0]["time"]["step_s"]
    estimate = client.post("/v1/estimates", json={
        "model": body["model"],
        "cluster": {**body["cluster"], "num_gpus": best["num_gpus"]},
        "parallelism": best["parallelism"],
        "training": {**body["training"], "global_batch_seqs": best["global_batch_seqs"]}})
    assert estimate.status_code == 200, estimate.text[:300]
    assert estimate.json()["time"]["step_s"] == best["time"]["step_s"]
    body["cluster"]["fabric"] = {**fabric, "rails": 0}
    refused = client.post("/v1/parallelism-plans", json=body)
    assert refused.status_code == 422
    assert "cluster.fabric.rails" in refused.text


@pytest.mark.parametrize(("fabric", "coded"), [
    (None, False),
    ({"protocol": "infiniband"}, False),
    ({"protocol": "roce"}, False),
    ({"protocol": "roce", "packet_loss_fraction": 0.001}, True),
    ({"protocol": "infiniband", "oversubscription": 2.0}, True),
    ({"protocol": "efa"}, True),
    ({"protocol": "infiniband", "latency_s": 5e-6}, True),
])
def test_a_fabric_term_no_measurement_checked_is_coded(
        client: TestClient, fabric: dict[str, Any] | None, coded: bool) -> None:
    """Loss, oversubscription, a judged protocol's bandwidth or a changed latency move the
    figures without a measurement behind them: the answer says so on cluster.fabric; the
    calibration's own network (InfiniBand or RoCE at defaults, loss-free, non-blocking) does
    not."""
    answer = client.post("/v1/estimates", json=job(fabric)).json()
    fields = [d["field"] for d in answer["warning_details"]
              if d["code"] == "outside_validated_range"]
    assert ("cluster.fabric" in fields) is coded


def test_a_line_timed_on_its_offers_protocol_carries_that_protocols_warning(
        client: TestClient, api_key: Any) -> None:
    """A quote that states no ``cluster.fabric`` times each line on its offer's protocol
    (issue 42, "Lines are timed on it"). Such a line carries the coded warning an estimate
    stating that protocol carries (EFA's bandwidth fraction is a judgement: it was answered
    uncoded on the line); a line on InfiniBand, the fitted network, carries none; a request
    that states the fabric carries it once per line, from the job."""
    import uuid

    headers = api_key("quotes:write")

    def lines(fabric: dict[str, Any] | None) -> list[dict[str, Any]]:
        body = {"workload": {"estimate": job(fabric)}, "terms": ["on_demand"],
                "providers": ["aws", "azure"]}
        response = client.post("/v1/quotes", json=body,
                               headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
        assert response.status_code == 201, response.text[:300]
        return [line for line in response.json()["lines"] if line["provider"] != "onprem"]

    def fabric_codes(line: dict[str, Any]) -> list[dict[str, Any]]:
        return [d for d in line["warning_details"] if d["field"] == "cluster.fabric"]

    def estimate_codes(protocol: str) -> list[dict[str, Any]]:
        answer = client.post("/v1/estimates", json=job({"protocol": protocol})).json()
        return [d for d in answer["warning_details"] if d["field"] == "cluster.fabric"]

    efa_expected = estimate_codes("efa")
    assert efa_expected  # EFA's bandwidth fraction is judged, so its estimate is coded
    assert estimate_codes("infiniband") == []
    plain = lines(None)
    by_protocol: dict[str, list[dict[str, Any]]] = {}
    for line in plain:
        protocol = ("efa" if "efa (the offer's interconnect)" in line["timing_basis"]
                    else "infiniband" if "infiniband" in line["timing_basis"] else None)
        if protocol is not None:
            by_protocol.setdefault(protocol, []).append(line)
    assert by_protocol.get("efa")
    assert by_protocol.get("infiniband")
    assert all(fabric_codes(line) == efa_expected for line in by_protocol["efa"])
    assert all(fabric_codes(line) == [] for line in by_protocol["infiniband"])
    stated = lines({"protocol": "efa"})
    assert stated
    assert all(fabric_codes(line) == efa_expected for line in stated)


@pytest.mark.parametrize("variant", [0, 4, 9, 11])
def test_the_documented_what_if_rows_are_the_estimates_answers(
        client: TestClient, variant: int) -> None:
    """``benchmarks.network_validation`` (which writes docs/model.md's 70B table) times the
    job as POST /v1/estimates does: the same step, at both NIC rates."""
    from benchmarks import network_validation as nv

    name, fabric, compression = nv.WHAT_IF_VARIANTS[variant]
    for nic in (None, nv.SLOW_NIC_BYTES_PER_S):
        body = job(fabric, compression)
        if nic is not None:
            body["cluster"]["scaleout_bytes_per_s_per_gpu"] = nic
        answer = client.post("/v1/estimates", json=body)
        assert answer.status_code == 200, answer.text[:300]
        assert answer.json()["time"]["step_s"] == pytest.approx(
            float(nv.seventy_b(fabric, compression, nic).throughput.step.step_s), rel=1e-12), name
