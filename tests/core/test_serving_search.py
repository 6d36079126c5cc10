"""The bulk serving evaluation (service/core/serving_search.py) against ``serve()``, and the
plan search against a brute force of ``serve()`` over a small space (issue 19)."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterator

import numpy as np
import pytest

from benchmarks.accuracy import seed_accelerators
from service.core import serving as s
from service.core import serving_search as ss
from service.core.presets import PRESETS
from service.core.search import PARETO_POINTS_MAX
from service.core.specs import ModelSpec

ACC = seed_accelerators()
ACCELERATORS = [ACC[a] for a in ("h100-sxm5-80gb", "h200-sxm-141gb", "a100-sxm4-80gb",
                                 "l4-24gb", "gb200-nvl72", "mi300x-192gb", "h100-pcie-80gb")]
MODELS = ["llama3.1-8b", "llama3.1-70b", "mixtral-8x7b", "deepseek-v3"]
"""Dense GQA, dense GQA too big for one GPU, MoE, and MoE with multi-head latent attention."""
SLOS = [s.Slo(), s.Slo(ttft_p99_s=2.0, tpot_p99_s=0.1),
        s.Slo(ttft_p50_s=0.3, tpot_p50_s=0.02), s.Slo(tpot_p99_s=0.05)]

FIELDS = [f.name for f in dataclasses.fields(ss.Figures) if f.name != "slo_given"]
INTEGERS = {"max_concurrency", "replicas", "fits", "saturated", "meets_slo"}


def reference(e: s.ServingEstimate, name: str) -> float:
    """``serve()``'s figure under ``Figures``' name."""
    quantiles = {"prefill": e.prefill_s, "ttft": e.ttft_s, "tpot": e.tpot_s, "e2e": e.e2e_s}
    head, _, tail = name.rpartition("_")
    if tail == "s" and head.rsplit("_", 1)[0] in quantiles:  # e.g. ttft_p99_s
        kind, which = head.rsplit("_", 1)
        return float(getattr(quantiles[kind], which))
    if name == "meets_slo":
        return float(bool(e.meets_slo))
    if hasattr(e.memory, name):
        return float(getattr(e.memory, name))
    value = getattr(e, name)
    return math.nan if value is None else float(value)


def random_deployments(rng: random.Random, n: int) -> list[s.Deployment]:
    out = []
    for _ in range(n):
        acc = rng.choice(ACCELERATORS)
        tp = rng.choice([t for t in (1, 2, 4, 8, 16, 72) if t <= acc.scaleup_domain_size])
        pp = rng.choice([1, 1, 1, 2, 4])
        speculative = rng.random() < 0.25
        out.append(s.Deployment(
            accelerator=acc, gpus_per_replica=tp * pp, tp=tp, pp=pp,
            weight_precision=rng.choice(list(s.WeightPrecision)),
            kv_cache_precision=rng.choice(list(s.KvPrecision)),
            engine=rng.choice(list(s.Engine)),
            max_batch=rng.choice([None, None, 1, 4, 32, 256, 4096]),
            prefix_cache_hit_fraction=rng.choice([0.0, 0.0, 0.3, 0.9]),
            speculative_acceptance_rate=rng.uniform(0.3, 0.9) if speculative else None,
            speculative_draft_tokens=rng.choice([1, 3, 4, 7])))
    return out


def random_traffic(rng: random.Random, mode: str) -> s.Traffic:
    prompt = rng.choice([s.Lengths.of(mean=rng.choice([128, 1024, 8000])),
                         s.Lengths.of(p50=500, p99=6000),
                         s.Lengths.of(samples=[100, 900, 2500, 12000])])
    output = rng.choice([s.Lengths.of(mean=rng.choice([16, 256, 1500])),
                         s.Lengths.of(p50=200, p99=1200)])
    slo = rng.choice(SLOS)
    if mode == "online":
        return s.Traffic(mode=s.TrafficMode.ONLINE, prompt=prompt, output=output, slo=slo,
                         requests_per_s=rng.choice([0.05, 1.0, 20.0, 400.0, 1e6]))
    if mode == "closed":
        return s.Traffic(mode=s.TrafficMode.ONLINE, prompt=prompt, output=output, slo=slo,
                         concurrency=rng.choice([1, 64, 5000]))
    if mode == "fixed_batch":
        return s.Traffic(mode=s.TrafficMode.FIXED_BATCH, prompt=prompt, output=output, slo=slo,
                         batch_size=rng.choice([1, 16, 512]))
    return s.Traffic(mode=s.TrafficMode.OFFLINE, prompt=prompt, output=output, slo=slo)


def cases() -> Iterator[tuple[str, str, int]]:
    for model in MODELS:
        for mode in ("online", "closed", "fixed_batch", "offline"):
            for seed in range(3 if mode == "online" else 1):
                yield model, mode, seed


def compare(model: ModelSpec, deployments: list[s.Deployment], traffic: s.Traffic,
            replicas: int | None = None) -> list[s.ServingEstimate]:
    """Assert every row's figures equal serve()'s; return serve()'s estimates."""
    columns, ok = ss.columns_of(deployments)
    figures = ss.evaluate(model, columns, traffic, replicas)
    assert figures.slo_given == any(v is not None for v in dataclasses.astuple(traffic.slo))
    estimates = []
    for i, d in enumerate(deployments):
        try:
            e = s.serve(model, d, traffic, replicas)
        except s.InvalidSpecError:
            assert not ok[i], d  # only a missing matmul precision is refused
            continue
        assert ok[i]
        estimates.append(e)
        for name in FIELDS:
            got, want = float(getattr(figures, name)[i]), reference(e, name)
            if name in INTEGERS:
                assert got == want, (name, i, d, got, want)
            elif math.isnan(want):
                assert math.isnan(got), (name, i, d, got)
            else:
                assert got == pytest.approx(want, rel=1e-9, abs=1e-300), (name, i, d)
    return estimates


