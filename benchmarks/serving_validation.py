"""Serving model against published measurements (issue 19): ``python -m
benchmarks.serving_validation``.

Reads ``benchmarks/data/serving-runs.csv`` (published rows, the source and the quoted table
row in each; documents listed in ``docs/serving.md``). A row is evaluated when it states
everything the model needs: a model with a preset, accelerator, GPUs and tensor
parallelism, prompt and output lengths, and a closed-loop concurrency or a fixed batch; the
others are counted with the reason they are not.

Engine efficiencies (``hbm_fraction``, ``compute_fraction``, ``step_overhead_s``) are fitted
per named engine on the rows run with that engine, by grid search minimising the squared log
error of output tokens/s and, where the row states it, TPOT. An engine with no training row
keeps its prior (``serving.ENGINE_PRIORS``); ``unknown`` is never fitted: it takes, parameter
by parameter, the least efficient of the named engines (``conservative``).

Two figures are printed side by side:

- **in sample**: the table fitted on every evaluable row (the one ``ENGINE_EFFICIENCY``
  holds; a test checks they agree);
- **leave one source out (LOSO)**: for each source document, the table is fitted on the
  other documents' rows only and the held-out document's rows are predicted with it. The
  document is the publication (an MLPerf round counts as one document, whoever submitted),
  so correlated rows cannot leak into their own fit.

``before`` is the same evaluation with the priors, nothing fitted.

**Sizing** is evaluated on closed-loop concurrency sweeps (``sweeps``): evaluable rows of one
document with the same model, deployment and lengths at three or more concurrencies, each
stating TTFT and TPOT. Each published point sets one SLO level at its own latencies (p50
TTFT and TPOT no greater than the point's); the published requests/s per replica at that SLO
is the highest of the sweep's points that meet it (``measured_capacity``), the model's is
``serve()``'s requests/s at the largest concurrency whose p50 TTFT and TPOT meet it
(``model_capacity``: bisection on the integer concurrency, 0 when concurrency 1 misses it).
The error is model / published - 1; replicas for a load are ceil(QPS / that). The same
tables are used as for throughput: priors, in sample, and each document's sweeps predicted
by the table fitted without that document (``sizing_leave_one_source_out``).

**Open-loop latency** is evaluated on the rows run open loop (``is_open_loop``: online, a
stated offered ``requests_per_s``, no concurrency or batch), which fit nothing: ``serve()``
runs in online mode at the row's own rate on one replica (the published deployment,
``replicas=1``) and its p50 TTFT and p50 TPOT are compared with the published p50 columns
(the median, or a mean where the row's notes say so); the error is model / published - 1.
Rows where the model's replica saturates at that rate (an unstable queue: its TTFT grows
without bound) are listed apart and kept out of the summaries. The tables are the
throughput figure's: in sample, and for LOSO the table fitted without the row's document
(``open_loop_leave_one_source_out``).
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
import re
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from benchmarks.accuracy import seed_accelerators
from service.core import serving as s
from service.core.presets import PRESETS
from service.core.specs import AcceleratorSpec, ModelSpec

DATA = Path(__file__).resolve().parent / "data" / "serving-runs.csv"
MODELS = {"Llama-3.1-8B": "llama3.1-8b", "Meta-Llama-3.1-8B": "llama3.1-8b",
          "Llama-3.1-70B": "llama3.1-70b", "Llama-3.3-70B": "llama3.1-70b",
          "Meta-Llama-3-70B": "llama3.1-70b",
          "Llama-2-7B": "llama2-7b", "Llama-2-13B": "llama2-13b", "Llama-2-70B": "llama2-70b",
          "Llama-3.1-405B": "llama3.1-405b", "Mixtral-8x7B": "mixtral-8x7b",
          "DeepSeek-V3": "deepseek-v3", "DeepSeek-R1": "deepseek-v3"}
"""Row model -> preset (a row's model is matched by prefix). Llama 3.3 70B and Llama 3 70B have
Llama 3.1 70B's architecture (their public configs: 80 layers, hidden 8192, 64 heads, 8 KV heads,
FFN 28672, vocabulary 128256; only the RoPE scaling and context length differ, which no preset
models) and DeepSeek-R1 has DeepSeek-V3's (their model cards)."""
ENGINES = {"vllm": s.Engine.VLLM, "sglang": s.Engine.SGLANG, "trtllm": s.Engine.TRTLLM}
"""Anything else (``other``: NVIDIA NIM, MangoBoost, ...) is run as ``unknown``."""
NAMED = (s.Engine.TRTLLM, s.Engine.SGLANG, s.Engine.VLLM)
WEIGHTS = {"bf16": s.WeightPrecision.BF16, "fp16": s.WeightPrecision.BF16,
           "fp8": s.WeightPrecision.FP8, "int4": s.WeightPrecision.INT4,
           "": s.WeightPrecision.BF16}
"""Unstated weight precision is the checkpoint's bf16. fp16 is run as bf16: both are 2 bytes a
weight and run at the same dense tensor-core rate on A100, H100 and MI300X (their data
sheets). fp4 has no WeightPrecision."""

SWEEP_MIN_POINTS = 3
"""A sweep with fewer published concurrencies is not evaluated for sizing."""
SWEEP_KEY = ("model", "accelerator", "num_gpus", "tp", "engine", "weight_precision",
             "kv_cache_precision", "prompt_tokens", "output_tokens")
"""Columns a sweep's rows share (besides the document); only the concurrency varies."""
LATENCIES = {"ttft": "measured_ttft_s_p50", "tpot": "measured_tpot_s_p50"}
SLO_KINDS = (("ttft", "tpot"), ("tpot",), ("ttft",))
"""The SLOs set at each published point: both latencies (the figure quoted), then each
alone (diagnostics)."""
CONCURRENCY_CAP = 4096
"""The model-side search's largest concurrency (16 x the largest published, 250)."""
EXAMPLE_QPS = 10.0
"""The load the replica counts are shown for."""

HBM_GRID = tuple(round(0.50 + 0.01 * i, 2) for i in range(46))  # 0.50 .. 0.95
COMPUTE_GRID = tuple(round(0.30 + 0.05 * i, 2) for i in range(10))  # 0.30 .. 0.75
OVERHEAD_GRID_S = (0.0, 0.5e-3, 1.0e-3, 2.0e-3, 3.0e-3, 4.0e-3)

Table = Mapping[s.Engine, s.EngineEfficiency]
Row = dict[str, str]


HELD_OUT_DOCUMENTS = frozenset({
    "dstack benchmarks repository: Llama3.1-405B-Fp8 Inference Performance Comparison between "
    "8xH100SXM5 and 8xMi300x (vLLM)",
    "DataCrunch blog: Large Language Model Hopper Architecture Benchmarking (DeepSeek V3 on H200 "
    "with SGLang v0.4.1)",
    "dstack blog: Benchmarking Llama 3.1 405B on 8x AMD MI300X GPUs (2024-10-09)",
    "TensorRT-LLM docs blog: How to get best performance on DeepSeek-R1 in TensorRT LLM",
    "SGLang cookbook (sgl-project/sgl-cookbook)",
})
"""Documents whose rows came after the shipped ``ENGINE_EFFICIENCY`` was fitted (commit
6cbf3a3, 2026-12-02): evaluated with the shipped table as an out-of-sample check and reported
apart, never fitted (decision 338). With them in, one efficiency per engine cannot hold both
these rows and the rest: vLLM's fit falls to the grid's floor (HBM 0.50, compute 0.35), which
makes the other vLLM rows 30-40% pessimistic; the refit per engine x accelerator that
issue 40 asks for is what takes them in. dstack's vLLM/TGI 405B MI300X blog, TensorRT-LLM's
DeepSeek-R1 best-practice post and the SGLang cookbook's DeepSeek pages were added the same way
on 2026-12-02 (servingrows), after the shipped table was fitted, for out-of-sample checks of the
serving band; they fit nothing."""


def _relative_error(predicted: float, measured: float | None) -> float | None:
    """predicted / measured - 1, or None when the source states no measurement."""
    return None if measured is None else predicted / measured - 1.0


