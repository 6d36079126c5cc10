"""Serving candidates in bulk: the serving estimate of many deployments at once (issue 19).

``serve()`` (``service/core/serving.py``) is the reference: this module runs the same
formulas, in the same order, on numpy arrays with one row per deployment, so a row's figures
equal ``serve()``'s for that deployment to floating-point rounding (tests/core/
test_serving_search.py checks it on random deployments, MoE and MLA models, every traffic
mode, deployments that do not fit and deployments that miss their SLOs). Nothing here is a
new model; every formula's source is named where ``serving.py`` states it:

- memory fit and the largest concurrency: ``serving._memory``;
- decode step (roofline of HBM bytes against FLOPs, MoE experts touched, two tensor-parallel
  all-reduces per layer, the engine's step overhead): ``serving._Replica.decode_step``;
- prefill: ``serving._Replica.prefill_s``; speculative tokens per step:
  ``_Replica.tokens_per_step``;
- the running batch by Little's law, found by the same 60-step bisection:
  ``serving._online_load``; TTFT (M/G/1, Pollaczek-Khinchine mean, exponential tail) and
  TPOT: ``serving._ttft`` and ``serving._tpot``;
- sizing (the fewest replicas that serve the load below saturation and meet the SLOs,
  growing by max(+1, x1.1)): ``serving._size``, with every still-unsized row advanced one
  replica count per pass.

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
from service.core.params import count_parameters
from service.core.search import PARETO_POINTS_MAX
from service.core.specs import AcceleratorSpec, ModelSpec

Floats = NDArray[np.float64]
Bools = NDArray[np.bool_]
Ints = NDArray[np.int64]

__all__ = ["Columns", "Figures", "Grid", "GridRow", "PlanRanking", "columns_of", "evaluate",
           "grid", "plan_search"]

BISECTION_STEPS = 60
"""Halvings of the running-batch bisection; ``serving._online_load`` uses the same 60."""
NEAR_IDLE_PREFILL_SHARE = 0.01
"""``serving._size`` stops adding replicas once a replica spends under 1 % of its time in
prefill: an SLO missed there cannot be met by more replicas."""
REPLICA_GROWTH = 1.1
"""``serving._size`` tries max(count + 1, ceil(count x 1.1)) replicas next."""
LATENCY_TAIL = 1.0 - sv.TAIL_P99
"""1 - 0.99, computed as ``serving._ttft``'s ``wait_at`` computes it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Columns:
    """Deployments as columns: one row per deployment (a ``serving.Deployment`` each).

    ``max_batch`` is +inf where none is set; ``speculative_acceptance_rate`` is NaN where
    speculative decoding is off. The engine's efficiencies are copied per row from
    ``serving.ENGINE_EFFICIENCY``."""

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
    max_batch: Floats
    prefix_cache_hit_fraction: Floats
    speculative_acceptance_rate: Floats
    speculative_draft_tokens: Floats

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    def take(self, index: Ints) -> Columns:
        return Columns(**_take(self, index))


def _take(columns: Columns | _Rows, index: Ints) -> dict[str, Any]:
    """Every array field at ``index``; other fields as they are."""
    values = {f.name: getattr(columns, f.name) for f in dataclasses.fields(columns)}
    return {name: value[index] if isinstance(value, np.ndarray) else value
            for name, value in values.items()}


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
                 d.engine) for d in deployments]
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
               "compute_fraction", "step_overhead_s", "gpu_memory_fraction")
_INVALID_ROW = (1.0,) * len(_ROW_FIELDS)


def _row(accelerator: AcceleratorSpec, tp: int, pp: int, weights: sv.WeightPrecision,
         kv: sv.KvPrecision, engine: sv.Engine) -> tuple[float, ...] | None:
    """The per-deployment constants ``serving._Replica.build`` reads, in ``_ROW_FIELDS``
    order; None when the accelerator lacks the weights' matmul precision."""
    precision = sv.COMPUTE_PRECISION[weights]
    if precision not in accelerator.peak_flops_per_s:
        return None
    eff = sv.ENGINE_EFFICIENCY[engine]
    return (float(tp), float(pp), sv.WEIGHT_BYTES[weights], sv.KV_BYTES[kv],
            accelerator.peak_flops_per_s[precision], accelerator.hbm_bytes_per_s,
            accelerator.scaleup_bytes_per_s, float(accelerator.memory_bytes),
            eff.hbm_fraction, eff.compute_fraction, eff.step_overhead_s,
            eff.gpu_memory_fraction)