@pytest.mark.parametrize(("model_name", "mode", "seed"), list(cases()))
def test_bulk_figures_equal_serve_for_every_deployment(model_name: str, mode: str,
                                                       seed: int) -> None:
    rng = random.Random(f"{model_name}/{mode}/{seed}")
    model = PRESETS[model_name].model
    compare(model, random_deployments(rng, 40), random_traffic(rng, mode))


def test_the_random_cases_cover_every_branch_of_serve() -> None:
    """The comparison above means something only if its deployments reach every outcome:
    not fitting, saturated, meeting and missing an SLO, several replicas, the replica cap
    and a near-idle stop, MoE, speculative decoding and prefix caching."""
    seen: set[str] = set()
    for model_name, mode, seed in cases():
        rng = random.Random(f"{model_name}/{mode}/{seed}")
        deployments = random_deployments(rng, 40)
        traffic = random_traffic(rng, mode)
        for d in deployments:
            try:
                e = s.serve(PRESETS[model_name].model, d, traffic)
            except s.InvalidSpecError:
                seen.add("refused")
                continue
            seen.add("fits" if e.memory.fits else "does not fit")
            seen.add(f"meets_slo {e.meets_slo}")
            if e.saturated:
                seen.add("saturated")
            if e.replicas > 1:
                seen.add("replicas > 1")
            if e.replicas == s.MAX_REPLICAS:
                seen.add("replica cap")
            if d.speculative_acceptance_rate is not None:
                seen.add("speculative")
            if d.prefix_cache_hit_fraction > 0:
                seen.add("prefix cache")
            if d.pp > 1:
                seen.add("pp > 1")
            if e.crossover_batch is None:
                seen.add("never compute-bound")
    assert {"refused", "fits", "does not fit", "meets_slo True", "meets_slo False",
            "meets_slo None", "saturated", "replicas > 1", "replica cap", "speculative",
            "prefix cache", "pp > 1", "never compute-bound"} <= seen


@pytest.mark.parametrize("model_name", ["llama3.1-70b", "mixtral-8x7b"])
def test_a_given_replica_count_is_evaluated_as_serve_evaluates_it(model_name: str) -> None:
    rng = random.Random(7)
    traffic = s.Traffic(mode=s.TrafficMode.ONLINE, prompt=s.Lengths.of(mean=2000),
                        output=s.Lengths.of(mean=300), requests_per_s=30.0,
                        slo=s.Slo(ttft_p99_s=1.0, tpot_p99_s=0.05))
    estimates = compare(PRESETS[model_name].model, random_deployments(rng, 40), traffic,
                        replicas=3)
    assert {e.replicas for e in estimates} == {3}
    assert any(e.saturated for e in estimates)