@dataclass(frozen=True)
class Result:
    row_id: str
    document: str
    engine: s.Engine
    measured: float
    predicted: float
    measured_tpot_s: float | None
    predicted_tpot_s: float
    measured_ttft_s: float | None
    predicted_ttft_s: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0

    @property
    def tpot_error(self) -> float | None:
        return _relative_error(self.predicted_tpot_s, self.measured_tpot_s)


def document(row: Row) -> str:
    """The publication a row comes from: an MLPerf round is one document whoever submitted;
    otherwise the ``source`` up to its first comma (a blog post's tables are one post)."""
    match = re.match(r"MLPerf Inference v[\d.]+", row["source"])
    if match:
        return match.group(0)
    return row["source"].split(",")[0].strip()


def _preset(row: Row) -> str | None:
    return next((v for k, v in MODELS.items() if row["model"].startswith(k)), None)


def _unknown_reason(row: Row, accelerators: Mapping[str, AcceleratorSpec]) -> str | None:
    """Why the row's model, accelerator or weight precision cannot be set up, or None."""
    if _preset(row) is None:
        return "model without a preset"
    if row["accelerator"] not in accelerators:
        return "accelerator not in the catalogue"
    if row["weight_precision"] not in WEIGHTS:
        return f"{row['weight_precision']} weights (no such weight precision)"
    domain = accelerators[row["accelerator"]].scaleup_domain_size
    if row["tp"] and int(row["tp"]) > domain:
        # serve() refuses such a deployment (InvalidSpecError on deployment.tp): the model has
        # no term for tensor parallelism over the scale-out network (decision 338).
        return f"tp above the scale-up domain ({domain} GPUs): tensor parallelism across nodes"
    return None


def skip_reason(row: Row, accelerators: Mapping[str, AcceleratorSpec]) -> str | None:
    """Why the row cannot be evaluated, or None when it can."""
    if unknown := _unknown_reason(row, accelerators):
        return unknown
    if not row["measured_output_tokens_per_s"]:
        return "no output tokens/s"
    if not (row["prompt_tokens"] and row["output_tokens"]):
        return "prompt or output length not stated"
    if is_open_loop(row):
        return "open loop at a request rate (latency only, in the open-loop section)"
    if not (row["concurrency"] or row["batch_size"]):
        return "neither concurrency nor batch stated"
    if not row["tp"]:
        return "tensor parallelism not stated"
    return None


def is_open_loop(row: Row) -> bool:
    """Whether the row was run open loop: online at a stated offered request rate, with no
    concurrency or batch (a closed loop's ``requests_per_s`` is what it achieved)."""
    return (row["mode"] == "online" and bool(row["requests_per_s"])
            and not row["concurrency"] and not row["batch_size"])


def _setup(row: Row, accelerators: Mapping[str, AcceleratorSpec]) -> tuple[
        ModelSpec, s.Deployment, s.Lengths, s.Lengths]:
    """The model, deployment and prompt and output lengths a row states."""
    preset = _preset(row)
    assert preset is not None  # skip_reason ran first
    gpus, tp = int(row["num_gpus"]), int(row["tp"])
    deployment = s.Deployment(
        accelerator=accelerators[row["accelerator"]], gpus_per_replica=gpus, tp=tp,
        pp=gpus // tp, weight_precision=WEIGHTS[row["weight_precision"]],
        kv_cache_precision=(s.KvPrecision.FP8 if row["kv_cache_precision"] == "fp8"
                            else s.KvPrecision.BF16),
        engine=ENGINES.get(row["engine"], s.Engine.UNKNOWN), engine_version=engine_version(row))
    return (PRESETS[preset].model, deployment, s.Lengths.of(mean=float(row["prompt_tokens"])),
            s.Lengths.of(mean=float(row["output_tokens"])))


def engine_version(row: Row) -> str | None:
    """The release the row's document states (``engine_version``), for a named engine; None
    where none is stated (the service then assumes the latest documented) or the engine is
    run as ``unknown`` (NIM's, LMDeploy's and TGI's versions are not those of an engine the
    model knows)."""
    return (row["engine_version"] or None) if row["engine"] in ENGINES else None


def is_legacy(row: Row) -> bool:
    """Whether the row's engine release runs an earlier core (``serving.legacy_core``: vLLM
    before 0.8, V0)."""
    engine = ENGINES.get(row["engine"], s.Engine.UNKNOWN)
    return s.legacy_core(engine, engine_version(row)) is not None


def evaluate(row: Row, accelerators: Mapping[str, AcceleratorSpec]) -> Result:
    model, deployment, prompt, output = _setup(row, accelerators)
    engine = deployment.engine
    estimate = s.serve(model, deployment, _row_traffic(row, prompt, output))
    tpot, ttft = row["measured_tpot_s_p50"], row["measured_ttft_s_p50"]
    return Result(row_id=row["id"], document=document(row), engine=engine,
                  measured=float(row["measured_output_tokens_per_s"]),
                  predicted=estimate.output_tokens_per_s,
                  measured_tpot_s=float(tpot) if tpot else None,
                  predicted_tpot_s=estimate.tpot_s.p50,
                  measured_ttft_s=float(ttft) if ttft else None,
                  predicted_ttft_s=estimate.ttft_s.p50)


@contextmanager
def engine_table(table: Table) -> Iterator[None]:
    """Run the model with ``table`` in place of ``ENGINE_EFFICIENCY`` (restored after): the
    module's name rebound to a new read-only table, the shipped one left as it is."""
    saved = s.ENGINE_EFFICIENCY
    s.ENGINE_EFFICIENCY = MappingProxyType({**saved, **table})
    try:
        yield
    finally:
        s.ENGINE_EFFICIENCY = saved


def predict(rows: Sequence[Row], table: Table,
            accelerators: Mapping[str, AcceleratorSpec]) -> list[Result]:
    with engine_table(table):
        return [evaluate(r, accelerators) for r in rows]


def _loss(results: Sequence[Result]) -> float:
    """Squared log error of throughput, and of TPOT where the row states it."""
    total = 0.0
    for r in results:
        total += math.log(r.predicted / r.measured) ** 2
        if r.measured_tpot_s is not None:
            total += math.log(r.predicted_tpot_s / r.measured_tpot_s) ** 2
        if r.measured_ttft_s is not None:
            total += math.log(r.predicted_ttft_s / r.measured_ttft_s) ** 2
    return total


def conservative(table: Table) -> s.EngineEfficiency:
    """``unknown``: parameter by parameter the least efficient of the named engines."""
    named = [table[e] for e in NAMED]
    return s.EngineEfficiency(
        hbm_fraction=min(e.hbm_fraction for e in named),
        compute_fraction=min(e.compute_fraction for e in named),
        step_overhead_s=max(e.step_overhead_s for e in named),
        gpu_memory_fraction=min(e.gpu_memory_fraction for e in named),
        basis="conservative: per parameter the least efficient of trtllm, sglang and vllm "
              "(lowest HBM and compute fractions, highest step overhead, smallest memory "
              "fraction); never fitted")


def is_moe(row: Row) -> bool:
    """Whether the row's model is a mixture of experts (by its preset)."""
    preset = _preset(row)
    return preset is not None and PRESETS[preset].model.num_experts > 0


def is_held_out(row: Row) -> bool:
    """Whether the row's document is one of ``HELD_OUT_DOCUMENTS`` (evaluated, fits nothing)."""
    return document(row) in HELD_OUT_DOCUMENTS


EngineFits = dict[tuple[s.Engine, tuple[str, ...]], s.EngineEfficiency]
"""One call's engine fits by (engine, the ids of the rows fitted): ``fold_tables`` passes
one to every fold's ``fit``, so a fold that leaves out another engine's document reuses this
engine's fit instead of searching the same grid on the same rows again."""


