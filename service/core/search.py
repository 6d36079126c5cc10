"""Parallelism search: every valid layout, evaluated in bulk, ranked (docs/model.md §8).

Enumeration follows the rules ``validate_plan`` enforces (Narayanan et al. 2021 section 2;
MODEL.md section 8): t divides the query heads and divides or is divided by the KV heads, and
stays within ``max_tp`` (default: the scale-up domain); p is at most L (uneven stages allowed,
as in Llama 3 405B's 126 layers on 16 stages); c divides the sequence; d = N/(t·p·c) and d
divides the global batch; b divides B/d; v divides the layers per stage (Megatron's interleaved
schedule needs whole virtual stages) and needs p > 1; e divides the experts and t·d·c. ZeRO
stage 0-3, recomputation none/selective/full, and sequence parallelism on/off (only with t > 1;
with t = 1 it changes nothing) complete a candidate.

Candidates are evaluated as numpy arrays by the same geometry, memory and timing functions
that ``estimate()`` runs on Python numbers (``service/core/ops.py``), so there is one model.
The arrays are a broadcast grid (``_Grid``): a term is computed once per value of the
dimensions it depends on, not once per candidate.
The returned plans are re-estimated one by one with ``estimate()``, so their blocks are exactly
what ``POST /v1/estimates`` answers.

The work is counted in candidates (``max_candidates``, checked before any is evaluated), so a
request gets the same answer however busy the machine is. The core reads no clock: the caller
passes ``clock`` for the deadline, a safety net past which the search raises
``SearchTimeoutError`` instead of answering from part of the space (issue 38). The groups of
a sweep (one per cluster and global batch) are independent: ``search_part`` evaluates some of
them and ``merge_parts`` ranks the parts together into the answer ``search`` gives.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import numpy as np

from service.core import pricing
from service.core.calibration import DEFAULT_CALIBRATION, Calibration
from service.core.errors import InvalidSpecError, NoFeasiblePlanError, NoLayoutError
from service.core.estimate import Estimate, average_power_w_per_gpu, estimate, job_figures
from service.core.failures import (
    DEFAULT_RELIABILITY,
    JobFailures,
    Reliability,
    checkpoint_bytes,
    job_failures,
)
from service.core.flops import token_flops
from service.core.geometry import PlanVars, build_geometry, shard_unit
from service.core.memory import memory_breakdown, stage_activation_bytes
from service.core.params import count_parameters
from service.core.specs import (
    MAX_NUM_GPUS,
    ClusterSpec,
    EnergySpec,
    Framework,
    ModelSpec,
    Offload,
    ParallelismPlan,
    RecomputeMode,
    ShardUnit,
    TrainingSpec,
)
from service.core.timing import step_time
from service.core.units import bytes_to_gib

DIMENSIONS = ("tp", "pp", "cp", "ep", "vp", "micro_batch", "zero_stage", "recompute",
              "sequence_parallel")
RECOMPUTE_CODES = (RecomputeMode.NONE, RecomputeMode.SELECTIVE, RecomputeMode.FULL)
ALL_ZERO_STAGES = (0, 1, 2, 3)
"""Every ZeRO stage (Rajbhandari et al. 2020): what a stack absent from ``ZERO_STAGES`` runs,
and what a fixed ``zero_stage`` is checked against."""
ZERO_STAGES: Mapping[Framework, tuple[int, ...]] = MappingProxyType({
    Framework.TORCHTITAN: (0, 3),
    # Data parallelism is replicated (DDP) or sharded with FSDP2/HSDP, ZeRO-3 (torchtitan
    # docs/fsdp.md; Liang et al. 2024, section 2.1).
    Framework.FSDP: (0, 2, 3),
    # PyTorch FSDP's ShardingStrategy: NO_SHARD, SHARD_GRAD_OP (ZeRO-2), FULL_SHARD and
    # HYBRID_SHARD (ZeRO-3) (torch.distributed.fsdp docs; Zhao et al. 2023, section 3.2).
    Framework.MAXTEXT: (0, 3),
    # Data parallelism replicates (ici/dcn_data_parallelism) or shards parameters, gradients
    # and optimizer state (ici/dcn_fsdp_parallelism) (MaxText docs, "Sharding").
})
"""The ZeRO stages a stack can run, where it cannot run all four; a search that varies
``zero_stage`` tries only these (Megatron-LM runs 0 and 1, the distributed optimizer, and 2
and 3 with Megatron-Core's FSDP; DeepSpeed runs all; an unknown stack may be any). A caller
who fixes ``zero_stage`` gets the stage given."""
DEFAULT_MAX_CANDIDATES = 50_000_000
"""Work cap: a request whose space is larger is refused before any work (docs/decisions.md)."""
DEFAULT_DEADLINE_S = 10.0
"""Search wall-clock safety net (issue 4; issue 38: past it the search raises, it no longer
answers from what it has); the API passes ``CQ_SEARCH_DEADLINE_S``."""
CHUNK_CANDIDATES = 1 << 18
"""Candidates evaluated per numpy pass: bounds memory (about 0.5 GB of temporaries) and sets
how often the deadline is checked. The answer does not depend on it (every kept list is
chosen per chunk and merged exactly)."""
PARETO_POINTS_MAX = 50
"""Front points returned; a longer front is thinned evenly (both ends kept)."""
CLOSEST_SHOWN = 3
"""Near misses listed when nothing is feasible."""
NEAREST_PROBES = 4096
"""(GPU count, batch) pairs ``nearest_layout_counts`` tries at most, outwards from the count
asked: about 0.1 ms each, so at most about half a second of CPU, and only on a refusal."""


class Objective(StrEnum):
    TIME = "time"
    GPU_HOURS = "gpu_hours"
    COST = "cost"
    ENERGY = "energy"
    CARBON = "carbon"
    """Energy (with PUE) x the grid intensity where each cluster runs
    (``ClusterSpec.grid_gco2e_per_kwh``); with one intensity for all it ranks like energy."""
    PARETO = "pareto"


class SearchTooLargeError(InvalidSpecError):
    """The space holds more candidates than the work cap allows."""


class SearchTimeoutError(TimeoutError):
    """The search ran past ``SearchRequest.deadline_s``: a safety net, never a partial answer
    (issue 38: a sweep cut at its deadline once answered from 67% of its space). A
    ``TimeoutError``, which callers that wait on a worker already treat as out of time."""

    def __init__(self, deadline_s: float) -> None:
        super().__init__(f"the search did not finish within its {deadline_s:g} s deadline")
        self.deadline_s = deadline_s

    def __reduce__(self) -> tuple[Any, ...]:  # pickles across the worker processes
        return (type(self), (self.deadline_s,))


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchSpace:
    """Which dimensions vary; the others keep ``base``'s value (dp is always derived)."""

    vary: frozenset[str] = frozenset(DIMENSIONS)
    base: ParallelismPlan = field(default_factory=ParallelismPlan)
    max_tp: int | None = None
    memory_headroom_fraction: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchRequest:
    model: ModelSpec
    clusters: tuple[ClusterSpec, ...]
    training: TrainingSpec
    global_batches: tuple[int, ...] = ()
    """Allowed global batches in sequences; empty means ``training.global_batch_seqs``."""
    space: SearchSpace = field(default_factory=SearchSpace)
    objective: Objective = Objective.TIME
    top_k: int = 10
    max_train_s: float | None = None
    budget_usd: Decimal | None = None
    price_per_gpu_hour_usd: Mapping[str, Decimal] = field(default_factory=dict)
    """Per accelerator id; needed for the cost objective and a budget."""
    energy: EnergySpec = field(default_factory=EnergySpec)
    calibration: Calibration = DEFAULT_CALIBRATION
    max_candidates: int = DEFAULT_MAX_CANDIDATES
    deadline_s: float = DEFAULT_DEADLINE_S
    reliability: Reliability = DEFAULT_RELIABILITY
    """The failure assumptions (the quote's, ``service/core/failures.py``): every objective,
    the deadline and the budget count the wall-clock with failures and checkpoints."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankedPlan:
    cluster: ClusterSpec
    plan: ParallelismPlan
    global_batch_seqs: int
    estimate: Estimate
    cost_usd: Decimal | None
    energy: EnergySpec
    """The energy assumptions this plan was figured with (its cluster's grid intensity)."""
    failures: JobFailures
    """What hardware failures and checkpoints do to the run (``failures.job_failures``):
    ``estimate``'s wall-clock × ``failures.factor`` is the quote's wall-clock."""
    cost_with_failures_usd: Decimal | None = None
    """``cost_usd`` × (1 + lost fraction), half-even to the cent (the quote's billed
    hours); None without a price or when the job cannot progress."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchStats:
    candidates_total: int
    candidates_evaluated: int
    feasible: int
    pruned_by_rule: dict[str, int]
    elapsed_s: float
    """How long the work took, by the caller's clock: reported, never used to choose."""
    max_candidates: int = DEFAULT_MAX_CANDIDATES
    """The work cap the search ran under (``SearchRequest.max_candidates``)."""

    @property
    def truncated(self) -> bool:
        """Always false: a search past its deadline raises ``SearchTimeoutError`` instead of
        answering from part of the space (issue 38). Kept for the deprecated response field and
        the tracing attribute."""
        return False

    @property
    def candidates_per_s(self) -> float:
        return self.candidates_evaluated / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def covered_fraction(self) -> float:
        """Share of the enumerated candidates that were evaluated: always 1 (issue 38)."""
        if self.candidates_total <= 0:
            return 1.0
        return min(1.0, self.candidates_evaluated / self.candidates_total)


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchResult:
    plans: tuple[RankedPlan, ...]
    pareto: tuple[RankedPlan, ...]
    stats: SearchStats
    cost_basis: str
    """``usd`` when prices were given, else ``gpu_hours`` (the front is then time vs GPU-hours)."""


# --- enumeration ---------------------------------------------------------------------------


def _divisors(n: int) -> tuple[int, ...]:
    """Ascending. ``_skeletons`` keeps them for one sweep (it asks for the same few numbers
    tens of thousands of times); nothing is kept between sweeps."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


@dataclass(frozen=True, slots=True)
class _Skeleton:
    """A (tp, pp, cp, dp, ep) layout with the per-skeleton option lists of the inner dims."""

    tp: int
    pp: int
    cp: int
    dp: int
    ep: int
    vps: tuple[int, ...]
    micro_batches: tuple[int, ...]
    sps: tuple[bool, ...]

    def count(self, inner: int) -> int:
        return len(self.vps) * len(self.micro_batches) * len(self.sps) * inner


def _options(space: SearchSpace, name: str, values: Sequence[Any]) -> list[Any]:
    if name in space.vary:
        return list(values)
    base = getattr(space.base, name)
    return [base] if base in values else []


def _skeletons(
    model: ModelSpec, cluster: ClusterSpec, batch: int, seq_len: int, space: SearchSpace,
    pruned: dict[str, int],
) -> Iterator[_Skeleton]:
    """The layouts of one (cluster, batch), one at a time, so the caller can stop counting as
    soon as the space is over its cap (issue 14: a refused 405B space cost 48.7 s of CPU and
    2.6 GB when every skeleton was built before the cap was checked)."""
    n = cluster.num_gpus
    max_tp = space.max_tp or cluster.gpus_per_node
    divisors = functools.cache(_divisors)  # this sweep's own, dropped with it

    def drop(rule: str, count: int = 1) -> None:
        pruned[rule] = pruned.get(rule, 0) + count

    for tp in _options(space, "tp", divisors(n)):
        if tp > max_tp:
            drop("tp_above_max_tp")
            continue
        if model.num_heads % tp or (model.num_kv_heads % tp and tp % model.num_kv_heads):
            drop("tp_not_dividing_heads")
            continue
        for pp in _options(space, "pp", divisors(n // tp)):
            if pp > model.num_layers:
                drop("pp_above_layers")
                continue
            layers_per_stage = -(-model.num_layers // pp)
            for cp in _options(space, "cp", divisors(n // (tp * pp))):
                if seq_len % cp:
                    drop("cp_not_dividing_seq_len")
                    continue
                dp = n // (tp * pp * cp)
                if batch % dp:
                    drop("dp_not_dividing_global_batch")
                    continue
                vps = [v for v in divisors(layers_per_stage) if pp > 1 or v == 1]
                vps = _options(space, "vp", vps)
                mbs = _options(space, "micro_batch", divisors(batch // dp))
                sps = [space.base.sequence_parallel] if tp == 1 else _options(
                    space, "sequence_parallel", [True, False])
                if not (vps and mbs and sps):
                    drop("fixed_value_invalid")
                    continue
                span = tp * dp * cp
                if model.is_moe:
                    eps = [e for e in divisors(model.num_experts) if span % e == 0]
                else:
                    eps = [1]
                for ep in _options(space, "ep", eps):
                    yield _Skeleton(tp, pp, cp, dp, ep, tuple(vps), tuple(mbs), tuple(sps))


def _inner(space: SearchSpace, framework: Framework) -> tuple[list[int], list[int]]:
    # A fixed stage is kept whatever the stack (``_options`` keeps a fixed value only if it
    # is among the values offered).
    stages = (ZERO_STAGES.get(framework, ALL_ZERO_STAGES) if "zero_stage" in space.vary
              else ALL_ZERO_STAGES)
    zeros = _options(space, "zero_stage", stages)
    base_code = RECOMPUTE_CODES.index(space.base.recompute)
    codes = [0, 1, 2] if "recompute" in space.vary else [base_code]
    return zeros, codes


_OUTER = ("tp", "pp", "cp", "dp", "ep", "vp", "micro_batch")
"""Columns that vary along the grid's rows: one row per (skeleton, vp, micro-batch)."""


@dataclass(frozen=True, slots=True)
class _Grid:
    """The candidates of some skeletons as columns that broadcast to ``shape`` = (ZeRO
    stages, recomputation codes, sequence-parallel values, rows), where a row is one
    (skeleton, vp, micro-batch): tp, pp, cp, dp, ep, vp and the micro-batch have shape
    (1, 1, 1, rows), the ZeRO stage (Z, 1, 1, 1), the recomputation code (1, C, 1, 1) and
    sequence parallelism (1, 1, S, 1).

    The formulas are element-wise (``ops.py``: operators, ``where``, ``maximum``,
    ``minimum``), so numpy broadcasting runs every term only over the axes it depends on: the
    parameter shapes and bandwidths once per row, the ZeRO sharding once per (stage, row),
    and only the terms that combine everything once per candidate. Each element is the same
    sequence of IEEE operations on the same values as in a flat array, so the figures are
    bit-identical (tests/core/test_search.py). The rows are the last axis so that numpy's
    inner loops run along the long, contiguous one.

    Candidate ``i`` is element ``index[i]`` of the grid flattened in C order. Candidates are
    numbered as a per-skeleton ``meshgrid(vps, micro_batches, zeros, codes, sps,
    indexing="ij")``, skeleton after skeleton (the order the search has always used: its
    stable sorts break ties by it); ``index`` leaves out the sequence-parallel value that a
    tp = 1 skeleton does not enumerate."""

    columns: dict[str, np.ndarray]
    shape: tuple[int, int, int, int]
    index: np.ndarray

    @property
    def size(self) -> int:
        """Number of candidates."""
        return int(self.index.size)

    def flat(self, values: Any) -> np.ndarray:
        """One value per candidate, in candidate order, of an array broadcast over the grid."""
        full = np.broadcast_to(np.asarray(values, dtype=float), self.shape).reshape(-1)
        flat: np.ndarray = full[self.index]
        return flat

    def take(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Every column at the given candidate indices, as flat arrays (``plan_at`` reads
        them)."""
        at = np.unravel_index(self.index[indices], self.shape)
        # Each column varies along one or none of the axes: index it along that one.
        taken = {}
        for key, value in self.columns.items():
            axes = [axis for axis, n in enumerate(value.shape) if n > 1]
            taken[key] = (value.reshape(-1)[at[axes[0]]] if len(axes) == 1
                          else np.broadcast_to(value, self.shape)[at])
        return taken


def _grid(skeletons: Sequence[_Skeleton], zeros: Sequence[int], codes: Sequence[int],
          batch: int) -> _Grid:
    """All candidates of the skeletons as a ``_Grid``, built with a fixed number of numpy
    calls (mixed-radix decoding of each row's index within its skeleton), not a few calls per
    skeleton (issue 16: that loop was 22% of a 405B sweep)."""
    layout = np.array([(sk.tp, sk.pp, sk.cp, sk.dp, sk.ep, len(sk.vps), len(sk.micro_batches))
                       for sk in skeletons], dtype=np.int64).reshape(-1, 7)
    n_vp, n_mb = layout[:, 5], layout[:, 6]
    rows = n_vp * n_mb
    owner = np.repeat(np.arange(len(skeletons)), rows)
    local = np.arange(owner.size, dtype=np.int64) - (np.cumsum(rows) - rows)[owner]
    n_mb_row = n_mb[owner]

    def values(lists: Iterator[tuple[int, ...]], counts: np.ndarray, i: np.ndarray) -> np.ndarray:
        flat = np.fromiter((v for vs in lists for v in vs), dtype=np.int64,
                           count=int(counts.sum()))
        picked: np.ndarray = flat[(np.cumsum(counts) - counts)[owner] + i]
        return picked

    outer = [layout[owner, i] for i in range(5)]
    outer.append(values((sk.vps for sk in skeletons), n_vp, local // n_mb_row))
    outer.append(values((sk.micro_batches for sk in skeletons), n_mb, local % n_mb_row))
    columns = {key: column.reshape(1, 1, 1, -1) for key, column in zip(_OUTER, outer,
                                                                         strict=True)}
    # Every skeleton's sequence-parallel values are the longest list or one value of it
    # (tp = 1 enumerates only the base value, ``_skeletons``).
    kinds = sorted({sk.sps for sk in skeletons}, key=len, reverse=True)
    sps = kinds[0] if kinds else ()
    for kind in kinds:
        if tuple(v for v in sps if v in kind) != kind:
            raise AssertionError(f"sequence-parallel values {kind} do not follow {sps}")
    columns["zero_stage"] = np.asarray(zeros, dtype=np.int64).reshape(-1, 1, 1, 1)
    columns["recompute"] = np.asarray(codes, dtype=np.int64).reshape(1, -1, 1, 1)
    columns["sp"] = np.asarray(sps, dtype=bool).reshape(1, 1, -1, 1)
    columns["batch"] = np.full((1, 1, 1, 1), batch, dtype=np.int64)
    shape = (len(zeros), len(codes), len(sps), owner.size)
    # Grid element of each (row, zero, code, sp) in candidate order (row outermost).
    index = np.moveaxis(np.arange(math.prod(shape), dtype=np.int64).reshape(shape), 3,
                        0).reshape(-1)
    if len(kinds) > 1:
        holds = np.array([[v in kind for v in sps] for kind in kinds], dtype=bool)
        kind_of = {kind: i for i, kind in enumerate(kinds)}
        per_skeleton = holds[np.fromiter((kind_of[sk.sps] for sk in skeletons), dtype=np.int64,
                                         count=len(skeletons))]
        keep = np.broadcast_to(per_skeleton[owner][:, None, None, :],
                               (owner.size, len(zeros), len(codes), len(sps)))
        index = index[keep.reshape(-1)]
    return _Grid(columns, shape, index)


def _columns(skeletons: Sequence[_Skeleton], zeros: Sequence[int], codes: Sequence[int],
             batch: int) -> dict[str, np.ndarray]:
    """All candidates of the skeletons as flat int64/bool columns, in the order of a
    per-skeleton ``meshgrid(vps, micro_batches, zeros, codes, sps, indexing="ij")`` (the
    search itself evaluates the ``_grid`` without flattening it)."""
    grid = _grid(skeletons, zeros, codes, batch)
    return grid.take(np.arange(grid.size))


def plan_vars(columns: Mapping[str, np.ndarray], model: ModelSpec,
              offload: frozenset[Offload] = frozenset(), gather_matrices: bool = False,
              base: ParallelismPlan | None = None) -> PlanVars:
    """The formulas' inputs for a set of candidates (what ``validate_plan`` derives); the
    offload is the base plan's, the same for every candidate (it is not searched)."""
    tp, pp, cp, dp, ep = (columns[k] for k in ("tp", "pp", "cp", "dp", "ep"))
    # Megatron-Core parallel folding, as in ``specs._validate_experts``.
    expert_tp = np.where((dp * cp) % ep == 0, tp, 1) if model.is_moe else tp
    base = base or ParallelismPlan()
    if model.is_moe and base.etp is not None:
        expert_tp = np.full_like(tp, base.etp)
    return PlanVars(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, vp=columns["vp"],
        micro_batch=columns["micro_batch"], zero_stage=columns["zero_stage"],
        sequence_parallel=columns["sp"], full_recompute=columns["recompute"] == 2,
        selective_recompute=columns["recompute"] == 1, global_batch_seqs=columns["batch"],
        num_micro_batches=columns["batch"] // (dp * columns["micro_batch"]),
        layers_per_stage=-(-model.num_layers // pp), expert_tp=expert_tp,
        offload_optimizer=bool(offload & {Offload.OPTIMIZER, Offload.WEIGHTS}),
        offload_weights=Offload.WEIGHTS in offload,
        offload_activations=Offload.ACTIVATIONS in offload, gather_matrices=gather_matrices,
        moe_overlap=base.moe_overlap, moe_dispatch_fp8=base.moe_dispatch_fp8,
        moe_max_nodes_per_token=base.moe_max_nodes_per_token or 0,
        moe_capacity_factor=base.moe_capacity_factor or 1.0,
        dp_replicas=_replicas(dp, columns["zero_stage"], base),
    )


def _replicas(dp: np.ndarray, zero_stage: np.ndarray, base: ParallelismPlan) -> Any:
    """The base plan's hybrid sharding where a candidate keeps its data-parallel size and
    shards its state (the ``"auto"`` fields of an estimate fix both); else 1 (the search
    itself shards over every data-parallel rank)."""
    if base.dp_replicas == 1:
        return 1
    return np.where((dp == base.dp) & (zero_stage >= 1), base.dp_replicas, 1)


def plan_at(columns: Mapping[str, np.ndarray], i: int,
            base: ParallelismPlan | None = None) -> ParallelismPlan:
    """Candidate ``i``; the fields the search never varies (offload, ZeRO-3 unit, expert
    TP, MoE settings) come from ``base``."""
    base = base or ParallelismPlan()
    return ParallelismPlan(
        tp=int(columns["tp"][i]), pp=int(columns["pp"][i]), dp=int(columns["dp"][i]),
        cp=int(columns["cp"][i]), ep=int(columns["ep"][i]), vp=int(columns["vp"][i]),
        micro_batch=int(columns["micro_batch"][i]),
        sequence_parallel=bool(columns["sp"][i]), zero_stage=int(columns["zero_stage"][i]),
        recompute=RECOMPUTE_CODES[int(columns["recompute"][i])], offload=base.offload,
        fsdp_unit=base.fsdp_unit, etp=base.etp, moe_overlap=base.moe_overlap,
        moe_dispatch_fp8=base.moe_dispatch_fp8,
        moe_max_nodes_per_token=base.moe_max_nodes_per_token,
        moe_capacity_factor=base.moe_capacity_factor,
        dp_shard=(base.dp_shard if base.dp_shard is not None
                  and int(columns["dp"][i]) == base.dp
                  and int(columns["zero_stage"][i]) >= 1 else None),
    )


# --- bulk evaluation ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BulkFigures:
    """Per-candidate figures from the shared formulas (arrays of the columns' shape)."""

    peak_bytes: np.ndarray
    step_s: np.ndarray
    tokens_per_s: np.ndarray
    train_s: np.ndarray
    gpu_hours: np.ndarray
    kwh: np.ndarray
    mfu_fraction: np.ndarray


def evaluate_bulk(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
    columns: Mapping[str, np.ndarray], *, energy: EnergySpec, calibration: Calibration,
    base: ParallelismPlan | None = None,
) -> BulkFigures:
    """Run the estimate's formulas on every candidate at once. ``columns`` are flat arrays
    (one element per candidate, as ``_columns`` builds) or arrays that broadcast together (a
    ``_Grid``'s); the figures have the columns' broadcast shape."""
    counts = count_parameters(model)
    flops = token_flops(model, counts, training.seq_len)
    acc = cluster.accelerator
    base = base or ParallelismPlan()
    unit = shard_unit(base, training)
    pv = plan_vars(columns, model, base.offload, unit == ShardUnit.MATRIX, base)
    geometry = build_geometry(model, counts, cluster, pv, training, np)
    activations = stage_activation_bytes(model, pv, training, geometry, np)
    memory = memory_breakdown(model, pv, training, geometry, calibration, acc.memory_bytes,
                              np, stage_activations=activations)
    step = step_time(model, counts, cluster, pv, training, geometry, calibration,
                     activations[0], np)
    power_w = average_power_w_per_gpu(acc.tdp_w, energy)
    step_s = step.step_s  # a property that sums ten arrays: read it once
    job = job_figures(step_s, pv, training, cluster.num_gpus, flops,
                      acc.peak_for(training.precision), power_w, energy.pue, np)
    return BulkFigures(
        peak_bytes=np.asarray(memory.peak_bytes, dtype=float),
        step_s=np.asarray(step_s, dtype=float),
        tokens_per_s=np.asarray(job.tokens_per_s, dtype=float),
        train_s=np.asarray(job.train_s, dtype=float),
        gpu_hours=np.asarray(job.gpu_hours, dtype=float),
        kwh=np.asarray(job.kwh, dtype=float),
        mfu_fraction=np.asarray(job.mfu_fraction, dtype=float),
    )


# --- the search ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Candidate:
    """One evaluated candidate kept for ranking; ``key`` orders candidates deterministically."""

    key: tuple[Any, ...]
    cluster_index: int
    batch: int
    plan: ParallelismPlan
    train_s: float
    cost: float
    peak_bytes: float
    usable_bytes: float


def _chunks(skeletons: list[_Skeleton], inner: int) -> Iterator[list[_Skeleton]]:
    chunk: list[_Skeleton] = []
    size = 0
    for sk in skeletons:
        chunk.append(sk)
        size += sk.count(inner)
        if size >= CHUNK_CANDIDATES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def nearest_layout_counts(request: SearchRequest, cluster_index: int = 0,
                          probes: int = NEAREST_PROBES) -> tuple[int | None, int | None]:
    """The nearest GPU counts below and above ``request.clusters[cluster_index]``'s that have
    at least one layout for the same model, batches, sequence length and constraints (None
    where none was found). Scans outwards one count at a time, each tried with ``_skeletons``
    (the rules the search enumerates by, so a count named here is one the search runs), and
    stops after ``probes`` (count, batch) tries. Only the refusal calls it (issue 38)."""
    cluster = request.clusters[cluster_index]
    batches = request.global_batches or (request.training.global_batch_seqs,)
    seq_len = request.training.seq_len
    left = probes

    def has_layout(count: int) -> bool:
        nonlocal left
        probe = dataclasses.replace(cluster, num_gpus=count)
        for batch in batches:
            if left <= 0:
                return False
            left -= 1
            if next(_skeletons(request.model, probe, batch, seq_len, request.space, {}),
                    None) is not None:
                return True
        return False

    n = cluster.num_gpus
    below: int | None = None
    above: int | None = None
    distance = 1
    while left > 0:
        lower, upper = n - distance, n + distance
        want_below, want_above = below is None and lower >= 1, (
            above is None and upper <= MAX_NUM_GPUS)
        if not (want_below or want_above):
            break
        if want_below and has_layout(lower):
            below = lower
        if want_above and has_layout(upper):
            above = upper
        distance += 1
    return below, above


def no_layout_problem(error: NoLayoutError, request: SearchRequest,
                      field: str) -> NoLayoutError:
    """``error`` (raised by ``search(request)``) with the nearest GPU counts that have a
    layout added to its message, naming ``field`` (the request's GPU count): the API answers
    it as a 422 invalid-spec."""
    below, above = nearest_layout_counts(request, error.cluster_index)
    if below is not None and above is not None:
        where = f"the nearest GPU counts with a layout are {below:,} and {above:,}"
    elif below is not None or above is not None:
        where = (f"the nearest GPU count with a layout is {below or above:,} (none "
                 f"{'above' if below is not None else 'below'} it was found)")
    else:
        where = (f"no nearby GPU count has one ({NEAREST_PROBES:,} counts and batches "
                 "tried)")
    return NoLayoutError(f"{error}; {where}", cluster_index=error.cluster_index,
                         num_gpus=error.num_gpus, counts_asked=error.counts_asked,
                         field=field, nearest=(below, above))


def frozen_clock() -> float:
    """A clock that never advances: the search never stops at its deadline (quotes use it so
    they always recompute the same; the work cap still bounds them)."""
    return 0.0


def _check_prices(request: SearchRequest) -> None:
    if request.objective is Objective.COST and not request.price_per_gpu_hour_usd:
        raise InvalidSpecError("the cost objective needs price_per_gpu_hour_usd",
                               field="price_per_gpu_hour_usd")
    if request.budget_usd is not None and not request.price_per_gpu_hour_usd:
        raise InvalidSpecError("a budget needs price_per_gpu_hour_usd",
                               field="price_per_gpu_hour_usd")
    if request.price_per_gpu_hour_usd:
        for cluster in request.clusters:
            if cluster.accelerator.id not in request.price_per_gpu_hour_usd:
                raise InvalidSpecError(
                    f"no price_per_gpu_hour_usd for accelerator {cluster.accelerator.id}",
                    field="price_per_gpu_hour_usd")


def _batches(request: SearchRequest) -> tuple[int, ...]:
    return request.global_batches or (request.training.global_batch_seqs,)


def group_count(request: SearchRequest) -> int:
    """Search groups of a request: one per (cluster, global batch), cluster-major. A group is
    the unit ``search_part`` evaluates and the ``cluster_index`` of a candidate's key."""
    return len(request.clusters) * len(_batches(request))


def _group_of(request: SearchRequest, index: int) -> tuple[ClusterSpec, int]:
    """The (cluster, global batch) of group ``index``."""
    batches = _batches(request)
    return request.clusters[index // len(batches)], batches[index % len(batches)]


def _too_large(limit: int) -> SearchTooLargeError:
    return SearchTooLargeError(
        f"the search space holds more than {limit:,} candidates; the limit is {limit:,} "
        "(counting stopped there): fix some dimensions, narrow the GPU counts or batches",
        field="constraints")


def _no_layout(request: SearchRequest) -> NoLayoutError:
    first = request.clusters[0].num_gpus
    others = len(request.clusters) - 1
    return NoLayoutError(
        f"no layout of exactly {first:,} GPUs"
        + (f" (nor of the other {others:,} GPU counts asked)" if others else "")
        + f": no tp x pp x cp x dp that the model and the constraints allow multiplies to "
        f"{first:,} (tp at most max_tp and dividing the heads, pp at most the layers, cp "
        "dividing training.seq_len, dp dividing the global batch); nothing was evaluated",
        cluster_index=0, num_gpus=first, counts_asked=others + 1)


def search_size(request: SearchRequest) -> tuple[int, ...]:
    """The candidates of each group (``group_count``), counted by the enumeration the search
    runs, without evaluating any. Raises what ``search`` raises before any work: a missing
    price, ``SearchTooLargeError`` as soon as the count passes ``max_candidates``, and
    ``NoLayoutError`` when no group has a layout. The API counts a sweep with it before it
    spreads the groups across its search workers."""
    _check_prices(request)
    zeros, codes = _inner(request.space, request.training.framework)
    inner = len(zeros) * len(codes)
    sizes: list[int] = []
    counted: dict[tuple[int, int, int], int] = {}  # this call's own (``_family``)
    total = 0
    for index in range(group_count(request)):
        cluster, batch = _group_of(request, index)
        family = _family(cluster, batch)
        size = counted.get(family, -1)
        if size < 0:
            size = 0
            for skeleton in _skeletons(request.model, cluster, batch,
                                       request.training.seq_len, request.space, {}):
                size += skeleton.count(inner)
                if total + size > request.max_candidates:
                    raise _too_large(request.max_candidates)
            counted[family] = size
        elif total + size > request.max_candidates:
            raise _too_large(request.max_candidates)
        total += size
        sizes.append(size)
    if sizes and not any(sizes):
        raise _no_layout(request)
    return tuple(sizes)


def group_families(request: SearchRequest) -> tuple[tuple[int, int, int], ...]:
    """The ``_family`` of each group (``group_count``): groups of one family evaluated in one
    ``search_part`` call share their enumeration and memory figures, so the API keeps them
    together when it spreads a sweep over its workers."""
    return tuple(_family(*_group_of(request, index)) for index in range(group_count(request)))


def _family(cluster: ClusterSpec, batch: int) -> tuple[int, int, int]:
    """What a group's layouts and their memory depend on: the GPU count, the GPUs per node
    (the default ``max_tp`` of ``_skeletons`` and the per-node group sizes of
    ``build_geometry``) and the global batch; not the accelerator, whose capacity only
    decides which layouts fit. Groups of one family (a sweep of accelerators at the same GPU
    counts) share their enumeration, grids and memory figures within one call (issue 38)."""
    return cluster.num_gpus, cluster.gpus_per_node, batch


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchPart:
    """What ``search_part`` keeps of some groups: enough for ``merge_parts`` to rank them
    with the other groups exactly as one ``search`` over all of them would (every kept list is
    chosen per chunk, and chunks never span groups)."""

    kept: tuple[_Candidate, ...]
    front: tuple[_Candidate, ...]
    closest: tuple[_Candidate, ...]
    candidates_total: int
    candidates_evaluated: int
    feasible: int
    pruned_by_rule: tuple[tuple[str, int], ...]
    """(rule, count) pairs: a tuple, so the part pickles."""
    groups_with_layout: int


def search_part(request: SearchRequest, clock: Callable[[], float],
                groups: Sequence[int] | None = None) -> SearchPart:
    """Enumerate and evaluate the given groups (default: all) of ``request``. Raises
    ``SearchTooLargeError`` before any work when they hold more than ``max_candidates``, and
    ``SearchDeadlineError`` when ``clock`` passes ``deadline_s`` (checked before each chunk):
    a search past its deadline answers nothing rather than a part of the space.

    The groups of one ``_family`` are evaluated together, chunk by chunk: the grid and the
    memory of every candidate once for the family, then, for each group, the timing of the
    candidates that fit its accelerator (``_Evaluation``). The order of the groups does not
    change the answer: every kept list is ranked by total keys in ``merge_parts``."""
    started = clock()
    model, space = request.model, request.space
    _check_prices(request)
    zeros, codes = _inner(space, request.training.framework)
    inner = len(zeros) * len(codes)
    pruned: dict[str, int] = {}
    chosen = range(group_count(request)) if groups is None else groups
    families: dict[tuple[int, int, int], list[tuple[int, ClusterSpec]]] = {}
    for index in chosen:
        cluster, batch = _group_of(request, index)
        families.setdefault(_family(cluster, batch), []).append((index, cluster))
    layouts: list[tuple[int, list[tuple[int, ClusterSpec]], list[_Skeleton]]] = []
    total = 0
    for (_, _, batch), members in families.items():
        found: dict[str, int] = {}
        skeletons = []
        for skeleton in _skeletons(model, members[0][1], batch, request.training.seq_len,
                                   space, found):
            total += skeleton.count(inner) * len(members)
            if total > request.max_candidates:
                raise _too_large(request.max_candidates)
            skeletons.append(skeleton)
        for rule, count in found.items():
            pruned[rule] = pruned.get(rule, 0) + count * len(members)
        layouts.append((batch, members, skeletons))

    run = _Evaluation(request)
    for batch, members, skeletons in layouts:
        training = dataclasses.replace(request.training, global_batch_seqs=batch)
        for chunk in _chunks(skeletons, inner):
            if clock() - started > request.deadline_s:
                raise SearchTimeoutError(request.deadline_s)
            grid = _grid(chunk, zeros, codes, batch)
            peak = run.peak_bytes(grid, members[0][1], training)
            for cluster_index, cluster in members:
                if clock() - started > request.deadline_s:
                    raise SearchTimeoutError(request.deadline_s)
                run.group(grid, peak, cluster_index, cluster, batch, training)
    counted = run.pruned
    for rule in ("memory", "deadline", "budget"):
        if rule in counted:
            pruned[rule] = pruned.get(rule, 0) + counted[rule]
    return SearchPart(kept=tuple(run.kept), front=tuple(run.front),
                      closest=tuple(run.closest), candidates_total=total,
                      candidates_evaluated=run.evaluated, feasible=run.feasible,
                      pruned_by_rule=tuple(pruned.items()),
                      groups_with_layout=sum(len(members) for _, members, sk in layouts
                                             if sk))


class _Evaluation:
    """The evaluation of one ``search_part`` call: what it has kept and counted so far (this
    call's own; nothing outlives it).

    A candidate's peak memory does not depend on the accelerator (``_family``), so
    ``peak_bytes`` runs the memory formulas once per chunk for every group of a family. A
    group then times only the candidates that fit its accelerator: a candidate that does not
    fit is never feasible, never on a front and never ranked, so its time is read only for
    the near misses of a chunk where nothing is feasible, and such a chunk is evaluated
    whole, as ``evaluate_bulk`` does (``_closest_of``). The timing runs on the grid rows
    (skeleton, vp, micro-batch) that hold at least one fitting candidate, and the job figures
    on the fitting candidates alone; each element is the same sequence of operations on the
    same values as in the whole grid, so every figure is bit-identical
    (tests/core/test_search.py)."""

    def __init__(self, request: SearchRequest) -> None:
        self.request = request
        space = request.space
        self.counts = count_parameters(request.model)
        self.flops = token_flops(request.model, self.counts, request.training.seq_len)
        self.gather = shard_unit(space.base, request.training) == ShardUnit.MATRIX
        self.headroom = 1.0 - space.memory_headroom_fraction
        self.checkpoint = checkpoint_bytes(request.model)
        self.priced = bool(request.price_per_gpu_hour_usd)
        self.kept: list[_Candidate] = []
        self.front: list[_Candidate] = []
        self.closest: list[_Candidate] = []
        self.evaluated = 0
        self.feasible = 0
        self.pruned: dict[str, int] = {}
        self.bound = math.inf
        """The ``top_k``-th smallest objective kept so far: a candidate above it has
        ``top_k`` better ones already and is not among the ranked (``_rank_group``)."""

    def _vars(self, columns: Mapping[str, np.ndarray]) -> PlanVars:
        space = self.request.space
        return plan_vars(columns, self.request.model, space.base.offload, self.gather,
                         space.base)

    def peak_bytes(self, grid: _Grid, cluster: ClusterSpec,
                   training: TrainingSpec) -> np.ndarray:
        """Peak bytes of every candidate of ``grid``, in candidate order (``evaluate_bulk``'s
        ``peak_bytes``; ``cluster`` only gives the GPUs per node, which its family fixes)."""
        request, model = self.request, self.request.model
        pv = self._vars(grid.columns)
        geometry = build_geometry(model, self.counts, cluster, pv, training, np)
        activations = stage_activation_bytes(model, pv, training, geometry, np)
        memory = memory_breakdown(model, pv, training, geometry, request.calibration,
                                  cluster.accelerator.memory_bytes, np,
                                  stage_activations=activations)
        peak = np.broadcast_to(np.asarray(memory.peak_bytes, dtype=float), grid.shape)
        flat: np.ndarray = peak.reshape(-1)[grid.index]
        return flat

    def _timed(self, grid: _Grid, cluster: ClusterSpec, training: TrainingSpec,
               elements: np.ndarray) -> tuple[np.ndarray, PlanVars]:
        """Step seconds of the grid elements given, timed on the rows that hold them, and the
        inputs ``job_figures`` reads for them (one value per element)."""
        request, model = self.request, self.request.model
        rows_n = grid.shape[3]
        rows = elements % rows_n
        keep = np.zeros(rows_n, dtype=bool)
        keep[rows] = True
        kept_rows = np.flatnonzero(keep)
        columns = grid.columns
        if kept_rows.size < rows_n:
            columns = {key: (value[..., kept_rows] if key in _OUTER else value)
                       for key, value in columns.items()}
            renumber = np.cumsum(keep) - 1
            at = (elements // rows_n) * kept_rows.size + renumber[rows]
        else:
            at = elements
        shape = (*grid.shape[:3], int(kept_rows.size))
        pv = self._vars(columns)
        geometry = build_geometry(model, self.counts, cluster, pv, training, np)
        activations = stage_activation_bytes(model, pv, training, geometry, np)
        step = step_time(model, self.counts, cluster, pv, training, geometry,
                         request.calibration, activations[0], np)
        step_s = np.broadcast_to(np.asarray(step.step_s, dtype=float), shape).reshape(-1)
        codes = grid.columns["recompute"].reshape(-1)[
            (elements // (grid.shape[2] * rows_n)) % grid.shape[1]]
        return step_s[at], dataclasses.replace(
            pv, full_recompute=codes == 2, selective_recompute=codes == 1,
            global_batch_seqs=np.reshape(pv.global_batch_seqs, -1))

    def group(self, grid: _Grid, peak: np.ndarray, cluster_index: int, cluster: ClusterSpec,
              batch: int, training: TrainingSpec) -> None:
        """Evaluate one group's candidates of ``grid`` (with their ``peak`` bytes) and keep
        what it ranks."""
        request = self.request
        usable = cluster.accelerator.memory_bytes * self.headroom
        size = grid.size
        self.evaluated += size
        positions = np.flatnonzero(peak <= usable)
        self._count("memory", size - positions.size)
        if positions.size == 0:
            for rule, limit in (("deadline", request.max_train_s),
                                ("budget", request.budget_usd)):
                if limit is not None:
                    self._count(rule, 0)
            self._closest_of(grid, cluster_index, cluster, batch, training, usable)
            return
        elements = grid.index[positions]
        step_s, job_pv = self._timed(grid, cluster, training, elements)
        acc = cluster.accelerator
        job = job_figures(step_s, job_pv, training, cluster.num_gpus, self.flops,
                          acc.peak_for(training.precision),
                          average_power_w_per_gpu(acc.tdp_w, request.energy),
                          request.energy.pue, np)
        figures = BulkFigures(
            peak_bytes=peak[positions], step_s=step_s,
            tokens_per_s=np.asarray(job.tokens_per_s, dtype=float),
            train_s=np.asarray(job.train_s, dtype=float),
            gpu_hours=np.asarray(job.gpu_hours, dtype=float),
            kwh=np.asarray(job.kwh, dtype=float),
            mfu_fraction=np.asarray(job.mfu_fraction, dtype=float))
        if not self._rank_group(grid, figures, positions, cluster_index, cluster, batch,
                                usable):
            self._closest_of(grid, cluster_index, cluster, batch, training, usable)

    def _count(self, rule: str, count: int) -> None:
        self.pruned[rule] = self.pruned.get(rule, 0) + int(count)

    def _scores(self, figures: BulkFigures, cluster: ClusterSpec,
                factor: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Cost, time (both with failures and checkpoints, the quote's billed hours) and the
        objective of each candidate; infinite where the job cannot progress."""
        request = self.request
        price = float(request.price_per_gpu_hour_usd.get(cluster.accelerator.id, 0))
        billed = figures.gpu_hours * price if self.priced else figures.gpu_hours
        cost = _with_failures(billed, factor)
        train_s = _with_failures(figures.train_s, factor)
        objective = _with_failures(_objective_values(
            request.objective, figures, billed, _energy_for(request, cluster)), factor)
        return cost, train_s, objective

    def _rank_group(self, grid: _Grid, figures: BulkFigures, positions: np.ndarray,
                    cluster_index: int, cluster: ClusterSpec, batch: int,
                    usable: float) -> bool:
        """Count and keep the feasible candidates among those that fit (``figures``, at
        ``positions`` of ``grid``'s candidates); False when none is feasible."""
        request = self.request
        # One factor per group: failures depend on the GPU count and the model, not the layout.
        factor = job_failures(cluster.num_gpus, self.checkpoint, request.reliability).factor
        cost, train_s, objective = self._scores(figures, cluster, factor)
        ok: np.ndarray | None = None  # None: every candidate that fits is feasible
        if request.max_train_s is not None:
            late = train_s > request.max_train_s
            self._count("deadline", late.sum())
            ok = ~late
        if request.budget_usd is not None:
            over = cost > float(request.budget_usd)
            if ok is not None:
                over &= ok
            self._count("budget", over.sum())
            ok = ~over if ok is None else ok & ~over
        feasible = positions.size if ok is None else int(ok.sum())
        if not feasible:
            return False
        self.feasible += feasible
        # The candidates above the bound are not among the best (their chunk's ``_top``
        # would keep them, and the merge drop them); NaN is never above it, and a chunk with
        # a NaN objective is ranked whole, as ``_top`` always ranked it.
        ranked = ok
        if math.isfinite(self.bound):
            above = objective > self.bound
            if above.any() and not np.isnan(objective).any():
                ranked = ~above if ok is None else ok & ~above
        picked = _top(objective, _sort_keys(grid, objective, figures, cluster_index, positions),
                      np.ones(positions.size, dtype=bool) if ranked is None else ranked,
                      request.top_k)
        make = _maker(grid, figures, cost, usable, cluster_index, batch, objective, train_s,
                      request.space.base, positions)
        chosen = make(picked)
        self.kept.extend(chosen)
        if chosen and len(self.kept) >= request.top_k:
            best = [c.key[0] for c in self.kept]
            if not any(math.isnan(x) for x in best):
                self.bound = sorted(best)[request.top_k - 1]
                self.kept = [c for c in self.kept if not c.key[0] > self.bound]
        if math.isfinite(factor):  # a job that cannot progress is on no time/cost front
            self.front.extend(make(_pareto_indices(
                train_s, cost, np.ones(positions.size, dtype=bool) if ok is None else ok)))
        return True

    def _closest_of(self, grid: _Grid, cluster_index: int, cluster: ClusterSpec, batch: int,
                    training: TrainingSpec, usable: float) -> None:
        """The near misses of a chunk where no candidate is feasible, from every candidate's
        figures (``evaluate_bulk`` on the whole chunk)."""
        request = self.request
        figures = _flat_figures(grid, evaluate_bulk(
            request.model, cluster, training, grid.columns, energy=request.energy,
            calibration=request.calibration, base=request.space.base))
        factor = job_failures(cluster.num_gpus, self.checkpoint, request.reliability).factor
        cost, train_s, objective = self._scores(figures, cluster, factor)
        fits = figures.peak_bytes <= usable
        make = _maker(grid, figures, cost, usable, cluster_index, batch, objective, train_s,
                      request.space.base)
        ratio = figures.peak_bytes / usable
        near = np.where(fits, figures.train_s, np.inf) if fits.any() else ratio
        self.closest.extend(make([int(i) for i in np.argsort(near, kind="stable")[
            :CLOSEST_SHOWN]]))


def merge_parts(request: SearchRequest, parts: Sequence[SearchPart],
                elapsed_s: float) -> SearchResult:
    """Rank the parts of one request together: the answer ``search`` gives when its groups
    are spread over several ``search_part`` calls (in any split, in any order), since the
    ranking keys (objective, time, GPU-hours, group, layout) order candidates totally.
    ``elapsed_s`` is the caller's measure of the work (reported, never used to choose)."""
    total = sum(p.candidates_total for p in parts)
    if group_count(request) and not any(p.groups_with_layout for p in parts):
        raise _no_layout(request)
    pruned: dict[str, int] = {}
    for part in parts:
        for rule, count in part.pruned_by_rule:
            pruned[rule] = pruned.get(rule, 0) + count
    stats = SearchStats(candidates_total=total,
                        candidates_evaluated=sum(p.candidates_evaluated for p in parts),
                        feasible=sum(p.feasible for p in parts),
                        pruned_by_rule=dict(sorted(pruned.items())), elapsed_s=elapsed_s,
                        max_candidates=request.max_candidates)
    kept = sorted((c for p in parts for c in p.kept), key=lambda c: c.key)
    if not kept:
        closest = [c for p in parts for c in p.closest]
        raise NoFeasiblePlanError(
            "no candidate fits in memory within the deadline and budget",
            closest=[_closest_entry(c, request) for c in sorted(
                closest, key=lambda c: (c.peak_bytes / c.usable_bytes, c.key))[:CLOSEST_SHOWN]],
            candidates_total=total,
        )
    pareto = _merge_front([c for p in parts for c in p.front])
    # No front when no job can progress: the plans are then the ranked ones, each saying so.
    chosen = pareto[: request.top_k] if request.objective is Objective.PARETO and pareto else (
        kept[: request.top_k])
    return SearchResult(
        plans=tuple(_rank(c, request) for c in chosen),
        pareto=tuple(_rank(c, request) for c in _thin(pareto)),
        stats=stats,
        cost_basis="usd" if request.price_per_gpu_hour_usd else "gpu_hours",
    )


def search(request: SearchRequest, clock: Callable[[], float]) -> SearchResult:
    """Enumerate, evaluate, filter and rank, in this process. Raises ``SearchTooLargeError``
    before any work when the space exceeds ``max_candidates``, ``NoLayoutError`` when no
    layout has the GPU counts asked, ``SearchDeadlineError`` past ``deadline_s`` (by
    ``clock``; never a partial answer), and ``NoFeasiblePlanError`` with the closest misses
    when nothing fits the memory, training deadline and budget."""
    started = clock()
    part = search_part(request, clock)
    return merge_parts(request, [part], clock() - started)


def _energy_for(request: SearchRequest, cluster: ClusterSpec) -> EnergySpec:
    """The request's energy assumptions with the grid intensity where ``cluster`` runs."""
    grid = cluster.grid_gco2e_per_kwh
    if grid is None or grid == request.energy.grid_gco2e_per_kwh:
        return request.energy
    return dataclasses.replace(request.energy, grid_gco2e_per_kwh=grid)


def _with_failures(values: np.ndarray, factor: float) -> np.ndarray:
    """One group's ``values`` × (1 + lost fraction) (``failures.JobFailures.factor``): the
    same array when nothing fails, +inf everywhere when the job cannot progress (never
    0 × inf)."""
    if factor == 1.0:
        return values
    if math.isinf(factor):
        return np.full(np.shape(values), np.inf)
    return values * factor


def _objective_values(objective: Objective, figures: BulkFigures, cost: np.ndarray,
                      energy: EnergySpec) -> np.ndarray:
    if objective is Objective.CARBON:  # kWh already includes PUE (estimate's energy block)
        return figures.kwh * energy.grid_gco2e_per_kwh
    if objective is Objective.GPU_HOURS:
        return figures.gpu_hours
    if objective is Objective.COST:
        return cost
    if objective is Objective.ENERGY:
        return figures.kwh
    return figures.train_s


def _flat_figures(grid: _Grid, figures: BulkFigures) -> BulkFigures:
    """The figures of a grid evaluation, one value per candidate in candidate order."""
    return BulkFigures(**{f.name: grid.flat(getattr(figures, f.name))
                          for f in dataclasses.fields(BulkFigures)})


def _sort_keys(grid: _Grid, objective: np.ndarray, figures: BulkFigures,
               cluster_index: int, positions: np.ndarray | None = None,
               ) -> Callable[[np.ndarray], list[np.ndarray]]:
    """The ranking keys of the candidates at given indices, primary first: objective (with
    failures), time and GPU-hours (without: the same order within a group, whose failure
    factor is one number), then the layout itself (deterministic). The figures are those of
    the grid's candidates at ``positions`` (default: all of them)."""
    def keys(idx: np.ndarray) -> list[np.ndarray]:
        columns = grid.take(idx if positions is None else positions[idx])
        layout = [columns[k] for k in ("tp", "pp", "cp", "ep", "vp", "micro_batch",
                                       "zero_stage", "recompute")]
        return [objective[idx], figures.train_s[idx], figures.gpu_hours[idx],
                np.full(idx.size, cluster_index), *layout, ~columns["sp"]]
    return keys


def _top(primary: np.ndarray, keys: Callable[[np.ndarray], list[np.ndarray]], ok: np.ndarray,
         k: int) -> list[int]:
    """The ``k`` best candidates that are ``ok`` by ``keys`` (whose first is ``primary``)."""
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return []
    if idx.size > 4 * k:  # cheap pre-selection on the primary key, ties kept
        threshold = np.partition(primary[idx], k - 1)[k - 1] if k <= idx.size else np.inf
        idx = idx[primary[idx] <= threshold]
    order = np.lexsort(tuple(reversed(keys(idx))))
    return [int(i) for i in idx[order[:k]]]


def _maker(grid: _Grid, figures: BulkFigures, cost: np.ndarray, usable: float,
           cluster_index: int, batch: int, objective: np.ndarray, train_s: np.ndarray,
           base: ParallelismPlan, positions: np.ndarray | None = None,
           ) -> Callable[[Sequence[int]], list[_Candidate]]:
    def make(indices: Sequence[int]) -> list[_Candidate]:
        at = np.asarray(indices, dtype=np.int64)
        columns = grid.take(at if positions is None else positions[at])
        made = []
        for j, i in enumerate(indices):
            plan = plan_at(columns, j, base)
            key = (float(objective[i]), float(figures.train_s[i]), float(figures.gpu_hours[i]),
                   cluster_index, plan.tp, plan.pp, plan.cp, plan.ep, plan.vp,
                   plan.micro_batch, plan.zero_stage, RECOMPUTE_CODES.index(plan.recompute),
                   not plan.sequence_parallel)
            made.append(_Candidate(key=key, cluster_index=cluster_index, batch=batch,
                                   plan=plan, train_s=float(train_s[i]), cost=float(cost[i]),
                                   peak_bytes=float(figures.peak_bytes[i]),
                                   usable_bytes=usable))
        return made
    return make


def _pareto_indices(time_s: np.ndarray, cost: np.ndarray, ok: np.ndarray) -> list[int]:
    """Indices on the time/cost front: no other candidate is at least as fast and cheaper.

    The front starts at the fastest candidate (the cheapest of the fastest, the first of
    equals) and every later point is cheaper than it, so only the candidates cheaper than it
    are sorted (issue 16: sorting every feasible candidate was 6% of a 405B sweep)."""
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return []
    times, costs = time_s[idx], cost[idx]
    fastest_s, cheapest = times.min(), costs.min()
    if not (np.isnan(fastest_s) or np.isnan(cheapest)):  # NaN: sort them all, as before
        fastest = idx[times == fastest_s]
        first = fastest[np.argmin(cost[fastest])]
        idx = np.concatenate(([first], idx[costs < cost[first]]))
    order = idx[np.lexsort((cost[idx], time_s[idx]))]
    running = np.minimum.accumulate(cost[order])
    better = np.empty(order.size, dtype=bool)
    better[0] = True
    better[1:] = cost[order][1:] < running[:-1]
    return [int(i) for i in order[better]]


def _merge_front(candidates: list[_Candidate]) -> list[_Candidate]:
    front: list[_Candidate] = []
    best = math.inf
    for c in sorted(candidates, key=lambda c: (c.train_s, c.cost, c.key)):
        if c.cost < best:
            front.append(c)
            best = c.cost
    return front


def _thin(front: list[_Candidate]) -> list[_Candidate]:
    """At most PARETO_POINTS_MAX points, evenly spread along the front, both ends kept."""
    if len(front) <= PARETO_POINTS_MAX:
        return front
    step = (len(front) - 1) / (PARETO_POINTS_MAX - 1)
    return [front[round(i * step)] for i in range(PARETO_POINTS_MAX)]


def _rank(c: _Candidate, request: SearchRequest) -> RankedPlan:
    cluster, _ = _group_of(request, c.cluster_index)
    training = dataclasses.replace(request.training, global_batch_seqs=c.batch)
    energy = _energy_for(request, cluster)
    result = estimate(request.model, cluster, c.plan, training, energy=energy,
                      calibration=request.calibration)
    price = request.price_per_gpu_hour_usd.get(cluster.accelerator.id)
    failures = job_failures(cluster.num_gpus, checkpoint_bytes(request.model),
                            request.reliability)
    cost = cost_failing = None
    if price is not None:
        gpu_hours = Decimal(repr(result.throughput.gpu_hours))
        cost = (gpu_hours * price).quantize(Decimal("0.01"))
        if failures.progresses:  # the quote's billed hours: hours × (1 + exact(lost))
            cost_failing = (gpu_hours * (1 + pricing.exact(failures.goodput.lost_fraction))
                            * price).quantize(Decimal("0.01"))
    return RankedPlan(cluster=cluster, plan=c.plan, global_batch_seqs=c.batch,
                      estimate=result, cost_usd=cost, energy=energy, failures=failures,
                      cost_with_failures_usd=cost_failing)


def _closest_entry(c: _Candidate, request: SearchRequest) -> dict[str, Any]:
    cluster, _ = _group_of(request, c.cluster_index)
    reasons = []
    if c.peak_bytes > c.usable_bytes:
        reasons.append(
            f"needs {bytes_to_gib(c.peak_bytes):.1f} GiB per GPU, has "
            f"{bytes_to_gib(c.usable_bytes):.1f} GiB usable ({cluster.accelerator.id}, "
            f"{request.space.memory_headroom_fraction:.0%} headroom)")
    if not math.isfinite(c.train_s):
        failures = job_failures(cluster.num_gpus, checkpoint_bytes(request.model),
                                request.reliability)
        reasons.append(f"{failures.goodput.reason} ({failures.basis})")
    elif request.max_train_s is not None and c.train_s > request.max_train_s:
        reasons.append(f"takes {c.train_s:,.0f} s with failures and checkpoints; the deadline "
                       f"is {request.max_train_s:,.0f} s")
    if (request.budget_usd is not None and math.isfinite(c.cost)
            and c.cost > float(request.budget_usd)):
        reasons.append(f"costs about {c.cost:,.2f} USD; the budget is {request.budget_usd} USD")
    plan = dataclasses.asdict(c.plan)
    plan["offload"] = sorted(str(x) for x in c.plan.offload)  # JSON has no sets
    return {"accelerator": cluster.accelerator.id, "num_gpus": cluster.num_gpus,
            "global_batch_seqs": c.batch, "parallelism": plan, "reasons": reasons}

