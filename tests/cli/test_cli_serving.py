"""``cq serve-estimate`` and ``cq serve-plan`` (issue 19) through typer's CliRunner: in process
on a local database (``--local``) and over HTTP against a live server (``--api``). The JSON
must equal the API's own answer, and the tables its figures, at 80 columns."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from service.api import presentation as fmt
from service.api.schemas.serving import SERVING_EXAMPLE, SERVING_PLAN_EXAMPLE
from service.cli import report
from service.cli import serving as cli_serving
from service.core import serving
from service.settings import Settings
from tests.cli.test_cli import cq, flat, legible
from tests.live_server import live_server

# SERVING_EXAMPLE as flags, with a price: Llama 3.1 70B, FP8 weights and KV cache on 4 H100
# (TP4), TensorRT-LLM, 10 requests/s of 1,024 + 256 tokens.
ESTIMATE_FLAGS = ["--model", "llama3.1-70b", "--accelerator", "h100-sxm5-80gb", "--tp", "4",
                  "--weight-precision", "fp8", "--kv-cache-precision", "fp8", "--engine",
                  "trtllm", "--max-batch", "256", "--prompt-tokens", "1024", "--output-tokens",
                  "256", "--qps", "10", "--ttft-p99", "2", "--tpot-p99", "0.1", "--price", "2.50"]
ESTIMATE_BODY: dict[str, Any] = {
    "model": {"preset": "llama3.1-70b"},
    "deployment": {"accelerator": "h100-sxm5-80gb", "gpus_per_replica": 4, "tp": 4,
                   "weight_precision": "fp8", "kv_cache_precision": "fp8", "engine": "trtllm",
                   "max_batch": 256, "price_per_gpu_hour_usd": "2.50"},
    "traffic": {"mode": "online", "prompt_tokens": {"mean": 1024},
                "output_tokens": {"mean": 256}, "requests_per_s": 10,
                "slo": {"ttft_p99_s": 2.0, "tpot_p99_s": 0.1}}}
PLAN_FLAGS = ["--model", "llama3.1-70b", "--accelerator", "h100-sxm5-80gb", "--accelerator",
              "h200-sxm-141gb", "--accelerator", "a100-sxm4-80gb", "--engine", "vllm",
              "--weight-precision", "bf16", "--weight-precision", "fp8",
              "--kv-cache-precision", "bf16", "--kv-cache-precision", "fp8",
              "--price", "h100-sxm5-80gb=2.50", "--price", "h200-sxm-141gb=3.20",
              "--price", "a100-sxm4-80gb=1.40", "--prompt-tokens", "1024",
              "--output-tokens", "256", "--qps", "20", "--ttft-p99", "2", "--tpot-p99", "0.1"]
"""SERVING_PLAN_EXAMPLE, as flags."""


def as_json(*args: str) -> dict[str, Any]:
    result = cq(*args, "--json")
    assert result.exit_code == 0, result.output
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


# --- serve-estimate ---------------------------------------------------------------------------


def test_serve_estimate_local_json_equals_the_api(local: str, api: TestClient) -> None:
    answer = as_json("serve-estimate", "--local", *ESTIMATE_FLAGS)
    expected = api.post("/v1/serving-estimates", json=ESTIMATE_BODY)
    assert expected.status_code == 200, expected.text
    assert answer == expected.json()
    # The flags are the contract's example plus a price (gpus_per_replica defaults to tp × pp).
    example = api.post("/v1/serving-estimates", json=SERVING_EXAMPLE).json()
    assert answer["memory"] == example["memory"]
    assert example["cost"] is None
    assert answer["cost"]["usd_per_hour"] == "10.00"  # 4 GPUs × 2.50


def test_serve_estimate_table_shows_the_api_figures_at_80_columns(local: str) -> None:
    answer = as_json("serve-estimate", "--local", *ESTIMATE_FLAGS)
    result = cq("serve-estimate", "--local", *ESTIMATE_FLAGS, columns=80)
    assert result.exit_code == 0, result.output
    text = legible(result.stdout)
    rows = {line.split("  ")[0].strip(): line for line in text.splitlines()}
    memory = answer["memory"]
    assert fmt.gib(memory["weights_bytes_per_gpu"]) in rows["weights"]
    # KV cache per token per GPU, by hand: 2 (K and V) × 80 layers × 8 KV heads × 128 head
    # dim × 1 byte (fp8) ÷ tp 4 = 40,960 bytes = 40.0 KiB.
    assert memory["kv_cache_bytes_per_token"] == 2 * 80 * 8 * 128 * 1 / 4
    assert "40.0 KiB" in rows["KV cache per token"]
    assert f"{memory['max_concurrency']:,} sequences per replica" in rows["max concurrency"]
    assert rows["fits"].split()[-1] == "yes"
    latency = answer["latency"]
    ttft = rows["TTFT"].split("  ")
    cells = [c.strip() for c in ttft if c.strip()]
    assert cells == ["TTFT", fmt.duration(latency["ttft_s"]["p50"]),
                     fmt.duration(latency["ttft_s"]["p99"]), "—", fmt.duration(2.0)]
    assert fmt.duration(latency["tpot_s"]["p99"]) in rows["TPOT"]
    assert fmt.duration(0.1) in rows["TPOT"]
    assert fmt.duration(latency["e2e_s"]["p99"]) in rows["end to end"]
    sizing = answer["sizing"]
    assert f"{sizing['replicas']:,} ({sizing['num_gpus']:,} GPUs)" in rows["replicas"]
    assert rows["meets the SLOs"].split()[-1] == "yes"
    assert (f"{fmt.number(answer['throughput']['output_tokens_per_s'])} per replica"
            in rows["output tokens/s"])
    assert f"{answer['cost']['usd_per_million_output_tokens']} USD" in \
        rows["per M output tokens"]
    assert "queueing model: analytic" in flat(text)


def test_serve_estimate_flags_map_onto_the_contract(local: str, api: TestClient,
                                                    tmp_path: Path) -> None:
    """p50/p99 lengths, concurrency (mode inferred), prefix caching implied by its hit rate,
    speculative decoding; then a request file whose load a flag replaces."""
    flags = ["--model", "llama3.1-8b", "--accelerator", "h100-sxm5-80gb", "--engine", "vllm",
             "--prompt-p50", "512", "--prompt-p99", "4096", "--output-tokens", "200",
             "--concurrency", "32", "--prefix-cache-hit", "0.5", "--spec-accept-rate", "0.7",
             "--spec-draft-tokens", "3", "--ttft-p50", "0.5", "--tpot-p50", "0.05"]
    body = {"model": {"preset": "llama3.1-8b"},
            "deployment": {"accelerator": "h100-sxm5-80gb", "gpus_per_replica": 1,
                           "engine": "vllm", "prefix_caching": True,
                           "prefix_cache_hit_fraction": 0.5,
                           "speculative": {"acceptance_rate": 0.7, "draft_tokens": 3}},
            "traffic": {"mode": "online", "prompt_tokens": {"p50": 512, "p99": 4096},
                        "output_tokens": {"mean": 200}, "concurrency": 32,
                        "slo": {"ttft_p50_s": 0.5, "tpot_p50_s": 0.05}}}
    assert as_json("serve-estimate", "--local", *flags) == \
        api.post("/v1/serving-estimates", json=body).json()
    fixed = as_json("serve-estimate", "--local", *flags[:6], "--prompt-tokens", "512",
                    "--output-tokens", "200", "--batch-size", "8")
    assert fixed["decode"]["batch"] == 8  # --batch-size means fixed_batch
    path = tmp_path / "serving.json"
    path.write_text(json.dumps(SERVING_EXAMPLE))
    from_file = as_json("serve-estimate", "--local", "--request", str(path))
    assert from_file == api.post("/v1/serving-estimates", json=SERVING_EXAMPLE).json()
    closed = json.loads(json.dumps(SERVING_EXAMPLE))
    del closed["traffic"]["requests_per_s"]
    closed["traffic"]["concurrency"] = 16
    overridden = as_json("serve-estimate", "--local", "--request", str(path),
                         "--concurrency", "16")
    assert overridden == api.post("/v1/serving-estimates", json=closed).json()


def test_a_bad_flag_names_the_field_and_its_limit(local: str) -> None:
    zero = cq("serve-estimate", "--local", *ESTIMATE_FLAGS, "--tp", "0")
    assert zero.exit_code == 1
    text = flat(zero.output)
    assert "422" in text
    assert "deployment.tp: Input should be greater than or equal to 1" in text
    assert "gpus_per_replica" not in text  # only the field given wrong is named
    negative = cq("serve-estimate", "--local", *ESTIMATE_FLAGS, "--qps", "-1")
    assert negative.exit_code == 1
    assert ("traffic.requests_per_s: Input should be greater than or equal to 0.000001"
            in flat(negative.output))
    rule = cq("serve-estimate", "--local", *ESTIMATE_FLAGS, "--gpus-per-replica", "8")
    assert rule.exit_code == 1
    assert "tp x pp (4 x 1) must equal gpus_per_replica (8)" in flat(rule.output)
    assert "field: deployment.gpus_per_replica" in flat(rule.output)
    price = cq("serve-estimate", "--local", *ESTIMATE_FLAGS, "--price", "abc")
    assert price.exit_code == 2
    assert "--price" in price.output


def test_json_errors_are_json_on_stdout(local: str) -> None:
    problem = cq("serve-estimate", "--local", "--json", *ESTIMATE_FLAGS, "--tp", "0")
    assert problem.exit_code == 1
    body = json.loads(problem.stdout)
    assert body["status"] == 422
    assert body["exit_code"] == 1
    assert [e["field"] for e in body["errors"]] == ["deployment.tp"]
    usage = cq("serve-plan", "--local", "--json", *PLAN_FLAGS, "--price", "2.00")
    assert usage.exit_code == 2
    assert json.loads(usage.stdout)["option"] == "--price"
    plan = cq("serve-plan", "--local", "--json", *PLAN_FLAGS[:2], "--accelerator",
              "h100-sxm5-80gb", "--prompt-tokens", "1024", "--output-tokens", "256",
              "--qps", "-1")
    assert plan.exit_code == 1
    assert json.loads(plan.stdout)["errors"][0]["field"] == "traffic.requests_per_s"


# --- serve-plan -------------------------------------------------------------------------------


def test_serve_plan_local_json_equals_the_api(local: str, api: TestClient) -> None:
    answer = as_json("serve-plan", "--local", *PLAN_FLAGS)
    expected = api.post("/v1/serving-plans", json=SERVING_PLAN_EXAMPLE)
    assert expected.status_code == 200, expected.text
    assert answer == expected.json()
    hourly = [float(p["estimate"]["cost"]["usd_per_hour"]) for p in answer["plans"]]
    assert hourly == sorted(hourly)
    one_price = as_json("serve-plan", "--local", *PLAN_FLAGS[:18], "--price", "2.00",
                        *PLAN_FLAGS[24:])
    assert {p["deployment"]["price_per_gpu_hour_usd"] for p in one_price["plans"]} == {"2.00"}


def test_serve_plan_table_ranks_plans_and_the_front_at_80_columns(local: str) -> None:
    answer = as_json("serve-plan", "--local", *PLAN_FLAGS)
    plans, search = answer["plans"], answer["search"]
    assert len(plans) == 10 < search["feasible"]
    result = cq("serve-plan", "--local", *PLAN_FLAGS, columns=80)
    assert result.exit_code == 0, result.output
    text = legible(result.stdout)
    assert f"10 of {search['feasible']:,} that meet the SLOs" in flat(text)
    assert f"Pareto front, cost against p99 TTFT: {len(answer['pareto'])} plans" in text
    ranked = [line for line in text.splitlines() if re.match(r"\s*\d+   ", line)]
    first = plans[0]
    estimate = first["estimate"]
    cells = ranked[0].split()
    assert cells[:2] == ["1", first["deployment"]["accelerator"]]
    sizing = estimate["sizing"]
    assert f"{sizing['num_gpus']} ({sizing['replicas']}×{first['deployment']['tp']})" \
        in ranked[0]
    assert estimate["cost"]["usd_per_hour"] in cells
    assert fmt.duration(estimate["latency"]["ttft_s"]["p99"]) in ranked[0]
    assert len(ranked) == len(plans) + len(answer["pareto"])
    assert (f"{estimate['cost']['usd_per_million_output_tokens']} USD per million output "
            "tokens") in flat(text)
    assert (f"{search['candidates_total']:,} candidate deployments sized for 20 requests/s; "
            f"{search['feasible']:,} fit") in flat(text)


def test_serve_plan_without_a_deployment_that_meets_the_slos(local: str) -> None:
    flags = ["--model", "llama3.1-70b", "--accelerator", "h100-sxm5-80gb", "--prompt-tokens",
             "1024", "--output-tokens", "256", "--qps", "20", "--ttft-p99", "0.01"]
    answer = as_json("serve-plan", "--local", *flags)
    assert answer["plans"] == []
    assert answer["closest"]
    text = flat(legible(cq("serve-plan", "--local", *flags, columns=80).stdout))
    assert "no deployment meets the SLOs (TTFT p99 10.0 ms)" in text
    assert f"Closest misses: {len(answer['closest'])}" in text
    assert "USD/h" not in text  # no prices: ranked by GPUs


def test_serve_plan_price_forms(local: str) -> None:
    mixed = cq("serve-plan", "--local", *PLAN_FLAGS, "--price", "2.00")
    assert mixed.exit_code == 2
    assert "not both" in flat(mixed.output)
    unknown = cq("serve-plan", "--local", *PLAN_FLAGS, "--price", "tpu-v9=1.00")
    assert unknown.exit_code == 1
    assert "price_per_gpu_hour_usd names accelerators not in accelerators" in \
        flat(unknown.output)


# --- over HTTP, and the closed sets -----------------------------------------------------------


def test_serving_commands_over_http(local_url: str, local: str) -> None:
    local_estimate = as_json("serve-estimate", "--local", *ESTIMATE_FLAGS)
    local_plans = as_json("serve-plan", "--local", *PLAN_FLAGS)
    with live_server(Settings(database_url=local_url, search_workers=0)) as base:
        assert as_json("serve-estimate", "--api", base, *ESTIMATE_FLAGS) == local_estimate
        assert as_json("serve-plan", "--api", base, *PLAN_FLAGS) == local_plans
        bad = cq("serve-estimate", "--api", base, *ESTIMATE_FLAGS, "--tp", "0")
        assert bad.exit_code == 1
        assert "deployment.tp" in flat(bad.output)


def test_the_cli_choices_are_the_cores() -> None:
    """The CLI repeats the core's closed sets (so cq --help does not import the core)."""
    for cli, core in ((cli_serving.WeightPrecision, serving.WeightPrecision),
                      (cli_serving.KvPrecision, serving.KvPrecision),
                      (cli_serving.Engine, serving.Engine),
                      (cli_serving.TrafficMode, serving.TrafficMode)):
        assert [c.value for c in cli] == [c.value for c in core]