def fit(rows: Sequence[Row], accelerators: Mapping[str, AcceleratorSpec],
        fits: EngineFits | None = None) -> dict[s.Engine, s.EngineEfficiency]:
    """Each named engine fitted on its dense rows in ``rows`` (prior when it has none), and
    ``unknown`` the conservative of them. Rows run as ``unknown`` and rows of
    ``HELD_OUT_DOCUMENTS`` fit nothing. MoE rows are
    evaluated but fit nothing (decision 144): on dstack's DeepSeek-R1 runs (vLLM and SGLang,
    early 2025) the model is 2.5-4.7x above the measured throughput (2.8-5.8x before the MoE
    kernel terms of decisions-moe40; ``MOE_SERVING_WARNING`` gives every MoE document's
    range), a gap one efficiency per engine cannot absorb without making every dense row
    20-40% pessimistic."""
    table: dict[s.Engine, s.EngineEfficiency] = dict(s.ENGINE_PRIORS)
    for engine in NAMED:
        mine = [r for r in rows if ENGINES.get(r["engine"]) is engine and not is_moe(r)
                and not is_held_out(r)]
        if not mine:
            continue
        key = (engine, tuple(r["id"] for r in mine))
        if fits is not None and key in fits:
            table[engine] = fits[key]
            continue
        prior = s.ENGINE_PRIORS[engine]
        best: tuple[float, s.EngineEfficiency] | None = None
        for hbm, compute, overhead in itertools.product(HBM_GRID, COMPUTE_GRID,
                                                        OVERHEAD_GRID_S):
            candidate = dataclasses.replace(prior, hbm_fraction=hbm,
                                            compute_fraction=compute,
                                            step_overhead_s=overhead)
            loss = _loss(predict(mine, {engine: candidate}, accelerators))
            if best is None or loss < best[0] - 1e-12:
                best = (loss, candidate)
        assert best is not None  # the grid is not empty
        ids = sorted({document(r) for r in mine})
        table[engine] = dataclasses.replace(
            best[1], basis=f"fitted on {len(mine)} rows of {'; '.join(ids)}: "
                           f"{', '.join(r['id'] for r in mine)}")
        if fits is not None:
            fits[key] = table[engine]
    table[s.Engine.UNKNOWN] = conservative(table)
    return table


def calibrated_pairs(rows: Sequence[Row]) -> dict[tuple[s.Engine, str], int]:
    """(engine, accelerator id) -> the rows of ``rows`` ``fit`` fits that pair's engine on
    (dense rows of a named engine): ``serving.CALIBRATED_PAIRS``."""
    pairs: Counter[tuple[s.Engine, str]] = Counter()
    for r in rows:
        engine = ENGINES.get(r["engine"])
        if engine is not None and not is_moe(r) and not is_held_out(r):
            pairs[(engine, r["accelerator"])] += 1
    return dict(sorted(pairs.items()))


def validated_range(rows: Sequence[Row]) -> s.ValidatedRange:
    """The mean prompt and output lengths and the largest batch or concurrency of the
    evaluated dense rows in ``rows`` (every engine) that the fit takes (not of
    ``HELD_OUT_DOCUMENTS``: there the model is 1.3-20x off, so those lengths are not a region
    it holds in): ``serving.VALIDATED_RANGE``."""
    dense = [r for r in rows if not is_moe(r) and not is_held_out(r)]
    prompts = [float(r["prompt_tokens"]) for r in dense]
    outputs = [float(r["output_tokens"]) for r in dense]
    return s.ValidatedRange(
        prompt_tokens=(min(prompts), max(prompts)), output_tokens=(min(outputs), max(outputs)),
        running_batch_max=max(float(r["batch_size"] or r["concurrency"]) for r in dense))


Fitter = Callable[[Sequence[Row], Mapping[str, AcceleratorSpec]], Table]


def fold_tables(rows: Sequence[Row], accelerators: Mapping[str, AcceleratorSpec],
                fitter: Fitter = fit) -> dict[str, Table]:
    """For each document, the table fitted on the other documents' rows. With ``fit``, an
    engine whose rows a fold leaves unchanged is fitted once (``EngineFits``): the same
    grid on the same rows gives the same efficiency, so the tables are those of a fit per
    fold, at a fifth of the work."""
    fits: EngineFits = {}

    def fitted(kept: Sequence[Row]) -> Table:
        return fit(kept, accelerators, fits) if fitter is fit else fitter(kept, accelerators)

    return {held_out: fitted([r for r in rows if document(r) != held_out])
            for held_out in sorted({document(r) for r in rows})}


def leave_one_source_out(
        rows: Sequence[Row], accelerators: Mapping[str, AcceleratorSpec],
        fitter: Fitter = fit, tables: Mapping[str, Table] | None = None,
) -> list[Result]:
    """Each document's rows predicted by a table fitted on the other documents' rows
    (``tables``: the ``fold_tables`` already fitted, else fitted here with ``fitter``)."""
    folds = tables if tables is not None else fold_tables(rows, accelerators, fitter)
    results: list[Result] = []
    for held_out, table in folds.items():
        test = [r for r in rows if document(r) == held_out]
        results.extend(predict(test, table, accelerators))
    order = {r["id"]: i for i, r in enumerate(rows)}
    return sorted(results, key=lambda r: order[r.row_id])


# -- sizing -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Sweep:
    """Published closed-loop runs of one deployment at several concurrencies."""

    document: str
    rows: tuple[Row, ...]
    """By concurrency, lowest first."""

    @property
    def label(self) -> str:
        r = self.rows[0]
        return (f"{r['model']}, {r['num_gpus']} x {r['accelerator']} tp{r['tp']} "
                f"{r['weight_precision'] or 'bf16'} kv {r['kv_cache_precision'] or 'bf16'}, "
                f"{r['engine']}, "
                f"{r['prompt_tokens']} in / {r['output_tokens']} out")


def _stated(row: Row, metric: str) -> float | None:
    value = row[LATENCIES[metric]]
    return float(value) if value else None


def sweeps(rows: Sequence[Row]) -> tuple[list[Sweep], list[tuple[Sweep, str]]]:
    """The closed-loop sweeps in ``rows`` (evaluable rows with a concurrency), grouped by
    document and ``SWEEP_KEY``: those evaluable for sizing, and the others with the reason
    (fewer than ``SWEEP_MIN_POINTS`` concurrencies, or a point without TTFT and TPOT)."""
    groups: dict[tuple[str, ...], list[Row]] = {}
    for row in rows:
        if row["concurrency"] and not row["batch_size"]:
            key = (document(row), *(row[k] for k in SWEEP_KEY))
            groups.setdefault(key, []).append(row)
    good: list[Sweep] = []
    bad: list[tuple[Sweep, str]] = []
    for key, members in groups.items():
        sweep = Sweep(document=key[0], rows=tuple(
            sorted(members, key=lambda r: int(r["concurrency"]))))
        points = len({r["concurrency"] for r in members})
        if points < SWEEP_MIN_POINTS:
            bad.append((sweep, f"{points} concurrenc{'y' if points == 1 else 'ies'} "
                               f"(fewer than {SWEEP_MIN_POINTS})"))
        elif any(_stated(r, m) is None for r in members for m in LATENCIES):
            bad.append((sweep, "a point without TTFT and TPOT"))
        else:
            good.append(sweep)
    return good, bad


def slo_at(row: Row, kind: Sequence[str]) -> s.Slo:
    """The SLO a published point sets: its own p50 latencies of ``kind`` as limits."""
    return s.Slo(ttft_p50_s=_stated(row, "ttft") if "ttft" in kind else None,
                 tpot_p50_s=_stated(row, "tpot") if "tpot" in kind else None)


def _meets(slo: s.Slo, ttft_s: float, tpot_s: float) -> bool:
    return ((slo.ttft_p50_s is None or ttft_s <= slo.ttft_p50_s)
            and (slo.tpot_p50_s is None or tpot_s <= slo.tpot_p50_s))


def measured_requests_per_s(row: Row) -> float:
    """Published requests/s per replica: output tokens/s over the output length."""
    return float(row["measured_output_tokens_per_s"]) / float(row["output_tokens"])


def measured_capacity(sweep: Sweep, slo: s.Slo) -> float:
    """The highest published requests/s among the sweep's points that meet ``slo``
    (0 when none does)."""
    return max((measured_requests_per_s(r) for r in sweep.rows
                if _meets(slo, _stated(r, "ttft") or 0.0, _stated(r, "tpot") or 0.0)),
               default=0.0)