@dataclass(frozen=True, slots=True)
class _Rows:
    """Per-row constants of one model on the rows' deployments (``serving._Replica``), and
    the traffic's scalars, for the rows under evaluation (a subset keeps its own copy)."""

    tp: Floats
    pp: Floats
    layers_per_gpu: Floats
    weights_bytes_per_gpu: Floats
    dense_weight_bytes_per_gpu: Floats
    expert_bytes_per_gpu: Floats
    matmul_flops_per_token_per_gpu: Floats
    kv_bytes_per_token_per_gpu: Floats
    peak_flops_per_s: Floats
    hbm_bytes_per_s: Floats
    hbm_effective: Floats
    """hbm_bytes_per_s x hbm_fraction."""
    compute_effective: Floats
    """peak_flops_per_s x compute_fraction."""
    scaleup_bytes_per_s: Floats
    step_overhead_s: Floats
    spec_tokens: Floats
    tokens_per_step: Floats
    prefix_cache_hit_fraction: Floats
    decode_attention: Floats
    """Per-token attention FLOPs of one decode step at the mean context, per GPU."""
    moe: bool
    experts_keep: float
    """1 - k / E: the chance an expert is not picked by one token."""
    # The decode step as a function of the batch b, regrouped for the bisection:
    # pp x max(step_m0 + step_m1 b + step_e (1 - keep^max(b x spec, 1)), step_c1 b)
    # + step_a0 + step_a1 b + overhead (step_a0 = step_a1 = 0 at tp 1).
    step_m0: Floats
    step_m1: Floats
    step_e: Floats
    step_c1: Floats
    step_a0: Floats
    step_a1: Floats

    def take(self, index: Ints) -> _Rows:
        return _Rows(**_take(self, index))


class _Model:
    """What one model and one traffic contribute, shared by every row."""

    def __init__(self, model: ModelSpec, traffic: sv.Traffic) -> None:
        self.model = model
        self.traffic = traffic
        self.counts = count_parameters(model)
        self.attention_width = sv._attention_width(model)
        self.context = traffic.prompt.mean + traffic.output.mean / 2