# -- the plan search against brute force ------------------------------------------------------

PLAN_ACCELERATORS = [ACC[a] for a in ("h100-sxm5-80gb", "h200-sxm-141gb", "a100-sxm4-80gb")]
PRICES = {"h100-sxm5-80gb": 2.5, "h200-sxm-141gb": 3.2, "a100-sxm4-80gb": 1.4}
ENGINES = (s.Engine.VLLM, s.Engine.TRTLLM)
MAX_BATCHES = (None, 8, 64)


def brute_force(model: ModelSpec, traffic: s.Traffic, prices: dict[str, float],
                max_tp: int | None = None) -> tuple[list[tuple[float, int, int, s.PlanCandidate]],
                                                    list[tuple[float, int, s.PlanCandidate]],
                                                    int]:
    """Every candidate through serve(), in the grid's order: (feasible with their (cost,
    GPUs, position) keys, those that fit but miss with their miss ratio, total)."""
    feasible, missed = [], []
    position = -1
    for acc in PLAN_ACCELERATORS:
        for tp in s._tp_options(acc, max_tp):
            for weights in (s.WeightPrecision.BF16, s.WeightPrecision.FP8):
                for kv in s.KvPrecision:
                    for engine in ENGINES:
                        for batch in MAX_BATCHES:
                            position += 1
                            d = s.Deployment(accelerator=acc, gpus_per_replica=tp, tp=tp,
                                             weight_precision=weights, kv_cache_precision=kv,
                                             engine=engine, max_batch=batch)
                            try:
                                e = s.serve(model, d, traffic)
                            except s.InvalidSpecError:
                                continue  # no fp8 peak on the A100, as the grid skips
                            price = prices.get(acc.id)
                            c = s.PlanCandidate(deployment=d, estimate=e, usd_per_hour=(
                                None if price is None else price * e.replicas * tp))
                            if e.memory.fits and e.meets_slo is not False and not e.saturated:
                                cost = math.inf if c.usd_per_hour is None else c.usd_per_hour
                                feasible.append((cost, c.num_gpus, position, c))
                            elif e.memory.fits:
                                missed.append((s._miss(e, traffic.slo), position, c))
    return feasible, missed, position + 1


def plan(model: ModelSpec, traffic: s.Traffic, prices: dict[str, float],
         top_k: int = 500) -> s.ServingPlans:
    return s.plan_serving(model, PLAN_ACCELERATORS, traffic, engines=ENGINES,
                          weight_precisions=(s.WeightPrecision.BF16, s.WeightPrecision.FP8),
                          kv_cache_precisions=tuple(s.KvPrecision), max_batches=MAX_BATCHES,
                          price_per_gpu_hour_usd=prices, top_k=top_k)


def online(rate: float, slo: s.Slo) -> s.Traffic:
    return s.Traffic(mode=s.TrafficMode.ONLINE, prompt=s.Lengths.of(p50=800, p99=4000),
                     output=s.Lengths.of(mean=256), requests_per_s=rate, slo=slo)


@pytest.mark.parametrize(("model_name", "rate", "priced"), [
    ("llama3.1-70b", 20.0, True), ("llama3.1-70b", 3.0, False), ("mixtral-8x7b", 50.0, True)])
def test_the_plans_are_the_brute_force_ranking_of_serve(model_name: str, rate: float,
                                                        priced: bool) -> None:
    model = PRESETS[model_name].model
    traffic = online(rate, s.Slo(ttft_p99_s=2.0, tpot_p99_s=0.1))
    prices = PRICES if priced else {}
    feasible, _, total = brute_force(model, traffic, prices)
    result = plan(model, traffic, prices)
    assert result.candidates_total == total == 3 * 4 * 2 * 2 * 2 * 3
    assert result.feasible == len(feasible) > 5
    expected = [c for *_, c in sorted(feasible, key=lambda f: f[:3])]
    assert [p.deployment for p in result.plans] == [c.deployment for c in expected]
    assert [p.estimate for p in result.plans] == [c.estimate for c in expected]
    assert [p.usd_per_hour for p in result.plans] == [c.usd_per_hour for c in expected]
    cheapest = min(f[0] if priced else f[1] for f in feasible)
    first = result.plans[0]
    assert (first.usd_per_hour if priced else first.num_gpus) == cheapest
    assert first.estimate.meets_slo is True
    top = plan(model, traffic, prices, top_k=3)
    assert [p.deployment for p in top.plans] == [c.deployment for c in expected[:3]]