def test_sizes_take_the_largest_binary_unit() -> None:
    assert report.size(1023) == "1,023 B"
    assert report.size(40_960) == "40.0 KiB"
    assert report.size(50 * 1024**2) == "50.0 MiB"
    assert report.size(17_638_426_624) == fmt.gib(17_638_426_624) == "16.4 GiB"
    assert report.per_million("1234.5678") == "1,234.5678"
    assert report.per_million(None) == "—"
    assert report.serving_plan_layout({"tp": 4, "pp": 2, "weight_precision": "int4",
                                       "kv_cache_precision": "fp8", "max_batch": 64}) == \
        "tp4 pp2 int4/fp8 b64"


def test_serve_plan_tries_several_engines(local: str, api: TestClient) -> None:
    """One --engine is the contract's engine; several are its engines (each row then names
    its engine)."""
    flags = ["--model", "llama3.1-8b", "--accelerator", "h100-sxm5-80gb", "--prompt-tokens",
             "1024", "--output-tokens", "256", "--qps", "5", "--tpot-p99", "0.05"]
    body: dict[str, Any] = {"model": {"preset": "llama3.1-8b"},
                            "accelerators": ["h100-sxm5-80gb"],
                            "traffic": {"mode": "online", "prompt_tokens": {"mean": 1024},
                                        "output_tokens": {"mean": 256}, "requests_per_s": 5,
                                        "slo": {"tpot_p99_s": 0.05}}}
    one = as_json("serve-plan", "--local", *flags, "--engine", "sglang")
    assert one == api.post("/v1/serving-plans", json={**body, "engine": "sglang"}).json()
    assert {p["deployment"]["engine"] for p in one["plans"]} == {"sglang"}
    several = as_json("serve-plan", "--local", *flags, "--engine", "vllm", "--engine", "trtllm")
    expected = api.post("/v1/serving-plans", json={**body, "engines": ["vllm", "trtllm"]})
    assert expected.status_code == 200, expected.text
    assert several == expected.json()
    engines = {p["deployment"]["engine"] for p in several["plans"]}
    assert engines == {"vllm", "trtllm"}
    text = legible(cq("serve-plan", "--local", *flags, "--engine", "vllm", "--engine", "trtllm",
                      columns=80).stdout)
    first = several["plans"][0]["deployment"]
    assert report.serving_plan_layout(first, engine=True).endswith(first["engine"])
    assert first["engine"] in flat(text).split("Pareto")[0]