def largest_meeting(meets: Callable[[int], bool], cap: int = CONCURRENCY_CAP) -> int:
    """The largest n in [1, cap] with ``meets(n)``, by bisection, for a ``meets`` true up to
    some n and false beyond (latency grows with concurrency); 0 when ``meets(1)`` is false."""
    if not meets(1):
        return 0
    if meets(cap):
        return cap
    low, high = 1, cap  # meets(low), not meets(high)
    while high - low > 1:
        mid = (low + high) // 2
        if meets(mid):
            low = mid
        else:
            high = mid
    return low


def model_capacity(model: ModelSpec, deployment: s.Deployment, prompt: s.Lengths,
                   output: s.Lengths, slo: s.Slo) -> tuple[int, float]:
    """The largest closed-loop concurrency at which ``serve()``'s p50 TTFT and TPOT meet
    ``slo``, and its requests/s per replica; (0, 0.0) when concurrency 1 misses it."""

    def estimate(concurrency: int) -> s.ServingEstimate:
        return s.serve(model, deployment, s.Traffic(
            mode=s.TrafficMode.ONLINE, prompt=prompt, output=output, concurrency=concurrency))

    def meets(concurrency: int) -> bool:
        e = estimate(concurrency)
        return _meets(slo, e.ttft_s.p50, e.tpot_s.p50)

    best = largest_meeting(meets)
    return best, (estimate(best).requests_per_s if best else 0.0)


@dataclass(frozen=True)
class SizingResult:
    sweep: str
    document: str
    level: str
    """The published point whose latencies set the SLO."""
    slo: s.Slo
    measured: float
    """Published requests/s per replica at the SLO."""
    predicted: float
    predicted_concurrency: int

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0

    @staticmethod
    def replicas(qps: float, per_replica: float) -> int | None:
        """ceil(QPS / requests/s per replica); None when no load meets the SLO."""
        return math.ceil(qps / per_replica) if per_replica > 0 else None


def evaluate_sizing(sweep: Sweep, accelerators: Mapping[str, AcceleratorSpec],
                    kind: Sequence[str] = SLO_KINDS[0]) -> list[SizingResult]:
    """One result per published point of ``sweep``, the SLO at its own latencies."""
    model, deployment, prompt, output = _setup(sweep.rows[0], accelerators)
    results = []
    for row in sweep.rows:
        slo = slo_at(row, kind)
        concurrency, predicted = model_capacity(model, deployment, prompt, output, slo)
        results.append(SizingResult(
            sweep=sweep.label, document=sweep.document, level=row["id"], slo=slo,
            measured=measured_capacity(sweep, slo), predicted=predicted,
            predicted_concurrency=concurrency))
    return results


def predict_sizing(sweep_list: Sequence[Sweep], table: Table,
                   accelerators: Mapping[str, AcceleratorSpec],
                   kind: Sequence[str] = SLO_KINDS[0]) -> list[SizingResult]:
    with engine_table(table):
        return [x for w in sweep_list for x in evaluate_sizing(w, accelerators, kind)]


def sizing_leave_one_source_out(
        sweep_list: Sequence[Sweep], tables: Mapping[str, Table],
        accelerators: Mapping[str, AcceleratorSpec],
        kind: Sequence[str] = SLO_KINDS[0]) -> list[SizingResult]:
    """Each document's sweeps sized with the table fitted without that document
    (``fold_tables``, the throughput figure's folds)."""
    return [x for w in sweep_list
            for x in predict_sizing([w], tables[w.document], accelerators, kind)]


# -- open-loop latency ------------------------------------------------------------------------

@dataclass(frozen=True)
class OpenLoopResult:
    """``serve()`` at a published open-loop rate (one replica) against the published p50s."""

    row_id: str
    document: str
    engine: s.Engine
    requests_per_s: float
    capacity_requests_per_s: float
    """The model's replica capacity at the largest batch that fits."""
    saturated: bool
    """The model's replica cannot serve the rate (an unstable queue)."""
    batch: float
    measured_ttft_s: float | None
    predicted_ttft_s: float
    measured_tpot_s: float | None
    predicted_tpot_s: float

    @property
    def ttft_error(self) -> float | None:
        return _relative_error(self.predicted_ttft_s, self.measured_ttft_s)

    @property
    def tpot_error(self) -> float | None:
        return _relative_error(self.predicted_tpot_s, self.measured_tpot_s)


def open_loop_skip_reason(row: Row, accelerators: Mapping[str, AcceleratorSpec]) -> str | None:
    """Why an open-loop row (``is_open_loop``) cannot be evaluated, or None when it can."""
    if unknown := _unknown_reason(row, accelerators):
        return unknown
    if not (row["prompt_tokens"] and row["output_tokens"]):
        return "prompt or output length not stated"
    if not row["tp"]:
        return "tensor parallelism not stated"
    if not math.isfinite(float(row["requests_per_s"])):
        return "every request at once (rate inf): not an open loop"
    if not (row["measured_ttft_s_p50"] or row["measured_tpot_s_p50"]):
        return "neither TTFT nor TPOT stated"
    return None


def evaluate_open_loop(row: Row, accelerators: Mapping[str, AcceleratorSpec]) -> OpenLoopResult:
    """``serve()`` in online mode at the row's own ``requests_per_s`` on one replica."""
    model, deployment, prompt, output = _setup(row, accelerators)
    rate = float(row["requests_per_s"])
    estimate = s.serve(model, deployment, _row_traffic(row, prompt, output), replicas=1)
    ttft, tpot = _stated(row, "ttft"), _stated(row, "tpot")
    return OpenLoopResult(
        row_id=row["id"], document=document(row), engine=deployment.engine,
        requests_per_s=rate, capacity_requests_per_s=estimate.capacity_requests_per_s,
        saturated=estimate.saturated, batch=estimate.batch,
        measured_ttft_s=ttft, predicted_ttft_s=estimate.ttft_s.p50,
        measured_tpot_s=tpot, predicted_tpot_s=estimate.tpot_s.p50)


def predict_open_loop(rows: Sequence[Row], table: Table,
                      accelerators: Mapping[str, AcceleratorSpec]) -> list[OpenLoopResult]:
    with engine_table(table):
        return [evaluate_open_loop(r, accelerators) for r in rows]


def open_loop_leave_one_source_out(
        rows: Sequence[Row], tables: Mapping[str, Table], fitted: Table,
        accelerators: Mapping[str, AcceleratorSpec]) -> list[OpenLoopResult]:
    """Each open-loop row predicted by the table fitted without its document: its fold in
    ``tables`` (``fold_tables`` of the throughput figure) when the document also has rows in
    the fit, else ``fitted`` (the in-sample table, which holds no row of that document,
    since open-loop rows fit nothing)."""
    return [x for r in rows
            for x in predict_open_loop([r], tables.get(document(r), fitted), accelerators)]


@dataclass(frozen=True)
class Summary:
    rows: int
    median_abs: float
    max_abs: float
    bias: float

    @classmethod
    def of(cls, errors: Sequence[float]) -> Summary:
        return cls(rows=len(errors), median_abs=statistics.median(abs(e) for e in errors),
                   max_abs=max(abs(e) for e in errors), bias=statistics.fmean(errors))

    def __str__(self) -> str:
        return (f"median {self.median_abs:5.1%}  max {self.max_abs:5.1%}  "
                f"bias {self.bias:+6.1%}  ({self.rows} rows)")



# -- the band (issue 40) ----------------------------------------------------------------------

BAND_QUANTILES = (0.10, 0.90)
"""The band is the 10th to 90th percentile of measured / model over a regime's out-of-sample
rows: an 80 % band, as the training estimate's (docs/validation.md)."""
WIDE_QUANTILES = (0.05, 0.95)
"""The wide band (a regime with fewer than ``BAND_MIN_ROWS`` rows, or an uncalibrated engine
x accelerator pair): the 5th to 95th percentile over every regime's rows pooled."""
BAND_MIN_ROWS = 5
METRICS = ("output_tokens_per_s", "ttft_s", "tpot_s")