@pytest.mark.parametrize("priced", [True, False])
def test_the_front_is_every_non_dominated_feasible_plan(priced: bool) -> None:
    model = PRESETS["llama3.1-70b"].model
    traffic = online(20.0, s.Slo(ttft_p99_s=2.0, tpot_p99_s=0.1))
    prices = PRICES if priced else {}
    feasible, _, _ = brute_force(model, traffic, prices)
    result = plan(model, traffic, prices)

    def cost(c: s.PlanCandidate) -> float:
        return c.usd_per_hour if priced and c.usd_per_hour is not None else c.num_gpus

    points = [(cost(c), c.estimate.ttft_s.p99) for *_, c in feasible]
    front = [(cost(c), c.estimate.ttft_s.p99) for c in result.pareto]
    assert len(front) >= 2
    for x, t in front:  # nothing feasible is at most as costly and as fast, and better in one
        assert not any(x2 <= x and t2 <= t and (x2 < x or t2 < t) for x2, t2 in points)
    # ...and every non-dominated point is on it (the front is short enough not to be thinned).
    optimal = {(x, t) for x, t in points
               if not any(x2 <= x and t2 <= t and (x2 < x or t2 < t) for x2, t2 in points)}
    assert set(front) == optimal
    assert [x for x, _ in front] == sorted(x for x, _ in front)
    assert [t for _, t in front] == sorted((t for _, t in front), reverse=True)
    assert len(set(front)) == len(front)


def test_with_nothing_feasible_the_closest_are_the_least_missed() -> None:
    model = PRESETS["llama3.1-70b"].model
    traffic = online(20.0, s.Slo(tpot_p99_s=0.004))
    feasible, missed, _ = brute_force(model, traffic, PRICES)
    assert not feasible
    result = plan(model, traffic, PRICES)
    assert result.plans == result.pareto == ()
    expected = [c for *_, c in sorted(missed, key=lambda m: m[:2])[:3]]
    assert [c.deployment for c in result.closest] == [c.deployment for c in expected]
    assert all(c.estimate.meets_slo is False for c in result.closest)


def test_a_long_front_is_thinned_with_both_ends_kept() -> None:
    assert ss._thin(list(range(10))) == list(range(10))
    thinned = ss._thin(list(range(1000)))
    assert len(thinned) == PARETO_POINTS_MAX
    assert (thinned[0], thinned[-1]) == (0, 999)
    assert thinned == sorted(set(thinned))


def test_the_grid_enumerates_in_the_scalar_loops_order_and_skips_missing_precisions() -> None:
    a100, h100 = ACC["a100-sxm4-80gb"], ACC["h100-sxm5-80gb"]
    grid = ss.grid([a100, h100], [[1, 2], [4]], [s.WeightPrecision.FP8, s.WeightPrecision.BF16],
                   [s.KvPrecision.BF16], [s.Engine.VLLM], [None, 32])
    assert grid.total == 3 * 2 * 2
    columns, positions = grid.columns()
    # A100 has no fp8 peak: its fp8 kinds (positions 0-1 and 4-5) are left out.
    assert positions.tolist() == [2, 3, 6, 7, 8, 9, 10, 11]
    d = grid.deployment(9)
    assert (d.accelerator.id, d.tp, d.weight_precision, d.max_batch) == (
        "h100-sxm5-80gb", 4, s.WeightPrecision.FP8, 32)
    assert columns.max_batch.tolist()[:2] == [np.inf, 32.0]
    deployments = [grid.deployment(int(p)) for p in positions]
    same, ok = ss.columns_of(deployments)
    assert ok.all()
    for f in dataclasses.fields(ss.Columns):
        assert np.array_equal(getattr(same, f.name), getattr(columns, f.name), equal_nan=True)


def test_plans_refuse_traffic_without_a_rate() -> None:
    traffic = s.Traffic(mode=s.TrafficMode.OFFLINE, prompt=s.Lengths.of(mean=100),
                        output=s.Lengths.of(mean=100))
    with pytest.raises(s.InvalidSpecError) as error:
        s.plan_serving(PRESETS["llama3.1-8b"].model, PLAN_ACCELERATORS, traffic)
    assert error.value.field == "traffic.requests_per_s"
