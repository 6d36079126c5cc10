"""Serving candidates in bulk: the serving estimate of many deployments at once (issue 19).

The model is written once, in ``service/core/serving.py``: its formulas (``_Replica``'s
methods: memory, decode step, prefill, crossover, capacity, TTFT, TPOT) and the answer they
make (``serving._answer``) run on Python numbers for ``serve()`` and, here, on numpy arrays
with one row per deployment (``_Replica.create(numpy, ...)`` on ``Columns``). So a row's
figures equal ``serve()``'s for that deployment to floating-point rounding (tests/core/
test_serving_search.py checks it on random deployments, MoE and MLA models, every traffic
mode, deployments that do not fit and deployments that miss their SLOs). What this module
adds is control flow for many rows at once, no formula:

- the running batch by Little's law (``serving._online_load``'s fixed point), by the same
  60-step bisection, on the rows that are not saturated; for dense rows the halvings test
  against the root of the piecewise-linear step (``_dense_root``);
- sizing (``serving._size``: the fewest replicas that serve the load below saturation and
  meet the SLOs, growing by max(+1, x1.1)), with every still-unsized row advanced one
  replica count per pass and rows that miss their SLO even unloaded settled early.

``plan_search`` is the vectorised search behind ``serving.plan_serving``: it enumerates the
(accelerator, tp, weight precision, KV precision, engine, max batch) grid as columns,
evaluates it here, ranks the rows that fit and meet the SLOs, and returns row numbers; the
caller re-estimates only the returned plans with ``serve()`` (as ``search.py`` does for
training), so their answers are exactly what ``POST /v1/serving-estimates`` says.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from service.core import serving as sv
from service.core.search import PARETO_POINTS_MAX
from service.core.specs import AcceleratorSpec, ModelSpec

Floats = NDArray[np.float64]
Bools = NDArray[np.bool_]
Ints = NDArray[np.int64]

__all__ = ["Columns", "Figures", "Grid", "GridRow", "PlanRanking", "columns_of", "evaluate",
           "grid", "plan_search"]

@dataclass(frozen=True, slots=True, kw_only=True)
class Columns:
    """Deployments as columns: one row per deployment (a ``serving.Deployment`` each).

    ``max_batch`` is +inf where none is set (``engine_running_limit``, the engine's
    documented default on the row's accelerator, applies there; +inf where it has none);
    ``speculative_acceptance_rate`` is NaN where speculative decoding is off. The engine's
    efficiencies are copied per row from ``serving.ENGINE_EFFICIENCY``."""

    tp: Floats
    pp: Floats
    weight_bytes_per_weight: Floats
    kv_bytes_per_value: Floats
    peak_flops_per_s: Floats
    """At the matmul precision of the weights (``serving.COMPUTE_PRECISION``)."""
    hbm_bytes_per_s: Floats
    scaleup_bytes_per_s: Floats
    memory_bytes: Floats
    hbm_fraction: Floats
    compute_fraction: Floats
    step_overhead_s: Floats
    gpu_memory_fraction: Floats
    engine_running_limit: Floats
    max_batch: Floats
    prefix_cache_hit_fraction: Floats
    speculative_acceptance_rate: Floats
    speculative_draft_tokens: Floats

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    def take(self, index: Ints) -> Columns:
        result: Columns = _take(self, index)
        return result


def _take(rows: Any, index: Ints) -> Any:
    """The dataclass ``rows`` (``Columns``, ``serving._Replica``) at ``index``: every array
    field indexed, other fields as they are."""
    values = {f.name: getattr(rows, f.name) for f in dataclasses.fields(rows)}
    return type(rows)(**{name: value[index] if isinstance(value, np.ndarray) else value
                         for name, value in values.items()})


@dataclass(frozen=True, slots=True, kw_only=True)
class Figures:
    """``serve()``'s numbers for every row of a ``Columns``, field for field
    (``ServingEstimate`` less its warnings and assumptions).

    ``crossover_batch`` is NaN where ``serve()`` says None (decode never compute-bound).
    ``meets_slo`` is ``serve()``'s value where ``slo_given``; with no SLO ``serve()`` says
    None for every row, and ``meets_slo`` here is all False."""

    weights_bytes_per_gpu: Floats
    kv_cache_bytes_per_token: Floats
    kv_cache_bytes_per_sequence: Floats
    workspace_bytes_per_gpu: Floats
    usable_bytes_per_gpu: Floats
    kv_budget_bytes_per_gpu: Floats
    max_concurrency: Ints
    fits: Bools
    prefill_p50_s: Floats
    prefill_p99_s: Floats
    decode_step_s: Floats
    decode_step_memory_s: Floats
    decode_step_compute_s: Floats
    crossover_batch: Floats
    batch: Floats
    output_tokens_per_s: Floats
    input_tokens_per_s: Floats
    requests_per_s: Floats
    capacity_requests_per_s: Floats
    ttft_p50_s: Floats
    ttft_p99_s: Floats
    tpot_p50_s: Floats
    tpot_p99_s: Floats
    e2e_p50_s: Floats
    e2e_p99_s: Floats
    replicas: Ints
    saturated: Bools
    meets_slo: Bools
    slo_given: bool


def _column(values: Sequence[float]) -> Floats:
    return np.asarray(values, dtype=np.float64)


def columns_of(deployments: Sequence[sv.Deployment]) -> tuple[Columns, Bools]:
    """The columns of ``deployments``, and which rows can be evaluated: a row whose
    accelerator has no peak at its weights' matmul precision is refused by ``serve()``
    (``InvalidSpecError``) and is False here (its figures are meaningless)."""
    rows = [_row(d.accelerator, d.tp, d.pp, d.weight_precision, d.kv_cache_precision,
                 d.engine, d.engine_version) for d in deployments]
    ok = np.array([row is not None for row in rows], dtype=bool)
    filled = [row if row is not None else _INVALID_ROW for row in rows]
    columns = Columns(
        **{name: _column([row[i] for row in filled]) for i, name in enumerate(_ROW_FIELDS)},
        max_batch=_column([np.inf if d.max_batch is None else d.max_batch
                           for d in deployments]),
        prefix_cache_hit_fraction=_column([d.prefix_cache_hit_fraction for d in deployments]),
        speculative_acceptance_rate=_column([
            np.nan if d.speculative_acceptance_rate is None else d.speculative_acceptance_rate
            for d in deployments]),
        speculative_draft_tokens=_column([d.speculative_draft_tokens for d in deployments]))
    return columns, ok


_ROW_FIELDS = ("tp", "pp", "weight_bytes_per_weight", "kv_bytes_per_value", "peak_flops_per_s",
               "hbm_bytes_per_s", "scaleup_bytes_per_s", "memory_bytes", "hbm_fraction",
               "compute_fraction", "step_overhead_s", "gpu_memory_fraction",
               "engine_running_limit")
_INVALID_ROW = (1.0,) * len(_ROW_FIELDS)


def _row(accelerator: AcceleratorSpec, tp: int, pp: int, weights: sv.WeightPrecision,
         kv: sv.KvPrecision, engine: sv.Engine,
         engine_version: str | None = None) -> tuple[float, ...] | None:
    """The per-deployment constants ``serving._Replica.build`` reads, in ``_ROW_FIELDS``
    order; None when the accelerator lacks the weights' matmul precision."""
    precision = sv.COMPUTE_PRECISION[weights]
    if precision not in accelerator.peak_flops_per_s:
        return None
    eff = sv.ENGINE_EFFICIENCY[engine]
    limits = sv.engine_limits(engine, engine_version)
    return (float(tp), float(pp), sv.WEIGHT_BYTES[weights], sv.KV_BYTES[kv],
            accelerator.peak_flops_per_s[precision], accelerator.hbm_bytes_per_s,
            accelerator.scaleup_bytes_per_s, float(accelerator.memory_bytes),
            eff.hbm_fraction, eff.compute_fraction, eff.step_overhead_s,
            eff.gpu_memory_fraction,
            np.inf if limits is None else limits.running_limit(accelerator))


def _replica(model: ModelSpec, c: Columns) -> sv._Replica:
    """``serving._Replica.build`` on every row: the model's formulas on numpy columns."""
    speculative = ~np.isnan(c.speculative_acceptance_rate)
    return sv._Replica.create(
        np, model, tp=c.tp, pp=c.pp, weight_bytes=c.weight_bytes_per_weight,
        kv_bytes=c.kv_bytes_per_value, peak_flops_per_s=c.peak_flops_per_s,
        hbm_bytes_per_s=c.hbm_bytes_per_s, scaleup_bytes_per_s=c.scaleup_bytes_per_s,
        memory_bytes=c.memory_bytes, hbm_fraction=c.hbm_fraction,
        compute_fraction=c.compute_fraction, step_overhead_s=c.step_overhead_s,
        gpu_memory_fraction=c.gpu_memory_fraction,
        prefix_cache_hit_fraction=c.prefix_cache_hit_fraction, speculative=speculative,
        acceptance_rate=np.where(speculative, c.speculative_acceptance_rate, 0.0),
        draft_tokens=c.speculative_draft_tokens)


def _step(r: sv._Replica, traffic: sv.Traffic, batch: Floats) -> Floats:
    step: Floats = r.decode_step(batch, sv._context(traffic))[0]
    return step


def _saturated(r: sv._Replica, traffic: sv.Traffic, per_replica_rps: Floats, largest: Floats,
               prefill_mean: Floats) -> tuple[Bools, Bools, Floats, Floats]:
    """``serving._online_load``'s two saturation tests, with no bisection: (saturated,
    prefill alone saturates, prefill share, decode steps per request)."""
    share = per_replica_rps * prefill_mean
    over = share >= 1.0
    steps = traffic.output.mean / r.spec_yield
    idle = np.where(over, 1.0, 1.0 - share)  # rows already over are not tested again
    decode = per_replica_rps * steps * _step(r, traffic, largest) / idle - largest
    return over | (decode > 0), over, share, steps


@dataclass(frozen=True, slots=True)
class _Linear:
    """``_Replica.decode_step`` at the mean context as a function of the batch b, regrouped
    from the replica's own fields: pp x max(m0 + m1 b + e (1 - keep^max(b x spec, 1)),
    c1 b) + a0 + a1 b + overhead (the dense weights, KV cache and touched experts over HBM;
    the FLOPs; the all-reduces' latency and bytes, none at tp 1). The bisection reads it:
    equal to the step to a rounding, and cheaper."""

    m0: Floats
    m1: Floats
    e: Floats
    c1: Floats
    a0: Floats
    a1: Floats


def _linear(r: sv._Replica, traffic: sv.Traffic) -> _Linear:
    context = sv._context(traffic)
    hbm = r.hbm_effective
    split = r.tp > 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        a1 = np.where(split, 2.0 * r.layers_per_gpu * 2.0 * (r.tp - 1) / r.tp * r.spec_tokens
                      * r.model.hidden_size * 2.0 / r.scaleup_bytes_per_s, 0.0)
    return _Linear(
        m0=(r.dense_weight_bytes_per_gpu if r.moe else r.weights_bytes_per_gpu) / hbm
        + r.kernel_floor_s(),
        m1=context * r.kv_bytes_per_token_per_gpu / hbm,
        e=r.expert_bytes_per_gpu / hbm if r.moe else np.zeros_like(hbm),
        c1=r.spec_tokens * (r.matmul_flops_per_token_per_gpu + r.decode_attention(context))
        / r.compute_effective,
        a0=np.where(split, 2.0 * r.layers_per_gpu * sv.TP_ALLREDUCE_LATENCY_S, 0.0), a1=a1)


def _fast_step(r: sv._Replica, s: _Linear, batch: Floats) -> Floats:
    """The step from ``_Linear``, for the bisection's sign tests only."""
    memory = s.m0 + s.m1 * batch
    if r.moe:
        # keep^x as exp(x ln keep): a rounding apart, and numpy's exp is several times
        # faster than its power
        touched = 1.0 - np.exp(np.maximum(batch * r.spec_tokens, 1.0) * math.log(
            r.experts_keep)) if r.experts_keep > 0 else 1.0
        memory = memory + s.e * touched
    step: Floats = (r.pp * np.maximum(memory, s.c1 * batch) + s.a0 + s.a1 * batch
                    + r.step_overhead_s)
    return step


def _dense_root(r: sv._Replica, s: _Linear, rate_steps: Floats) -> Floats:
    """The batch b where rate_steps x step(b) = b for dense rows, on the step's linear
    pieces (``_Linear``): the memory-bound one where the root lies below the ridge, else
    the compute-bound one."""
    fixed = s.a0 + r.step_overhead_s
    memory_slope = 1.0 - rate_steps * (r.pp * s.m1 + s.a1)
    with np.errstate(divide="ignore", invalid="ignore"):
        on_memory = rate_steps * (r.pp * s.m0 + fixed) / memory_slope
        on_compute = rate_steps * fixed / (1.0 - rate_steps * (r.pp * s.c1 + s.a1))
        ridge = np.where(s.c1 > s.m1, s.m0 / (s.c1 - s.m1), np.inf)
    result: Floats = np.where((memory_slope > 0) & (on_memory <= ridge), on_memory, on_compute)
    return result


def _online_load(r: sv._Replica, traffic: sv.Traffic, per_replica_rps: Floats,
                 largest: Floats, prefill_mean: Floats, *, exact: bool = True) -> sv._Load:
    """``serving._online_load``: the running batch by Little's law, by the same bisection
    (run on the rows that are not saturated)."""
    saturated, over, share, steps = _saturated(r, traffic, per_replica_rps, largest,
                                               prefill_mean)
    high = largest.copy()
    bisect = np.flatnonzero(~saturated)
    if bisect.size:
        sub = _take(r, bisect) if bisect.size < len(largest) else r
        rate_steps = per_replica_rps[bisect] * steps[bisect] / (1.0 - share[bisect])
        low, top = np.full(bisect.size, 1e-9), largest[bisect].copy()
        linear = _linear(sub, traffic)
        if sub.moe:
            for _ in range(sv.BISECTION_STEPS):
                mid = (low + top) / 2
                up = rate_steps * _fast_step(sub, linear, mid) - mid > 0  # excess(mid) > 0
                low = np.where(up, mid, low)
                top = np.where(up, top, mid)
        else:
            # A dense step is piecewise linear in the batch, so excess(b) is convex, positive
            # near 0 and not positive at the (unsaturated) largest batch: positive exactly
            # below its one root. Asking "mid < root?" at each halving lands where serve()'s
            # halvings land (to a rounding of the root); while sizing, the root itself does
            # (it is within largest / 2^60 of that, and only the step at max(b, 1) is read).
            root = _dense_root(sub, linear, rate_steps)
            if exact:
                for _ in range(sv.BISECTION_STEPS):
                    mid = (low + top) / 2
                    up = mid < root
                    low = np.where(up, mid, low)
                    top = np.where(up, top, mid)
            else:
                top = np.minimum(np.maximum(root, 1e-9), top)
        high[bisect] = top
    batch = np.where(saturated, largest, high)
    step = _step(r, traffic, np.where(saturated, largest, np.maximum(high, 1.0)))
    return sv._Load(batch, step, np.where(over, np.minimum(share, 1.0), share), saturated)


def _hopeless(r: sv._Replica, traffic: sv.Traffic) -> Bools:
    """Rows whose SLO fails even unloaded, so at every replica count: TTFT is at least the
    unloaded prefill (the M/G/1 wait is never negative) and TPOT at least one batch-1 step
    over the tokens per step (the step grows with the batch, the prefill share only
    stretches it)."""
    slo, prompt = traffic.slo, traffic.prompt
    hopeless = np.zeros(r.tp.shape, dtype=bool)
    for limit, tokens in ((slo.ttft_p50_s, prompt.p50), (slo.ttft_p99_s, prompt.p99)):
        if limit is not None:
            hopeless |= r.prefill_s(tokens) > limit
    tpot_limits = [limit for limit in (slo.tpot_p50_s, slo.tpot_p99_s) if limit is not None]
    if tpot_limits:
        hopeless |= _step(r, traffic, np.ones(r.tp.shape)) / r.spec_yield > min(tpot_limits)
    return hopeless


def _size(r: sv._Replica, traffic: sv.Traffic, largest: Floats, capacity: Floats,
          prefill_mean: Floats) -> Floats:
    """``serving._size`` on every row: each pass tries every still-unsized row's next
    replica count, and settles the rows that count serves (or that are near idle).

    Only rows that are neither saturated nor near idle nor hopeless (``_hopeless``) need
    their latencies, so only those run the running-batch bisection; a hopeless row is
    settled, exactly as ``serve()`` settles it, at its first count that is unsaturated and
    near idle."""
    rate = traffic.requests_per_s
    assert rate is not None  # noqa: S101 - online with a rate
    count = np.maximum(1.0, np.ceil(rate / capacity))
    result = np.full_like(count, float(sv.MAX_REPLICAS))
    hopeless = _hopeless(r, traffic)
    active = np.flatnonzero(count <= sv.MAX_REPLICAS)
    while active.size:
        sub = _take(r, active) if active.size < len(count) else r
        n = count[active]
        per_replica = rate / n
        mean = prefill_mean[active]
        saturated = _saturated(sub, traffic, per_replica, largest[active], mean)[0]
        done = ~saturated & (per_replica * mean < sv.NEAR_IDLE_PREFILL_SHARE)
        check = np.flatnonzero(~saturated & ~done & ~hopeless[active])
        if check.size:
            rows = _take(sub, check)
            load = _online_load(rows, traffic, per_replica[check], largest[active][check],
                                mean[check], exact=False)
            ttft = rows.ttft(traffic, per_replica[check], load.prefill_share, mean[check],
                             sv._decode_work_share(np, per_replica[check],
                                                   capacity[active][check], load.prefill_share),
                             batch=load.batch, step=load.step_s)
            tpot = rows.tpot(traffic, load.step_s, load.prefill_share, per_replica[check])
            within = sv._within_slo(traffic.slo, ttft, tpot)
            done[check] = True if within is None else within
        result[active[done]] = n[done]
        following = np.maximum(n + 1.0, np.ceil(n * sv.REPLICA_GROWTH))
        count[active] = following
        active = active[~done & (following <= sv.MAX_REPLICAS)]
    return result


def evaluate(model: ModelSpec, columns: Columns, traffic: sv.Traffic,
             replicas: int | None = None) -> Figures:
    """``serve(model, deployment, traffic, replicas)`` for every row of ``columns`` at once.

    Rows ``columns_of`` marks invalid give meaningless figures; drop them first."""
    r = _replica(model, columns)
    prompt, output = traffic.prompt, traffic.output
    usable, workspace, budget, per_sequence, concurrency = r.memory(traffic)
    fits = concurrency >= 1
    limit = np.where(np.isinf(columns.max_batch), columns.engine_running_limit,
                     columns.max_batch)
    largest = sv._largest(np, concurrency, limit)
    prefill_mean = r.prefill_s(prompt.mean)
    rows = len(columns)
    a = sv._answer(
        r, traffic, largest=largest, fits=fits, prefill_mean=prefill_mean, replicas=replicas,
        size=lambda capacity: (np.full(rows, float(replicas)) if replicas
                               else _size(r, traffic, largest, capacity, prefill_mean)),
        online_load=lambda rps, _: _online_load(r, traffic, rps, largest, prefill_mean))
    return Figures(
        weights_bytes_per_gpu=r.weights_bytes_per_gpu,
        kv_cache_bytes_per_token=r.kv_bytes_per_token_per_gpu,
        kv_cache_bytes_per_sequence=per_sequence, workspace_bytes_per_gpu=workspace,
        usable_bytes_per_gpu=usable, kv_budget_bytes_per_gpu=np.maximum(budget, 0.0),
        max_concurrency=concurrency.astype(np.int64), fits=fits,
        prefill_p50_s=r.prefill_s(prompt.p50), prefill_p99_s=r.prefill_s(prompt.p99),
        decode_step_s=a.load.step_s, decode_step_memory_s=a.memory_s,
        decode_step_compute_s=a.compute_s, crossover_batch=r.crossover(sv._context(traffic)),
        batch=a.load.batch, output_tokens_per_s=a.served * output.mean,
        input_tokens_per_s=a.served * prompt.mean, requests_per_s=a.served,
        capacity_requests_per_s=a.capacity, ttft_p50_s=a.ttft[0], ttft_p99_s=a.ttft[1],
        tpot_p50_s=a.tpot[0], tpot_p99_s=a.tpot[1], e2e_p50_s=a.e2e[0], e2e_p99_s=a.e2e[1],
        replicas=np.broadcast_to(np.asarray(a.count, dtype=np.float64), (rows,)).astype(
            np.int64),
        saturated=a.load.saturated,
        meets_slo=np.zeros(rows, dtype=bool) if a.within is None else a.meets,
        slo_given=a.within is not None)


# -- the plan search ----------------------------------------------------------------------------

CLOSEST_SHOWN = 3
"""Near misses listed when nothing meets the SLOs (as ``search.CLOSEST_SHOWN``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GridRow:
    """One (accelerator, tp, weight precision, KV precision, engine) of the grid; the max
    batches multiply it."""

    accelerator: AcceleratorSpec
    tp: int
    weight_precision: sv.WeightPrecision
    kv_cache_precision: sv.KvPrecision
    engine: sv.Engine


@dataclass(frozen=True, slots=True, kw_only=True)
class Grid:
    """Every candidate of a plan search, in enumeration order: position i is
    ``kinds[i // len(max_batches)]`` at ``max_batches[i % len(max_batches)]``."""

    kinds: tuple[GridRow, ...]
    max_batches: tuple[int | None, ...]

    @property
    def total(self) -> int:
        return len(self.kinds) * len(self.max_batches)

    def deployment(self, position: int) -> sv.Deployment:
        kind = self.kinds[position // len(self.max_batches)]
        return sv.Deployment(
            accelerator=kind.accelerator, gpus_per_replica=kind.tp, tp=kind.tp,
            weight_precision=kind.weight_precision, kv_cache_precision=kind.kv_cache_precision,
            engine=kind.engine, max_batch=self.max_batches[position % len(self.max_batches)])

    def columns(self) -> tuple[Columns, Ints]:
        """The columns of the candidates ``serve()`` accepts, and their positions (a kind
        whose accelerator lacks the weights' matmul precision is left out, as
        ``InvalidSpecError`` leaves it out of the scalar loop)."""
        rows = [_row(k.accelerator, k.tp, 1, k.weight_precision, k.kv_cache_precision,
                     k.engine) for k in self.kinds]
        valid = [i for i, row in enumerate(rows) if row is not None]
        per_kind = len(self.max_batches)
        batches = _column([np.inf if b is None else b for b in self.max_batches])
        table = np.array([rows[i] for i in valid], dtype=np.float64).reshape(
            len(valid), len(_ROW_FIELDS))
        n = len(valid) * per_kind
        columns = Columns(
            **{name: np.repeat(table[:, j], per_kind) for j, name in enumerate(_ROW_FIELDS)},
            max_batch=np.tile(batches, len(valid)),
            prefix_cache_hit_fraction=np.zeros(n),
            speculative_acceptance_rate=np.full(n, np.nan),
            speculative_draft_tokens=np.full(n, float(sv.DEFAULT_DRAFT_TOKENS)))
        positions = (np.repeat(np.asarray(valid, dtype=np.int64) * per_kind, per_kind)
                     + np.tile(np.arange(per_kind, dtype=np.int64), len(valid)))
        return columns, positions


def grid(accelerators: Sequence[AcceleratorSpec], tp_options: Sequence[Sequence[int]],
         weight_precisions: Sequence[sv.WeightPrecision],
         kv_cache_precisions: Sequence[sv.KvPrecision], engines: Sequence[sv.Engine],
         max_batches: Sequence[int | None]) -> Grid:
    """The candidates in the scalar loop's order: accelerator, tp (``tp_options[i]`` for
    accelerator i), weight precision, KV precision, engine, max batch (innermost)."""
    kinds = tuple(GridRow(accelerator=a, tp=tp, weight_precision=w, kv_cache_precision=kv,
                          engine=e)
                  for a, tps in zip(accelerators, tp_options, strict=True) for tp in tps
                  for w in weight_precisions for kv in kv_cache_precisions for e in engines)
    return Grid(kinds=kinds, max_batches=tuple(max_batches))


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRanking:
    """Grid positions: ``plans`` cheapest first (at most top_k); ``pareto`` the cost (GPUs
    when no price is given) against p99 TTFT front of every feasible candidate, cheapest
    first, each strictly faster than the one before, none dominated, thinned evenly to
    ``PARETO_POINTS_MAX`` (both ends kept); ``closest`` the near misses when nothing is
    feasible."""

    plans: tuple[int, ...]
    pareto: tuple[int, ...]
    closest: tuple[int, ...]
    candidates_total: int
    evaluated: int
    """Candidates ``serve()`` accepts (the grid less kinds without the matmul precision)."""
    feasible: int


def plan_search(model: ModelSpec, candidates: Grid, traffic: sv.Traffic, *,
                price_per_gpu_hour_usd: Mapping[str, float], top_k: int) -> PlanRanking:
    """Evaluate the grid in bulk and rank it as ``serving.plan_serving`` ranks it: feasible
    rows (fit, meet the SLOs or none given, not saturated) by (cost per hour, or +inf
    without a price; GPUs; position); the front keeps each feasible row whose p99 TTFT
    beats every row at most as costly; with nothing feasible, the rows that fit, by how far
    their worst SLO is missed (``serving._miss``), position breaking ties."""
    columns, positions = candidates.columns()
    evaluated = len(positions)
    fit = _replica(model, columns).memory(traffic)[4] >= 1
    index = np.flatnonzero(fit)
    columns, positions = columns.take(index), positions[index]
    figures = evaluate(model, columns, traffic)
    feasible = ~figures.saturated & (figures.meets_slo if figures.slo_given else True)
    chosen = np.flatnonzero(feasible)
    per_kind = len(candidates.max_batches)
    kind_of = positions[chosen] // per_kind
    price = np.array([price_per_gpu_hour_usd.get(k.accelerator.id, np.nan)
                      for k in candidates.kinds], dtype=np.float64)[kind_of] if chosen.size \
        else np.zeros(0)
    tp = columns.tp[chosen]
    replicas = figures.replicas[chosen].astype(np.float64)
    cost = np.where(np.isnan(price), np.inf, price * replicas * tp)
    gpus = replicas * tp
    order = chosen[np.lexsort((positions[chosen], gpus, cost))]
    # The front's cost axis is the price where any is given, else GPUs; among equal costs
    # the fastest comes first, so no point on it is dominated (cost <=, TTFT <, or the
    # converse) by a feasible candidate.
    axis = cost if bool(np.isfinite(cost).any()) else gpus
    ttft = figures.ttft_p99_s[chosen]
    by_axis = np.lexsort((positions[chosen], ttft, axis))
    best_before = np.concatenate(([np.inf], np.minimum.accumulate(ttft[by_axis])[:-1]))
    front = [int(p) for p in positions[chosen[by_axis[ttft[by_axis] < best_before]]]]
    closest: list[int] = []
    if not order.size:
        miss = _miss(traffic.slo, figures)
        ranked = np.lexsort((positions, miss))
        closest = [int(positions[i]) for i in ranked[:CLOSEST_SHOWN]]
    return PlanRanking(plans=tuple(int(p) for p in positions[order[:top_k]]),
                       pareto=tuple(_thin(front)), closest=tuple(closest),
                       candidates_total=candidates.total, evaluated=evaluated,
                       feasible=int(order.size))


def _miss(slo: sv.Slo, f: Figures) -> Floats:
    """``serving._miss``: the worst SLO's value over its limit (1 when none is given)."""
    ratios = [value / limit for limit, value in (
        (slo.ttft_p50_s, f.ttft_p50_s), (slo.ttft_p99_s, f.ttft_p99_s),
        (slo.tpot_p50_s, f.tpot_p50_s), (slo.tpot_p99_s, f.tpot_p99_s)) if limit]
    if not ratios:
        return np.ones(f.ttft_p50_s.shape)
    result: Floats = np.maximum.reduce(ratios)
    return result


def _thin(front: list[int]) -> list[int]:
    """At most ``PARETO_POINTS_MAX`` points, evenly spread, both ends kept (``search._thin``)."""
    if len(front) <= PARETO_POINTS_MAX:
        return front
    step = (len(front) - 1) / (PARETO_POINTS_MAX - 1)
    return [front[round(i * step)] for i in range(PARETO_POINTS_MAX)]