def _build(m: _Model, c: Columns) -> _Rows:
    """``serving._Replica.build`` on every row."""
    model, counts = m.model, m.counts
    gpus = c.tp * c.pp
    width = c.weight_bytes_per_weight
    expert_bytes = counts.routed_expert_total * width / gpus
    weights = counts.total * width / gpus
    active_matmul = counts.active - counts.embedding
    layers = model.num_layers / c.pp
    kv_width = c.kv_bytes_per_value
    if model.mla is not None:  # serving.kv_bytes_per_token_per_gpu
        kv = layers * (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * kv_width
    else:
        head_dim = model.head_dim or model.hidden_size // model.num_heads
        kv = 2.0 * layers * np.maximum(1.0, model.num_kv_heads / c.tp) * head_dim * kv_width
    speculative = ~np.isnan(c.speculative_acceptance_rate)
    rate = np.where(speculative, c.speculative_acceptance_rate, 0.0)
    k = c.speculative_draft_tokens
    tokens_per_step = np.where(speculative, (1.0 - rate ** (k + 1)) / (1.0 - rate), 1.0)
    moe = model.num_experts > 0 and counts.routed_expert_total * 1.0 != 0.0
    return _Rows(
        tp=c.tp, pp=c.pp, layers_per_gpu=layers, weights_bytes_per_gpu=weights,
        dense_weight_bytes_per_gpu=weights - expert_bytes, expert_bytes_per_gpu=expert_bytes,
        matmul_flops_per_token_per_gpu=2.0 * active_matmul / gpus,
        kv_bytes_per_token_per_gpu=kv, peak_flops_per_s=c.peak_flops_per_s,
        hbm_bytes_per_s=c.hbm_bytes_per_s, hbm_effective=c.hbm_bytes_per_s * c.hbm_fraction,
        compute_effective=c.peak_flops_per_s * c.compute_fraction,
        scaleup_bytes_per_s=c.scaleup_bytes_per_s, step_overhead_s=c.step_overhead_s,
        spec_tokens=np.where(speculative, k + 1.0, 1.0), tokens_per_step=tokens_per_step,
        prefix_cache_hit_fraction=c.prefix_cache_hit_fraction,
        decode_attention=4.0 * layers * m.attention_width * m.context / c.tp,
        moe=moe,
        experts_keep=(1.0 - model.experts_per_token / model.num_experts) if moe else 1.0,
        **_linear_terms(m, layers, weights, expert_bytes, moe, kv, c))


def _linear_terms(m: _Model, layers: Floats, weights: Floats, expert_bytes: Floats,
                  moe: bool, kv: Floats, c: Columns) -> dict[str, Floats]:
    """``_decode_step``'s terms as coefficients of the batch (``_Rows.step_*``)."""
    hbm = c.hbm_bytes_per_s * c.hbm_fraction
    speculative = ~np.isnan(c.speculative_acceptance_rate)
    spec = np.where(speculative, c.speculative_draft_tokens + 1.0, 1.0)
    gpus = c.tp * c.pp
    matmul = 2.0 * (m.counts.active - m.counts.embedding) / gpus
    attention = 4.0 * layers * m.attention_width * m.context / c.tp
    split = c.tp > 1.0
    return {
        "step_m0": (weights - expert_bytes if moe else weights) / hbm,
        "step_m1": m.context * kv / hbm,
        "step_e": expert_bytes / hbm if moe else np.zeros_like(weights),
        "step_c1": spec * (matmul + attention) / (c.peak_flops_per_s * c.compute_fraction),
        "step_a0": np.where(split, 2.0 * layers * 20e-6, 0.0),
        "step_a1": np.where(split, 2.0 * layers * 2.0 * (c.tp - 1) / c.tp * spec
                            * m.model.hidden_size * 2.0 / c.scaleup_bytes_per_s, 0.0)}


def _allreduce_s(m: _Model, r: _Rows, tokens: Floats) -> Floats:
    """``_Replica.tp_allreduce_s``: two ring all-reduces per layer over NVLink, 20 us each."""
    volume = tokens * m.model.hidden_size * 2.0
    time = 2.0 * r.layers_per_gpu * (
        20e-6 + 2.0 * (r.tp - 1) / r.tp * volume / r.scaleup_bytes_per_s)
    return np.where(r.tp == 1.0, 0.0, time)


def _weight_bytes_read(r: _Rows, batch: Floats) -> Floats:
    """``_Replica.weight_bytes_read``: dense weights plus the routed experts touched."""
    if not r.moe:
        return r.weights_bytes_per_gpu
    touched = 1.0 - np.power(r.experts_keep, np.maximum(batch, 1.0))
    return r.dense_weight_bytes_per_gpu + r.expert_bytes_per_gpu * touched


def _decode_step(m: _Model, r: _Rows, batch: Floats) -> tuple[Floats, Floats, Floats]:
    """``_Replica.decode_step`` at the mean context: (step, memory term, compute term)."""
    tokens = batch * r.spec_tokens
    flops = tokens * (r.matmul_flops_per_token_per_gpu + r.decode_attention)
    kv = batch * m.context * r.kv_bytes_per_token_per_gpu
    memory_s = (_weight_bytes_read(r, tokens) + kv) / r.hbm_effective
    compute_s = flops / r.compute_effective
    step = r.pp * np.maximum(memory_s, compute_s) + _allreduce_s(m, r, tokens) + (
        r.step_overhead_s)
    return step, r.pp * memory_s, r.pp * compute_s


def _step(m: _Model, r: _Rows, batch: Floats) -> Floats:
    return _decode_step(m, r, batch)[0]


def _prefill_s(m: _Model, r: _Rows, prompt_tokens: float | Floats) -> Floats:
    """``_Replica.prefill_s``: compute-bound prefill of the uncached prompt."""
    tokens = prompt_tokens * (1.0 - r.prefix_cache_hit_fraction)
    attention = 2.0 * r.layers_per_gpu * m.attention_width * tokens * prompt_tokens / r.tp
    flops = tokens * r.matmul_flops_per_token_per_gpu + attention
    compute = flops / r.compute_effective
    weights = r.weights_bytes_per_gpu / r.hbm_effective
    return r.pp * np.maximum(compute, weights) + _allreduce_s(m, r, tokens)


def _capacity(m: _Model, r: _Rows, batch: Floats, prefill_mean: Floats) -> Floats:
    """``serving._capacity``: requests per second one replica completes at ``batch``."""
    step = _step(m, r, batch)
    decode_per_request = m.traffic.output.mean / r.tokens_per_step * step / batch
    result: Floats = 1.0 / (prefill_mean + decode_per_request)
    return result


@dataclass(frozen=True, slots=True)
class _Load:
    batch: Floats
    step_s: Floats
    prefill_share: Floats
    saturated: Bools


def _saturated(m: _Model, r: _Rows, per_replica_rps: Floats, largest: Floats,
               prefill_mean: Floats) -> tuple[Bools, Bools, Floats, Floats]:
    """``serving._online_load``'s two saturation tests, with no bisection: (saturated,
    prefill alone saturates, prefill share, decode steps per request)."""
    share = per_replica_rps * prefill_mean
    over = share >= 1.0
    steps = m.traffic.output.mean / r.tokens_per_step
    idle = np.where(over, 1.0, 1.0 - share)  # rows already over are not tested again
    decode = per_replica_rps * steps * _step(m, r, largest) / idle - largest
    return over | (decode > 0), over, share, steps


def _dense_root(r: _Rows, rate_steps: Floats) -> Floats:
    """The batch b where rate_steps x step(b) = b for dense rows, on the step's linear
    pieces (``_Rows.step_*``): the memory-bound one where the root lies below the ridge,
    else the compute-bound one."""
    fixed = r.step_a0 + r.step_overhead_s
    memory_slope = 1.0 - rate_steps * (r.pp * r.step_m1 + r.step_a1)
    with np.errstate(divide="ignore", invalid="ignore"):
        on_memory = rate_steps * (r.pp * r.step_m0 + fixed) / memory_slope
        on_compute = rate_steps * fixed / (1.0 - rate_steps * (r.pp * r.step_c1 + r.step_a1))
        ridge = np.where(r.step_c1 > r.step_m1, r.step_m0 / (r.step_c1 - r.step_m1), np.inf)
    result: Floats = np.where((memory_slope > 0) & (on_memory <= ridge), on_memory, on_compute)
    return result


def _fast_step(r: _Rows, batch: Floats) -> Floats:
    """``_decode_step``'s step from the regrouped terms (``_Rows.step_*``): equal to a
    rounding, for the bisection's sign tests only."""
    memory = r.step_m0 + r.step_m1 * batch
    if r.moe:
        # keep^x as exp(x ln keep): a rounding apart, and numpy's exp is several times
        # faster than its power
        touched = 1.0 - np.exp(np.maximum(batch * r.spec_tokens, 1.0) * math.log(
            r.experts_keep)) if r.experts_keep > 0 else 1.0
        memory = memory + r.step_e * touched
    step: Floats = (r.pp * np.maximum(memory, r.step_c1 * batch) + r.step_a0
                    + r.step_a1 * batch + r.step_overhead_s)
    return step


def _online_load(m: _Model, r: _Rows, per_replica_rps: Floats, largest: Floats,
                 prefill_mean: Floats, *, exact: bool = True) -> _Load:
    """``serving._online_load``: the running batch by Little's law, by the same bisection
    (run on the rows that are not saturated)."""
    saturated, over, share, steps = _saturated(m, r, per_replica_rps, largest, prefill_mean)
    high = largest.copy()
    bisect = np.flatnonzero(~saturated)
    if bisect.size:
        sub = r.take(bisect) if bisect.size < len(largest) else r
        rate_steps = per_replica_rps[bisect] * steps[bisect] / (1.0 - share[bisect])
        low, top = np.full(bisect.size, 1e-9), largest[bisect].copy()
        if sub.moe:
            for _ in range(BISECTION_STEPS):
                mid = (low + top) / 2
                up = rate_steps * _fast_step(sub, mid) - mid > 0  # excess(mid) > 0
                low = np.where(up, mid, low)
                top = np.where(up, top, mid)
        else:
            # A dense step is piecewise linear in the batch, so excess(b) is convex, positive
            # near 0 and not positive at the (unsaturated) largest batch: positive exactly
            # below its one root. Asking "mid < root?" at each halving lands where serve()'s
            # halvings land (to a rounding of the root); while sizing, the root itself does
            # (it is within largest / 2^60 of that, and only the step at max(b, 1) is read).
            root = _dense_root(sub, rate_steps)
            if exact:
                for _ in range(BISECTION_STEPS):
                    mid = (low + top) / 2
                    up = mid < root
                    low = np.where(up, mid, low)
                    top = np.where(up, top, mid)
            else:
                top = np.minimum(np.maximum(root, 1e-9), top)
        high[bisect] = top
    batch = np.where(saturated, largest, high)
    step = _step(m, r, np.where(saturated, largest, np.maximum(high, 1.0)))
    return _Load(batch, step, np.where(over, np.minimum(share, 1.0), share), saturated)


def _decode_work_share(per_replica_rps: Floats, capacity: Floats,
                       prefill_share: Floats) -> Floats:
    """``serving._decode_work_share``."""
    result: Floats = np.maximum(per_replica_rps / capacity - prefill_share, 0.0)
    return result


def _ttft(m: _Model, r: _Rows, per_replica_rps: Floats, prefill_share: Floats,
          prefill_mean: Floats, decode_share: Floats | float) -> tuple[Floats, Floats]:
    """``serving._ttft``: prefill of the p50/p99 prompt plus the M/G/1 wait (p50, p99)."""
    prompt = m.traffic.prompt
    p50, p99 = _prefill_s(m, r, prompt.p50), _prefill_s(m, r, prompt.p99)
    ratio = prompt.second_moment / max(prompt.mean ** 2, 1e-12)
    s2 = prefill_mean * prefill_mean * ratio
    rho = np.minimum(prefill_share / np.maximum(1.0 - decode_share, 1e-9), 0.999999)
    wait_mean = per_replica_rps * s2 / (2.0 * (1.0 - rho))

    def wait_at(tail: float) -> Floats:
        none = (rho <= tail) | (wait_mean <= 0)
        safe_rho = np.where(none, 1.0, rho)
        result: Floats = np.where(none, 0.0,
                                  wait_mean / safe_rho * np.log(safe_rho / tail))
        return result

    idle = per_replica_rps <= 0
    return (np.where(idle, p50, p50 + wait_at(1.0 - 0.5)),
            np.where(idle, p99, p99 + wait_at(LATENCY_TAIL)))


def _tpot(m: _Model, r: _Rows, step: Floats, prefill_share: Floats,
          served: Floats) -> tuple[Floats, Floats]:
    """``serving._tpot``: the step stretched by the prefill share; p99 adds a chunk."""
    p50 = step / np.maximum(1.0 - prefill_share, 1e-9) / r.tokens_per_step
    chunk = _prefill_s(m, r, min(sv.PREFILL_CHUNK_TOKENS, m.traffic.prompt.p99))
    with_prefill = served * step > sv.P99_TPOT_STEP_SHARE
    return p50, p50 + np.where(with_prefill, chunk, 0.0)


def _within_slo(slo: sv.Slo, ttft: tuple[Floats, Floats],
                tpot: tuple[Floats, Floats]) -> Bools | None:
    """``serving._within_slo``: every SLO given holds; None when none is given."""
    given = [(limit, value) for limit, value in (
        (slo.ttft_p50_s, ttft[0]), (slo.ttft_p99_s, ttft[1]),
        (slo.tpot_p50_s, tpot[0]), (slo.tpot_p99_s, tpot[1])) if limit is not None]
    if not given:
        return None
    within = np.ones(ttft[0].shape, dtype=bool)
    for limit, value in given:
        within &= value <= limit
    return within


def _hopeless(m: _Model, r: _Rows) -> Bools:
    """Rows whose SLO fails even unloaded, so at every replica count: TTFT is at least the
    unloaded prefill (the M/G/1 wait is never negative) and TPOT at least one batch-1 step
    over the tokens per step (the step grows with the batch, the prefill share only
    stretches it)."""
    slo, prompt = m.traffic.slo, m.traffic.prompt
    hopeless = np.zeros(r.tp.shape, dtype=bool)
    for limit, tokens in ((slo.ttft_p50_s, prompt.p50), (slo.ttft_p99_s, prompt.p99)):
        if limit is not None:
            hopeless |= _prefill_s(m, r, tokens) > limit
    tpot_limits = [limit for limit in (slo.tpot_p50_s, slo.tpot_p99_s) if limit is not None]
    if tpot_limits:
        hopeless |= _step(m, r, np.ones(r.tp.shape)) / r.tokens_per_step > min(tpot_limits)
    return hopeless


def _size(m: _Model, r: _Rows, largest: Floats, capacity: Floats,
          prefill_mean: Floats) -> Floats:
    """``serving._size`` on every row: each pass tries every still-unsized row's next
    replica count, and settles the rows that count serves (or that are near idle).

    Only rows that are neither saturated nor near idle nor hopeless (``_hopeless``) need
    their latencies, so only those run the running-batch bisection; a hopeless row is
    settled, exactly as ``serve()`` settles it, at its first count that is unsaturated and
    near idle."""
    rate = m.traffic.requests_per_s
    assert rate is not None  # noqa: S101 - online with a rate
    count = np.maximum(1.0, np.ceil(rate / capacity))
    result = np.full_like(count, float(sv.MAX_REPLICAS))
    hopeless = _hopeless(m, r)
    active = np.flatnonzero(count <= sv.MAX_REPLICAS)
    while active.size:
        sub = r.take(active) if active.size < len(count) else r
        n = count[active]
        per_replica = rate / n
        mean = prefill_mean[active]
        saturated = _saturated(m, sub, per_replica, largest[active], mean)[0]
        done = ~saturated & (per_replica * mean < NEAR_IDLE_PREFILL_SHARE)
        check = np.flatnonzero(~saturated & ~done & ~hopeless[active])
        if check.size:
            rows = sub.take(check)
            load = _online_load(m, rows, per_replica[check], largest[active][check],
                                mean[check], exact=False)
            ttft = _ttft(m, rows, per_replica[check], load.prefill_share, mean[check],
                         _decode_work_share(per_replica[check], capacity[active][check],
                                            load.prefill_share))
            tpot = _tpot(m, rows, load.step_s, load.prefill_share, per_replica[check])
            within = _within_slo(m.traffic.slo, ttft, tpot)
            done[check] = True if within is None else within
        result[active[done]] = n[done]
        following = np.maximum(n + 1.0, np.ceil(n * REPLICA_GROWTH))
        count[active] = following
        active = active[~done & (following <= sv.MAX_REPLICAS)]
    return result


@dataclass(frozen=True, slots=True)
class _Memory:
    usable: Floats
    workspace: Floats
    budget: Floats
    per_sequence: Floats
    max_concurrency: Ints


def _memory(m: _Model, r: _Rows, columns: Columns) -> _Memory:
    """``serving._memory``: the KV budget left after weights and workspace, in sequences."""
    model, traffic = m.model, m.traffic
    h = model.hidden_size
    ffn = max(model.ffn_hidden_size, model.moe_ffn_hidden_size or 0)
    usable = columns.memory_bytes * columns.gpu_memory_fraction
    workspace = sv.WORKSPACE_TOKENS * (4 * h + 3 * ffn / r.tp) * 2.0 + 256 * model.vocab_size * 4
    budget = usable - r.weights_bytes_per_gpu - workspace
    per_sequence = (traffic.prompt.mean + traffic.output.mean / 2) * r.kv_bytes_per_token_per_gpu
    # ``serving._memory``: one sequence must fit at its end; then the steady-state count.
    whole = budget >= (traffic.prompt.mean + traffic.output.mean) * r.kv_bytes_per_token_per_gpu
    sequences = np.floor_divide(np.where(whole, budget, 0.0), per_sequence)
    max_concurrency = np.where(whole, np.maximum(sequences, 1.0), 0.0).astype(np.int64)
    return _Memory(usable, workspace, budget, per_sequence, max_concurrency)


def evaluate(model: ModelSpec, columns: Columns, traffic: sv.Traffic,
             replicas: int | None = None) -> Figures:
    """``serve(model, deployment, traffic, replicas)`` for every row of ``columns`` at once.

    Rows ``columns_of`` marks invalid give meaningless figures; drop them first."""
    m = _Model(model, traffic)
    r = _build(m, columns)
    prompt, output = traffic.prompt, traffic.output

    mem = _memory(m, r, columns)
    max_concurrency, fits = mem.max_concurrency, mem.max_concurrency >= 1
    largest = np.minimum(np.maximum(max_concurrency, 1).astype(np.float64), columns.max_batch)
    prefill_mean = _prefill_s(m, r, prompt.mean)
    capacity = _capacity(m, r, largest, prefill_mean)
    crossover = _crossover(m, r)

    online_rate = traffic.mode is sv.TrafficMode.ONLINE and traffic.requests_per_s is not None
    rows = len(columns)
    if online_rate:
        assert traffic.requests_per_s is not None  # noqa: S101 - just checked
        count = (np.full(rows, float(replicas)) if replicas
                 else _size(m, r, largest, capacity, prefill_mean))
        served = traffic.requests_per_s / count
        load = _online_load(m, r, served, largest, prefill_mean)
        ttft = _ttft(m, r, served, load.prefill_share, prefill_mean,
                     _decode_work_share(served, capacity, load.prefill_share))
    else:
        if traffic.mode is sv.TrafficMode.FIXED_BATCH:
            requested: Floats | float = float(traffic.batch_size or 1)
        elif traffic.mode is sv.TrafficMode.ONLINE:  # closed loop
            requested = float(traffic.concurrency or 1)
        else:
            requested = largest
        batch = np.minimum(requested, largest)  # the rest wait for a slot (``serving.serve``)
        count = np.full(rows, float(replicas or 1))
        step = _step(m, r, batch)
        served = _capacity(m, r, batch, prefill_mean)
        load = _Load(batch, step, served * prefill_mean, np.zeros(rows, dtype=bool))
        if traffic.mode is sv.TrafficMode.FIXED_BATCH:
            ttft = (_prefill_s(m, r, prompt.p50) * batch, _prefill_s(m, r, prompt.p99) * batch)
        else:
            ttft = _ttft(m, r, served, load.prefill_share, prefill_mean, 0.0)
        waiting = requested - batch
        queue_s = np.where(waiting > 0, waiting / served, 0.0)
        ttft = (ttft[0] + queue_s, ttft[1] + queue_s)
    if traffic.mode is sv.TrafficMode.FIXED_BATCH:  # lock-step, as in ``serving.serve``
        tpot = _tpot(m, r, load.step_s, np.zeros(rows), np.zeros(rows))
    else:
        tpot = _tpot(m, r, load.step_s, load.prefill_share, served)
    e2e = (ttft[0] + tpot[0] * max(output.p50 - 1, 0),
           ttft[1] + tpot[0] * max(output.p99 - 1, 0))
    within = _within_slo(traffic.slo, ttft, tpot)
    meets = (np.zeros(rows, dtype=bool) if within is None
             else ~load.saturated & fits & within)
    _, memory_s, compute_s = _decode_step(m, r, load.batch)
    return Figures(
        weights_bytes_per_gpu=r.weights_bytes_per_gpu,
        kv_cache_bytes_per_token=r.kv_bytes_per_token_per_gpu,
        kv_cache_bytes_per_sequence=mem.per_sequence, workspace_bytes_per_gpu=mem.workspace,
        usable_bytes_per_gpu=mem.usable, kv_budget_bytes_per_gpu=np.maximum(mem.budget, 0.0),
        max_concurrency=max_concurrency, fits=fits,
        prefill_p50_s=_prefill_s(m, r, prompt.p50), prefill_p99_s=_prefill_s(m, r, prompt.p99),
        decode_step_s=load.step_s, decode_step_memory_s=memory_s,
        decode_step_compute_s=compute_s, crossover_batch=crossover, batch=load.batch,
        output_tokens_per_s=served * output.mean, input_tokens_per_s=served * prompt.mean,
        requests_per_s=served, capacity_requests_per_s=capacity,
        ttft_p50_s=ttft[0], ttft_p99_s=ttft[1], tpot_p50_s=tpot[0], tpot_p99_s=tpot[1],
        e2e_p50_s=e2e[0], e2e_p99_s=e2e[1], replicas=count.astype(np.int64),
        saturated=load.saturated, meets_slo=meets, slo_given=within is not None)


def _crossover(m: _Model, r: _Rows) -> Floats:
    """``serving._crossover``; NaN where decode never becomes compute-bound."""
    context = m.context
    mem_per_seq = context * r.kv_bytes_per_token_per_gpu / r.hbm_effective
    attention = 4.0 * m.model.num_layers / r.pp * m.attention_width * context / r.tp
    flops_per_seq = (r.matmul_flops_per_token_per_gpu + attention) / r.compute_effective
    gap = flops_per_seq - mem_per_seq
    positive = gap > 0
    result: Floats = np.where(
        positive, r.weights_bytes_per_gpu / r.hbm_effective / np.where(positive, gap, 1.0),
        np.nan)
    return result


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
    m = _Model(model, traffic)
    fit = _memory(m, _build(m, columns), columns).max_concurrency >= 1
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
