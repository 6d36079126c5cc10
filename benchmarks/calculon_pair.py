"""One estimate in process against Calculon's, paired in one run (issue 38: "per estimate in
process >= 30x faster than Calculon").

Calculon (Isaev et al., SC'23, "Calculon: a methodology and tool for high-level co-design of
systems and large language models"; github.com/calculon-ai/calculon, formerly NVIDIA/calculon)
is an analytical LLM training performance model in Python, like ``service.core.estimate``. It
is not a dependency: give its source tree as the argument or ``CALCULON_PATH``.

Both sides estimate the same run, alternated call by call so machine noise (2 shared cores
here) falls on both alike:

- ``gpt3-175b``: GPT-3 175B (96 layers, hidden 12,288, FFN 49,152, 96 heads, sequence 2,048)
  on 64 A100 80GB, TP 8 × PP 8 with 3 virtual stages, micro-batch 1, batch 64, sequence
  parallelism with selective recomputation: Calculon's own validation case (Korthikanti et al.
  2022, "Reducing activation recomputation in large transformer models", Table 5, measured
  13.75 s per iteration), ``models/gpt3-175B.json``, ``validation/seqsel/tab5/
  gpt3-175B_seqsel.json``, ``systems/a100_80e.json``; ours the ``gpt3-175b`` preset with the
  same layout.
- ``70b-class``: a Llama-70B-class shape (80 layers, hidden 8,192, FFN 28,672, 64 heads,
  sequence 4,096) on 512 H100 (``systems/h100_80g_nvl8.json``), TP 8 × PP 4 × DP 16, batch
  1,024, selective recomputation; ours ``llama3.1-70b`` (GQA and SwiGLU, which Calculon does
  not model: the same size class, not the same model).

A Calculon estimate is what its ``llm`` command does after reading the three JSON files:
``Llm.Application``, ``Llm.Execution.from_json``, ``System``, ``Llm(...)``, ``compile``,
``run`` (the objects are rebuilt each call: compiling mutates them). Ours is
``service.core.estimate.estimate`` on the four spec objects the API builds from a request.
Calculon's ``__init__`` imports pandas and psutil for its optimiser commands only; when they are
missing, empty placeholder modules stand in (the single calculation never touches them).

    python -m benchmarks.calculon_pair /tmp/calculon [--rounds 200] [--json out.json]

Prints each case's median per estimate on both sides and the ratio (Calculon ÷ ours) of the
medians, with the spread of the per-round ratios (p10-p90).
"""

from __future__ import annotations

import argparse
import copy
import gc
import importlib
import json
import logging
import os
import statistics
import sys
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.catalog.mapping import accelerator_to_spec
from service.catalog.seed_data import accelerator_seeds
from service.core.estimate import estimate
from service.core.presets import get_preset
from service.core.specs import (
    ClusterSpec,
    ParallelismPlan,
    Precision,
    RecomputeMode,
    TrainingSpec,
)

TARGET_RATIO = 30.0
"""Issue 38: one estimate in process at least 30× faster than Calculon's."""


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    calculon_app: str | dict[str, Any]
    """A file under Calculon's ``models/``, or the application JSON itself."""
    calculon_exe: str | dict[str, Any]
    """A file under Calculon's tree, or the execution JSON itself."""
    calculon_system: str
    published_step_s: float | None
    preset: str
    accelerator: str
    plan: ParallelismPlan
    training: TrainingSpec


def _exe(**values: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "tensor_par_net": 0, "pipeline_par_net": 1, "data_par_net": 1, "datatype": "float16",
        "fused_activation": True, "attention_type": "multihead", "pipeline_interleaving": 1,
        "optimizer_sharding": True, "tensor_par_comm_type": "rs_ag",
        "tensor_par_overlap": "none", "seq_par_ag_redo": False, "data_par_overlap": False,
        "weight_offload": False, "activations_offload": False, "optimizer_offload": False,
        "training": True}
    base.update(values)
    return base