@dataclass(frozen=True, slots=True, kw_only=True)
class BandRegime:
    """Which of the serving band's regimes a row (or an answer) is in (issue 40): its engine,
    whether the model is a mixture of experts, and whether the load is open loop (a request
    rate) or closed (a batch, a concurrency, or offline)."""

    engine: s.Engine
    moe: bool
    open_loop: bool
    legacy: bool = False
    """Whether the engine release runs an earlier core (``is_legacy``: vLLM V0): its bands
    are ``serving.SERVING_LEGACY_BAND``'s, apart from the later core's."""

    def __repr__(self) -> str:
        return (f"BandRegime(engine=Engine.{self.engine.name}, moe={self.moe}, "
                f"open_loop={self.open_loop}{', legacy=True' if self.legacy else ''})")

    def key(self) -> tuple[s.Engine, bool, bool]:
        """The key of ``serving.SERVING_BAND`` (or ``SERVING_LEGACY_BAND`` for a legacy
        regime): (engine, moe, open_loop)."""
        return (self.engine, self.moe, self.open_loop)


@dataclass(frozen=True)
class Residual:
    """One out-of-sample ratio measured / model of one row and metric."""

    row_id: str
    document: str
    regime: BandRegime
    metric: str
    ratio: float
    calibrated: bool = True
    """Whether the row's engine x accelerator pair is fitted in the row's fold (the table
    fitted without its document): the service answers a calibrated pair with its regime's
    band and any other pair with the wide band (``uncalibrated_engine``)."""


def _ratios(measured: float | None, predicted: float) -> float | None:
    return measured / predicted if measured and predicted > 0 else None


def residuals(rows: Sequence[Row], accelerators: Mapping[str, AcceleratorSpec],
              tables: Mapping[str, Table] | None = None) -> list[Residual]:
    """Every evaluated row's out-of-sample ratios: closed-loop rows from the table fitted
    without their document (``leave_one_source_out``), open-loop rows the model serves (not
    saturated) from their fold or the shipped fit, which never saw them. Held-out documents
    (``HELD_OUT_DOCUMENTS``) fit nothing, so every fold is out of sample for them too.
    ``tables``: the ``fold_tables`` of the usable rows, already fitted (else fitted here)."""
    usable = [r for r in rows if skip_reason(r, accelerators) is None]
    if tables is None:
        tables = fold_tables(usable, accelerators)
    by_id = {r["id"]: r for r in rows}
    fold_pairs = {doc: calibrated_pairs([r for r in usable if document(r) != doc])
                  for doc in {document(r) for r in rows}}

    def calibrated(row_id: str) -> bool:
        row = by_id[row_id]
        engine = ENGINES.get(row["engine"], s.Engine.UNKNOWN)
        return (engine, row["accelerator"]) in fold_pairs[document(row)]

    out: list[Residual] = []
    for x in leave_one_source_out(usable, accelerators, tables=tables):
        regime = BandRegime(engine=x.engine, moe=is_moe(by_id[x.row_id]), open_loop=False,
                            legacy=is_legacy(by_id[x.row_id]))
        for metric, ratio in (("output_tokens_per_s", _ratios(x.measured, x.predicted)),
                              ("ttft_s", _ratios(x.measured_ttft_s, x.predicted_ttft_s)),
                              ("tpot_s", _ratios(x.measured_tpot_s, x.predicted_tpot_s))):
            if ratio is not None:
                out.append(Residual(x.row_id, x.document, regime, metric, ratio,
                                    calibrated(x.row_id)))
    fitted = fit(usable, accelerators)
    open_rows = [r for r in rows if is_open_loop(r) and open_loop_skip_reason(r, accelerators)
                 is None]
    for y in open_loop_leave_one_source_out(open_rows, tables, fitted, accelerators):
        if y.saturated:
            continue  # no steady state to compare (the answer says so, coded saturated)
        regime = BandRegime(engine=y.engine, moe=is_moe(by_id[y.row_id]), open_loop=True,
                            legacy=is_legacy(by_id[y.row_id]))
        for metric, ratio in (("ttft_s", _ratios(y.measured_ttft_s, y.predicted_ttft_s)),
                              ("tpot_s", _ratios(y.measured_tpot_s, y.predicted_tpot_s))):
            if ratio is not None:
                out.append(Residual(y.row_id, y.document, regime, metric, ratio,
                                    calibrated(y.row_id)))
    return out


def _quantiles(values: Sequence[float], quantiles: tuple[float, float]) -> tuple[float, float]:
    """Linear-interpolated quantiles of ``values`` (numpy's default, 'linear')."""
    ordered = sorted(values)

    def at(q: float) -> float:
        position = q * (len(ordered) - 1)
        below = int(position)
        above = min(below + 1, len(ordered) - 1)
        return ordered[below] + (ordered[above] - ordered[below]) * (position - below)

    low, high = at(quantiles[0]), at(quantiles[1])
    return round(low, 4), round(high, 4)


def band_table(found: Sequence[Residual]) -> tuple[
        dict[BandRegime, dict[str, tuple[float, float]]], dict[str, tuple[float, float]]]:
    """(per regime and metric with at least ``BAND_MIN_ROWS`` rows of calibrated pairs, the
    10th-90th percentile of measured / model; per metric, the wide 5th-95th percentile over
    every row pooled, calibrated or not). A legacy regime (``BandRegime.legacy``) has no
    band of its own here: it answers with the wide band, widened for its rows
    (``widened_bands``)."""
    grouped: dict[BandRegime, dict[str, list[float]]] = {}
    pooled: dict[str, list[float]] = {}
    for x in found:
        if x.calibrated and not x.regime.legacy:
            grouped.setdefault(x.regime, {}).setdefault(x.metric, []).append(x.ratio)
        pooled.setdefault(x.metric, []).append(x.ratio)
    table = {regime: {m: _quantiles(v, BAND_QUANTILES) for m, v in sorted(metrics.items())
                      if len(v) >= BAND_MIN_ROWS}
             for regime, metrics in grouped.items()}
    table = {k: v for k, v in sorted(table.items(), key=lambda kv: str(kv[0])) if v}
    wide = {m: _quantiles(v, WIDE_QUANTILES) for m, v in sorted(pooled.items())}
    return table, wide


def band_of(regime: BandRegime, metric: str,
            table: Mapping[BandRegime, Mapping[str, tuple[float, float]]],
            wide: Mapping[str, tuple[float, float]], calibrated: bool = True,
            ) -> tuple[float, float]:
    """The band a regime's metric answers with: its own on a calibrated pair, else the wide
    one."""
    own = table.get(regime, {}).get(metric) if calibrated else None
    return own if own is not None else wide[metric]


def coverage(found: Sequence[Residual], *, held_out_bands: bool) -> dict[
        tuple[BandRegime, str], tuple[int, int]]:
    """(regime, metric) -> (rows inside the band, rows). ``held_out_bands``: each row judged
    by the band fitted without its document (the honest, out-of-sample coverage); else by
    the band fitted on every row. The raw 10th-90th percentile band, not widened."""
    inside: Counter[tuple[BandRegime, str]] = Counter()
    total: Counter[tuple[BandRegime, str]] = Counter()
    bands: dict[str | None, tuple[dict[BandRegime, dict[str, tuple[float, float]]],
                                  dict[str, tuple[float, float]]]] = {None: band_table(found)}
    if held_out_bands:
        for doc in {x.document for x in found}:
            bands[doc] = band_table([x for x in found if x.document != doc])
    for x in found:
        table, wide = bands[x.document if held_out_bands else None]
        if x.metric not in wide:
            continue  # the metric has no other document's row: no band to judge it by
        low, high = band_of(x.regime, x.metric, table, wide, x.calibrated)
        total[(x.regime, x.metric)] += 1
        inside[(x.regime, x.metric)] += low <= x.ratio <= high
    return {key: (inside[key], n) for key, n in total.items()}


# -- the band as shipped: widened until it holds on documents left out ------------------------

WIDEN_FACTORS = (1.0, 1.1, 1.25, 1.5, 2.0, 3.0)
"""The factors a band is widened by (low / f, high x f), smallest first, until it holds
``BAND_TARGET`` of the rows of documents left out of it (decision 396)."""
BAND_TARGET = 0.80
WIDE = "wide"
"""The key of the wide band's entry in ``widened_bands``' coverage (every row pooled)."""