def test_plans_that_differ_only_in_a_max_batch_that_does_not_bind_share_a_row(
        local: str) -> None:
    flags = ["--model", "llama3.1-70b", "--accelerator", "h200-sxm-141gb", "--weight-precision",
             "fp8", "--engine", "vllm", "--max-batch", "4096", "--max-batch", "8192", "--price",
             "3.20", "--prompt-tokens", "1024", "--output-tokens", "256", "--qps", "20",
             "--ttft-p99", "2"]
    plans = as_json("serve-plan", "--local", *flags)["plans"][:10]

    def figures(plan: dict[str, Any]) -> str:
        deployment = {k: v for k, v in plan["deployment"].items() if k != "max_batch"}
        e = plan["estimate"]
        return json.dumps([deployment, e["sizing"], e["cost"], e["latency"]["ttft_s"]["p99"],
                           e["latency"]["tpot_s"]["p99"]], sort_keys=True)

    alike = len(plans) - len({figures(p) for p in plans})
    assert alike > 0  # 4,096 and 8,192: more than fit in memory, so neither binds
    text = flat(legible(cq("serve-plan", "--local", *flags, columns=80).stdout))
    assert f"{alike} alike folded" in text
    assert text.count("alike)") == len({figures(p) for p in plans
                                         if sum(figures(q) == figures(p) for q in plans) > 1})