CASES = (
    Case(
        name="gpt3-175b", calculon_app="gpt3-175B.json",
        calculon_exe="validation/seqsel/tab5/gpt3-175B_seqsel.json",
        calculon_system="a100_80e.json", published_step_s=13.75, preset="gpt3-175b",
        accelerator="a100-sxm4-80gb",
        plan=ParallelismPlan(tp=8, pp=8, dp=1, vp=3, micro_batch=1, sequence_parallel=True,
                             zero_stage=0, recompute=RecomputeMode.SELECTIVE),
        training=TrainingSpec(seq_len=2048, global_batch_seqs=64, tokens=300e9,
                              precision=Precision.FP16)),
    Case(
        name="70b-class",
        calculon_app={"hidden": 8192, "feedforward": 28672, "seq_size": 4096,
                      "attn_heads": 64, "attn_size": 128, "num_blocks": 80},
        calculon_exe=_exe(num_procs=512, tensor_par=8, pipeline_par=4, data_par=16,
                          batch_size=1024, microbatch_size=1, activation_recompute="attn_only"),
        calculon_system="h100_80g_nvl8.json", published_step_s=None, preset="llama3.1-70b",
        accelerator="h100-sxm5-80gb",
        plan=ParallelismPlan(tp=8, pp=4, dp=16, micro_batch=1, sequence_parallel=True,
                             zero_stage=1, recompute=RecomputeMode.SELECTIVE),
        training=TrainingSpec(seq_len=4096, global_batch_seqs=1024, tokens=2e12,
                              precision=Precision.BF16)),
)


def import_calculon(path: Path) -> Any:
    """Calculon's package from its source tree (placeholders for its optimiser-only
    dependencies when they are not installed)."""
    if not (path / "calculon" / "llm" / "llm.py").is_file():
        raise SystemExit(f"calculon_pair: no Calculon source tree at {path} (want "
                         "calculon/llm/llm.py there). Get it with: git clone "
                         "https://github.com/calculon-ai/calculon (formerly NVIDIA/calculon), "
                         "then pass its path or set CALCULON_PATH.")
    for name in ("pandas", "psutil"):
        try:
            __import__(name)
        except ImportError:
            sys.modules[name] = types.ModuleType(name)
    sys.path.insert(0, str(path))
    return importlib.import_module("calculon")  # the path is only known at run time


def _calculon_call(calculon: Any, path: Path, case: Case) -> Callable[[], float]:
    """One Calculon estimate of ``case`` as a call; returns its sample time per step, s."""
    llm = importlib.import_module("calculon.llm").Llm

    app_json = (case.calculon_app if isinstance(case.calculon_app, Mapping) else
                calculon.io.read_json_file(str(path / "models" / case.calculon_app)))
    exe_json = (case.calculon_exe if isinstance(case.calculon_exe, Mapping) else
                calculon.io.read_json_file(str(path / case.calculon_exe)))
    sys_json = calculon.io.read_json_file(str(path / "systems" / case.calculon_system))
    log = logging.getLogger("calculon_pair")
    log.setLevel(logging.ERROR)

    def call() -> float:
        app = llm.Application(copy.deepcopy(app_json))
        exe = llm.Execution.from_json(copy.deepcopy(exe_json))
        syst = calculon.System(copy.deepcopy(sys_json))
        model = llm(app, log)
        model.compile(syst, exe)
        model.run(syst)
        return float(model.get_total_time())

    return call


def _our_call(case: Case) -> Callable[[], float]:
    seed = next(s for s in accelerator_seeds() if s.id == case.accelerator)
    gpus = case.plan.tp * case.plan.pp * case.plan.dp * case.plan.cp
    model = get_preset(case.preset).model
    cluster = ClusterSpec(accelerator=accelerator_to_spec(seed), num_gpus=gpus,
                          gpus_per_node=8)

    def call() -> float:
        return float(estimate(model, cluster, case.plan, case.training).throughput.step.step_s)

    return call


CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.thread_time, "wall": time.perf_counter}
"""``cpu``: the calling thread's CPU time (default: a shared machine's other load, which
preempts either side at random, is not counted); ``wall``: elapsed time."""