BandEntry = s.BandEntry


def _judged(found: Sequence[Residual], key: tuple[BandRegime, str] | str) -> list[Residual]:
    """The rows a band judges: a regime's metric on calibrated pairs, or (``WIDE`` + metric)
    every row that answers with the wide band (an uncalibrated pair, or a regime-metric with
    no band of its own in its fold is judged in ``_nested_inside``)."""
    if isinstance(key, str):
        return [x for x in found if x.metric == key]
    regime, metric = key
    return [x for x in found if x.regime == regime and x.metric == metric and x.calibrated]


def widened_bands(found: Sequence[Residual]) -> tuple[
        dict[BandRegime, dict[str, BandEntry]], dict[str, BandEntry]]:
    """The bands as shipped: each regime-metric band of ``band_table(found)`` (and each wide
    band) widened by the smallest factor of ``WIDEN_FACTORS`` at which at least
    ``BAND_TARGET`` of its rows lie inside the band computed without their own document and
    widened by that factor (the largest factor, ``held`` False, when none does). A legacy
    regime's metric with at least ``BAND_MIN_ROWS`` rows (``serving.SERVING_LEGACY_BAND``)
    is the wide band widened the same way, judged on that regime's rows alone (each by the
    wide band computed without its document): the wide band, made to hold on the earlier
    core's rows (decision: engine-version regime)."""
    table, wide = band_table(found)
    docs = sorted({x.document for x in found})
    without = {d: band_table([x for x in found if x.document != d]) for d in docs}
    entry = _widened

    shipped: dict[BandRegime, dict[str, BandEntry]] = {}
    for regime, metrics in table.items():
        for metric, (low, high) in metrics.items():
            def own_regime(x: Residual, regime: BandRegime = regime,
                           metric: str = metric) -> tuple[float, float] | None:
                t, w = without[x.document]
                return band_of(regime, metric, t, w) if metric in w else None
            shipped.setdefault(regime, {})[metric] = entry(
                low, high, _judged(found, (regime, metric)), own_regime)
    shipped_wide: dict[str, BandEntry] = {}
    for metric, (low, high) in wide.items():
        def own_wide(x: Residual, metric: str = metric) -> tuple[float, float] | None:
            w = without[x.document][1]
            return w.get(metric)
        shipped_wide[metric] = entry(low, high, _judged(found, metric), own_wide)
    legacy: dict[BandRegime, dict[str, list[Residual]]] = {}
    for x in found:
        if x.regime.legacy:
            legacy.setdefault(x.regime, {}).setdefault(x.metric, []).append(x)
    for regime, by_metric in sorted(legacy.items(), key=lambda kv: str(kv[0])):
        for metric, judged in sorted(by_metric.items()):
            if len(judged) >= BAND_MIN_ROWS and metric in wide:
                def own_legacy(x: Residual, metric: str = metric) -> tuple[float, float] | None:
                    return without[x.document][1].get(metric)
                shipped.setdefault(regime, {})[metric] = entry(*wide[metric], judged,
                                                               own_legacy)
    return shipped, shipped_wide


def _widened(low: float, high: float, judged: Sequence[Residual],
             own: Callable[[Residual], tuple[float, float] | None]) -> BandEntry:
    """The band (``low``, ``high``) widened by the smallest factor of ``WIDEN_FACTORS`` at
    which at least ``BAND_TARGET`` of the ``judged`` rows lie inside ``own(x)`` (the band
    computed without the row's document; None: the row is not judged) widened by that
    factor; the largest factor, ``held`` False, when none does."""
    last = None
    for factor in WIDEN_FACTORS:
        inside = n = 0
        for x in judged:
            band = own(x)
            if band is None:
                continue
            n += 1
            inside += band[0] / factor <= x.ratio <= band[1] * factor
        last = BandEntry(round(low / factor, 4), round(high * factor, 4), factor, inside,
                         n, n > 0 and inside >= BAND_TARGET * n)
        if last.held:
            return last
    assert last is not None
    return last


def shipped_band_of(x: Residual, shipped: Mapping[BandRegime, Mapping[str, BandEntry]],
                    wide: Mapping[str, BandEntry]) -> BandEntry | None:
    """The shipped band a row's answer carries: its regime's on a calibrated pair (a legacy
    regime's on any pair), else the wide one (None: the metric has no band)."""
    own = (shipped.get(x.regime, {}).get(x.metric) if x.calibrated or x.regime.legacy
           else None)
    return own if own is not None else wide.get(x.metric)


def nested_coverage(found: Sequence[Residual]) -> tuple[
        dict[tuple[BandRegime, str], tuple[int, int]], list[tuple[Residual, BandEntry]]]:
    """The promise on a document we hold no row of: each document's rows judged by the bands
    ``widened_bands`` ships when fitted and widened without that document (both the band and
    its factor are out of sample). (regime, metric) -> (inside, rows), and the rows outside
    with the band that judged them."""
    inside: Counter[tuple[BandRegime, str]] = Counter()
    total: Counter[tuple[BandRegime, str]] = Counter()
    outside: list[tuple[Residual, BandEntry]] = []
    for doc in sorted({x.document for x in found}):
        shipped, wide = widened_bands([x for x in found if x.document != doc])
        for x in (y for y in found if y.document == doc):
            band = shipped_band_of(x, shipped, wide)
            if band is None:
                continue
            total[(x.regime, x.metric)] += 1
            if band.low <= x.ratio <= band.high:
                inside[(x.regime, x.metric)] += 1
            else:
                outside.append((x, band))
    return {key: (inside[key], n) for key, n in total.items()}, outside


def _row_traffic(row: Row, prompt: s.Lengths, output: s.Lengths) -> s.Traffic:
    """The traffic a row states: at its request rate when it ran open loop, else its fixed
    batch or its concurrency."""
    if is_open_loop(row):
        return s.Traffic(mode=s.TrafficMode.ONLINE, prompt=prompt, output=output,
                         requests_per_s=float(row["requests_per_s"]))
    if row["batch_size"]:
        return s.Traffic(mode=s.TrafficMode.FIXED_BATCH, prompt=prompt, output=output,
                         batch_size=int(row["batch_size"]))
    return s.Traffic(mode=s.TrafficMode.ONLINE, prompt=prompt, output=output,
                     concurrency=int(row["concurrency"]))


def unwarned_outside(rows: Sequence[Row], accelerators: Mapping[str, AcceleratorSpec],
                     found: Sequence[Residual]) -> tuple[list[tuple[Residual, BandEntry]],
                                                         int]:
    """The rows outside their out-of-sample shipped band (``nested_coverage``) whose answer
    carries no coded warning, as their fold would answer them: the pairs and validated range
    fitted without their document (``validation_warnings``: ``uncalibrated_engine``,
    ``outside_validated_range``), or a band that did not hold in that fold (the answer's
    ``outside_validated_range`` on the band). The closed-loop batch judged is the one asked
    for (a concurrency or a batch), before the engine's limit. Returns them and the count of
    rows outside."""
    _, outside = nested_coverage(found)
    usable = [r for r in rows if skip_reason(r, accelerators) is None]
    by_id = {r["id"]: r for r in rows}
    unwarned = []
    for x, band in outside:
        if not band.held:
            continue
        row = by_id[x.row_id]
        rest = [r for r in usable if document(r) != x.document]
        model, deployment, prompt, output = _setup(row, accelerators)
        traffic = _row_traffic(row, prompt, output)
        batch = float(row["batch_size"] or row["concurrency"] or 0)
        if not s.validation_warnings(model, deployment, traffic, batch,
                                     pairs=calibrated_pairs(rest),
                                     validated=validated_range(rest)):
            unwarned.append((x, band))
    return unwarned, len(outside)


def print_band(rows: Sequence[Row], accelerators: Mapping[str, AcceleratorSpec]) -> None:
    """``--band``: the shipped bands as ``serving.SERVING_BAND`` and ``SERVING_WIDE_BAND``
    hold them, and their coverage: in sample, with each document judged by the raw band
    fitted without it, and with each document judged by the shipped band (widened too)
    fitted without it."""
    found = residuals(rows, accelerators)
    shipped, wide = widened_bands(found)
    for name, legacy in (("SERVING_BAND", False), ("SERVING_LEGACY_BAND", True)):
        print(f"{name} = MappingProxyType({{")
        for regime, metrics in shipped.items():
            if regime.legacy is not legacy:
                continue
            print(f"    (Engine.{regime.engine.name}, {regime.moe}, {regime.open_loop}): "
                  "MappingProxyType({")
            for metric, e in metrics.items():
                print(f"        {metric!r}: {e!r},")
            print("    }),")
        print("})")
    print("SERVING_WIDE_BAND = MappingProxyType({")
    for metric, e in wide.items():
        print(f"    {metric!r}: {e!r},")
    print("})")
    ins, outs = coverage(found, held_out_bands=False), coverage(found, held_out_bands=True)
    nested, _ = nested_coverage(found)
    print("\ncoverage: regime, metric: in sample (raw) | each document by the raw band "
          "without it | each document by the shipped band without it")
    for key in sorted(ins, key=str):
        (a, n), (b, m), (c, k) = ins[key], outs.get(key, (0, 0)), nested.get(key, (0, 0))
        print(f"  {key[0]!s:55s} {key[1]:20s} {a:3d}/{n:<3d} {a / n:6.1%} | "
              f"{b:3d}/{m:<3d} {b / m if m else 0:6.1%} | {c:3d}/{k:<3d} "
              f"{c / k if k else 0:6.1%}")
    print_by_version(rows, found)
    unwarned, out_count = unwarned_outside(rows, accelerators, found)
    print(f"\nrows outside the shipped band fitted without their document: {out_count}; "
          f"without a coded warning: {len(unwarned)}")
    for x, band in unwarned:
        print(f"  {x.row_id:44s} {x.metric:20s} ratio {x.ratio:7.3f} band "
              f"[{band.low:.3f}, {band.high:.3f}]")


def print_by_version(rows: Sequence[Row], found: Sequence[Residual]) -> None:
    """The out-of-sample ratios measured / model of output tokens/s of the dense closed-loop
    rows of each named engine, by engine core (``is_legacy``) and ``engine_version``: the
    evidence of ``serving.LEGACY_CORE_EVIDENCE``."""
    by_id = {r["id"]: r for r in rows}
    groups: dict[tuple[str, bool], dict[str, list[float]]] = {}
    for x in found:
        if x.metric != "output_tokens_per_s" or x.regime.moe or x.regime.open_loop:
            continue
        row = by_id[x.row_id]
        if row["engine"] not in ENGINES:
            continue
        groups.setdefault((row["engine"], x.regime.legacy), {}).setdefault(
            row["engine_version"] or "(not stated)", []).append(x.ratio)
    print("\nby engine core: dense closed-loop output tokens/s, measured / model out of "
          "sample, by engine_version")
    for (engine, legacy), versions in sorted(groups.items()):
        ratios = [r for v in versions.values() for r in v]
        print(f"  {engine} {'earlier core' if legacy else 'later core'}: {len(ratios)} rows, "
              f"{min(ratios):.3f}-{max(ratios):.3f} (median {statistics.median(ratios):.3f})")
        for version, values in sorted(versions.items()):
            print(f"    {version:32s} {len(values):3d} rows {min(values):.3f}-"
                  f"{max(values):.3f} (median {statistics.median(values):.3f})")


def load() -> list[Row]:
    with DATA.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def main() -> int:
    rows = load()
    accelerators = seed_accelerators()  # read once, not per row
    skipped = Counter(r for r in (skip_reason(x, accelerators) for x in rows) if r)
    usable = [r for r in rows if skip_reason(r, accelerators) is None]
    before = predict(usable, {**s.ENGINE_PRIORS}, accelerators)
    table = fit(usable, accelerators)
    inside = predict(usable, table, accelerators)
    tables = fold_tables(usable, accelerators)
    loso = leave_one_source_out(usable, accelerators, tables=tables)

    print("fitted table (in sample):")
    for engine, eff in table.items():
        print(f"  {engine:8s} hbm {eff.hbm_fraction:.2f} compute {eff.compute_fraction:.2f} "
              f"overhead {eff.step_overhead_s * 1e3:.1f} ms  ({eff.basis})")
    print(f"\n{'row':40s} {'measured':>9s} {'prior':>7s} {'in':>7s} {'LOSO':>7s}"
          f" {'TPOT in':>8s} {'TPOT LOSO':>9s}")
    for b, i, o in zip(before, inside, loso, strict=True):
        tpot_in = f"{i.tpot_error:+8.1%}" if i.tpot_error is not None else f"{'':8s}"
        tpot_lo = f"{o.tpot_error:+9.1%}" if o.tpot_error is not None else ""
        print(f"{i.row_id[:40]:40s} {i.measured:9.1f} {b.error:+7.1%} {i.error:+7.1%} "
              f"{o.error:+7.1%} {tpot_in} {tpot_lo}")
    print(f"\n{len(usable)} rows from {len({document(r) for r in usable})} documents "
          f"evaluated; {len(rows) - len(usable)} not: {dict(skipped)}")
    print("\noutput tokens/s at a fixed concurrency, |error|:")
    print(f"  before (priors)       {Summary.of([r.error for r in before])}")
    print(f"  in sample             {Summary.of([r.error for r in inside])}")
    print(f"  leave one source out  {Summary.of([r.error for r in loso])}")
    print("TPOT (p50 model vs published median/mean ITL), |error|:")
    for name, results in (("before (priors)", before), ("in sample", inside),
                          ("leave one source out", loso)):
        tpots = [r.tpot_error for r in results if r.tpot_error is not None]
        print(f"  {name:21s} {Summary.of(tpots)}")
    moe = {r["id"] for r in usable if is_moe(r)}
    for label, keep in (("dense models", False), ("MoE models (fit nothing)", True)):
        print(f"{label}, |error|: output tokens/s | TPOT")
        for name, results in (("in sample", inside), ("leave one source out", loso)):
            mine = [r for r in results if (r.row_id in moe) is keep]
            tpots = [r.tpot_error for r in mine if r.tpot_error is not None]
            print(f"  {name:21s} {Summary.of([r.error for r in mine])} | {Summary.of(tpots)}")
    print("per document (throughput), in sample | LOSO:")
    for doc in sorted({r.document for r in inside}):
        ins = [r.error for r in inside if r.document == doc]
        out = [r.error for r in loso if r.document == doc]
        print(f"  {doc[:60]:60s}\n    {Summary.of(ins)} | {Summary.of(out)}")
    print_sizing(usable, table, tables, accelerators)
    print_open_loop(rows, table, tables, accelerators)
    return 0


def _replicas_text(qps: float, per_replica: float) -> str:
    count = SizingResult.replicas(qps, per_replica)
    return "none" if count is None else str(count)