def _timed(call: Callable[[], float], clock: Callable[[], float], calls: int) -> float:
    """The mean time of ``calls`` consecutive calls."""
    start = clock()
    for _ in range(calls):
        call()
    return (clock() - start) / calls


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def pair(case: Case, calculon: Any, path: Path, *, rounds: int, block: int, warmup: int,
         clock_name: str = "cpu") -> dict[str, Any]:
    """``rounds`` pairs of blocks of ``block`` consecutive estimates, Calculon's and ours
    alternated in one run (the order swapped every round); a block of 1 is call by call."""
    clock = CLOCKS[clock_name]
    theirs, ours = _calculon_call(calculon, path, case), _our_call(case)
    their_step, our_step = theirs(), ours()  # each side's answer, and a first warm-up
    for _ in range(warmup):
        theirs()
        ours()
    gc.collect()
    their_s: list[float] = []
    our_s: list[float] = []
    for i in range(rounds):
        if i % 2:
            our_s.append(_timed(ours, clock, block))
            their_s.append(_timed(theirs, clock, block))
        else:
            their_s.append(_timed(theirs, clock, block))
            our_s.append(_timed(ours, clock, block))
    ratios = [t / o for t, o in zip(their_s, our_s, strict=True)]
    their_median, our_median = statistics.median(their_s), statistics.median(our_s)
    return {
        "case": case.name, "rounds": rounds, "block": block, "clock": clock_name,
        "calculon_median_ms": their_median * 1e3, "ours_median_ms": our_median * 1e3,
        "ratio_of_medians": their_median / our_median,
        "ratio_p10": _percentile(ratios, 0.10), "ratio_p90": _percentile(ratios, 0.90),
        "calculon_step_s": their_step, "ours_step_s": our_step,
        "published_step_s": case.published_step_s,
    }


def _print(title: str, results: list[dict[str, Any]]) -> None:
    print(title)
    print(f"  {'case':<10} {'Calculon ms':>11} {'ours ms':>8} {'ratio':>7} {'p10-p90':>12}  "
          "step s: Calculon, ours (published)")
    for r in results:
        published = r["published_step_s"]
        spread = f"{r['ratio_p10']:.1f}-{r['ratio_p90']:.1f}x"
        print(f"  {r['case']:<10} {r['calculon_median_ms']:>11.3f} {r['ours_median_ms']:>8.3f} "
              f"{r['ratio_of_medians']:>6.1f}x {spread:>12}  {r['calculon_step_s']:.2f}, "
              f"{r['ours_step_s']:.2f}" + (f" ({published:g})" if published else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("calculon", nargs="?", default=os.environ.get("CALCULON_PATH"),
                        help="Calculon's source tree (default: $CALCULON_PATH)")
    parser.add_argument("--rounds", type=int, default=40,
                        help="alternated pairs of blocks per case (default 40)")
    parser.add_argument("--block", type=int, default=25,
                        help="consecutive estimates per block (default 25)")
    parser.add_argument("--interleaved-rounds", type=int, default=400,
                        help="then call-by-call pairs per case (default 400; 0: none)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed pairs first")
    parser.add_argument("--case", choices=[c.name for c in CASES], action="append",
                        help="only this case (repeat for several; default: all)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="cpu: the thread's CPU time (default); wall: elapsed time")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if not args.calculon:
        parser.error("give Calculon's source tree (or set CALCULON_PATH): it is not a "
                     "dependency; git clone https://github.com/calculon-ai/calculon")
    if args.rounds < 1 or args.block < 1 or args.interleaved_rounds < 0:
        parser.error("--rounds and --block must be at least 1, --interleaved-rounds 0 or more")
    path = Path(args.calculon).resolve()
    calculon = import_calculon(path)
    cases = [case for case in CASES if not args.case or case.name in args.case]
    blocks = [pair(case, calculon, path, rounds=args.rounds, block=args.block,
                   warmup=args.warmup, clock_name=args.clock) for case in cases]
    _print(f"per estimate, {args.clock} time: median of {args.rounds} alternated blocks of "
           f"{args.block} consecutive estimates", blocks)
    interleaved = [pair(case, calculon, path, rounds=args.interleaved_rounds, block=1,
                        warmup=args.warmup, clock_name=args.clock)
                   for case in cases] if args.interleaved_rounds else []
    if interleaved:
        _print(f"call by call ({args.interleaved_rounds} alternated pairs; each estimate "
               "starts on caches the other side's last call left)", interleaved)
    worst = min(r["ratio_of_medians"] for r in blocks)
    print(f"target >= {TARGET_RATIO:g}x (blocks): {'met' if worst >= TARGET_RATIO else 'NOT met'}"
          f" (lowest {worst:.1f}x)")
    if args.json:
        args.json.write_text(json.dumps({"blocks": blocks, "interleaved": interleaved},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