def print_sizing(usable: Sequence[Row], table: Table, tables: Mapping[str, Table],
                 accelerators: Mapping[str, AcceleratorSpec]) -> None:
    """The sizing figures: per SLO level, then summaries for each SLO kind."""
    good, bad = sweeps(usable)
    print("\nsizing: requests/s per replica at an SLO set at each published point's own "
          "p50 latencies (closed-loop sweeps)")
    for sweep, reason in bad:
        print(f"  not evaluable: {document(sweep.rows[0])[:40]}, {sweep.label}: {reason}")
    if not good:
        print("  no evaluable sweep")
        return
    for sweep in good:
        print(f"  sweep: {sweep.document[:60]}\n    {sweep.label}, concurrency "
              f"{', '.join(r['concurrency'] for r in sweep.rows)}")
    moe_sweeps = {w.label for w in good if is_moe(w.rows[0])}
    for kind in SLO_KINDS:
        before = predict_sizing(good, {**s.ENGINE_PRIORS}, accelerators, kind)
        inside = predict_sizing(good, table, accelerators, kind)
        loso = sizing_leave_one_source_out(good, tables, accelerators, kind)
        name = " and ".join(f"{m.upper()} p50" for m in kind)
        print(f"\n  SLO: {name} <= the point's; requests/s per replica at it"
              f"{' (the figure quoted)' if kind == SLO_KINDS[0] else ' (diagnostic)'}")
        print(f"  {'SLO set at':38s} {'TTFT s':>7s} {'TPOT ms':>7s} {'meas':>6s} "
              f"{'in':>6s} {'c in':>5s} {'in':>7s} {'LOSO':>7s} "
              f" replicas @ {EXAMPLE_QPS:g}/s meas|in|LOSO")
        for i, o in zip(inside, loso, strict=True):
            ttft = "" if i.slo.ttft_p50_s is None else f"{i.slo.ttft_p50_s:7.3f}"
            tpot = "" if i.slo.tpot_p50_s is None else f"{i.slo.tpot_p50_s * 1e3:7.2f}"
            reps = " | ".join(_replicas_text(EXAMPLE_QPS, x) for x in (
                i.measured, i.predicted, o.predicted))
            print(f"  {i.level[:38]:38s} {ttft:>7s} {tpot:>7s} {i.measured:6.3f} "
                  f"{i.predicted:6.3f} {i.predicted_concurrency:5d} {i.error:+7.1%} "
                  f"{o.error:+7.1%}  {reps}")
        for label, results in (("before (priors)", before), ("in sample", inside),
                               ("leave one source out", loso)):
            missed = sum(1 for r in results if r.predicted == 0)
            print(f"    {label:21s} {Summary.of([r.error for r in results])}"
                  f"{f'; {missed} SLO met by no load in the model' if missed else ''}")
            for name, keep in (("dense", False), ("MoE", True)):
                mine = [r for r in results if (r.sweep in moe_sweeps) is keep]
                if mine and len(mine) < len(results):
                    print(f"      {name:19s} {Summary.of([r.error for r in mine])}")


def _pct(x: float | None, width: int) -> str:
    return f"{x:+{width}.1%}" if x is not None else " " * width


def _ms(x: float | None, width: int) -> str:
    return f"{x * 1e3:{width}.1f}" if x is not None else " " * width


def print_open_loop(rows: Sequence[Row], table: Table, tables: Mapping[str, Table],
                    accelerators: Mapping[str, AcceleratorSpec]) -> None:
    """The open-loop latency figures: per row, then summaries of the rows the model can
    serve (in sample and LOSO, TTFT and TPOT, all and per document)."""
    candidates = [r for r in rows if is_open_loop(r)]
    skipped = [open_loop_skip_reason(r, accelerators) for r in candidates]
    reasons = Counter(x for x in skipped if x)
    good = [r for r, why in zip(candidates, skipped, strict=True) if why is None]
    print("\nopen-loop latency: serve() online at the published request rate, one replica; "
          "p50 against the published p50 column (median, or mean where noted); these rows "
          "fit nothing")
    print(f"  {len(good)} open-loop rows evaluated; {len(candidates) - len(good)} not: "
          f"{dict(reasons)}")
    if not good:
        return
    inside = predict_open_loop(good, table, accelerators)
    loso = open_loop_leave_one_source_out(good, tables, table, accelerators)
    print(f"  {'row':44s} {'req/s':>5s} {'cap':>5s} {'batch':>6s} {'TTFT ms':>8s} "
          f"{'model':>8s} {'in':>7s} {'LOSO':>7s} {'TPOT ms':>7s} {'model':>6s} "
          f"{'in':>7s} {'LOSO':>7s}")
    pairs = list(zip(inside, loso, strict=True))
    unstable = [(i, o) for i, o in pairs if i.saturated or o.saturated]
    stable = {i.row_id for i, o in pairs if not (i.saturated or o.saturated)}
    for i, o in pairs:
        if i.row_id not in stable:
            continue
        print(f"  {i.row_id[:44]:44s} {i.requests_per_s:5.2g} "
              f"{i.capacity_requests_per_s:5.2f} {i.batch:6.1f} {_ms(i.measured_ttft_s, 8)} "
              f"{_ms(i.predicted_ttft_s, 8)} {_pct(i.ttft_error, 7)} {_pct(o.ttft_error, 7)} "
              f"{_ms(i.measured_tpot_s, 7)} {_ms(i.predicted_tpot_s, 6)} "
              f"{_pct(i.tpot_error, 7)} {_pct(o.tpot_error, 7)}")
    if unstable:
        print("  the model's replica saturates at the rate (unstable queue; not in the "
              "summaries):")
        for i, o in unstable:
            print(f"    {i.row_id[:44]:44s} {i.requests_per_s:5.2g} req/s > capacity "
                  f"{i.capacity_requests_per_s:.2f} in sample, {o.capacity_requests_per_s:.2f}"
                  f" LOSO; published TTFT {_ms(i.measured_ttft_s, 0).strip()} ms, "
                  f"TPOT {_ms(i.measured_tpot_s, 0).strip()} ms")
    for metric in ("ttft", "tpot"):
        print(f"  {metric.upper()} p50, |error| (rows the model serves):")
        for name, results in (("in sample", inside), ("leave one source out", loso)):
            errors = [e for r in results if r.row_id in stable
                      if (e := getattr(r, f"{metric}_error")) is not None]
            print(f"    {name:21s} {Summary.of(errors) if errors else 'no row'}")
        for doc in sorted({r.document for r in inside if r.row_id in stable}):
            errors_by = [[e for r in results if r.row_id in stable and r.document == doc
                          if (e := getattr(r, f"{metric}_error")) is not None]
                         for results in (inside, loso)]
            print(f"    {doc[:70]}\n      " + " | ".join(
                str(Summary.of(e)) if e else "no row" for e in errors_by))


def print_legacy_regimes(rows: Sequence[Row],
                         accelerators: Mapping[str, AcceleratorSpec]) -> None:
    """``--legacy``: each dense fixed-batch or closed-loop row of an earlier engine core
    (``is_legacy``: vLLM before 0.8), its regime (batch, prompt and output lengths, and the
    tokens the batch holds at its end, batch x (prompt + output)) and the model's figures
    with the shipped table (no fit holds these rows: every V0 document is held out) beside
    the published ones. ``step`` is batch / output tokens/s: a fixed batch's time per
    decode step when its prefill is a small share of the run (the published TPOT where the
    row states one), against the model's decode step at that batch. A diagnostic of where
    the earlier core departs from the model (docs/serving.md, "What the V0 rows say"),
    fitted to nothing."""
    print(f"{'row':44s} {'batch':>5s} {'prompt':>7s} {'out':>5s} {'tokens':>7s} "
          f"{'meas/s':>8s} {'model/s':>8s} {'ratio':>5s} | {'step ms':>7s} {'model':>6s} "
          f"| {'TTFT s':>7s} {'model':>6s} | {'TPOT ms':>7s} {'model':>6s}")
    for row in rows:
        if (skip_reason(row, accelerators) is not None or is_open_loop(row) or is_moe(row)
                or not is_legacy(row)):
            continue
        model, deployment, prompt, output = _setup(row, accelerators)
        traffic = _row_traffic(row, prompt, output)
        estimate = s.serve(model, deployment, traffic)
        batch = float(row["batch_size"] or row["concurrency"])
        measured = float(row["measured_output_tokens_per_s"])
        tokens = batch * (prompt.mean + output.mean)
        ttft, tpot = _stated(row, "ttft"), _stated(row, "tpot")
        print(f"{row['id'][:44]:44s} {batch:5.0f} {prompt.mean:7.0f} {output.mean:5.0f} "
              f"{tokens:7.0f} {measured:8.1f} {estimate.output_tokens_per_s:8.1f} "
              f"{measured / estimate.output_tokens_per_s:5.2f} | "
              f"{batch / measured * 1e3:7.1f} {estimate.decode_step_s * 1e3:6.1f} | "
              f"{'' if ttft is None else f'{ttft:7.2f}':>7s} {estimate.ttft_s.p50:6.2f} | "
              f"{'' if tpot is None else f'{tpot * 1e3:7.1f}':>7s} "
              f"{estimate.tpot_s.p50 * 1e3:6.1f}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--band"]:
        print_band(load(), seed_accelerators())
        sys.exit(0)
    if sys.argv[1:] == ["--legacy"]:
        print_legacy_regimes(load(), seed_accelerators())
        sys.exit(0)
    sys.exit(main())
