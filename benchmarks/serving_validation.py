"""Serving model against published measurements (issue 19): ``python -m
benchmarks.serving_validation``.

Reads ``benchmarks/data/serving-runs.csv`` (53 published rows, sources in each row and in
``docs/serving.md``). A row is evaluated when it states everything the model needs: the model
(a preset), accelerator, GPUs and tensor parallelism, prompt and output lengths, and a
closed-loop concurrency or a fixed batch; the others are listed with why they are not. No
engine efficiency is fitted on these rows (ENGINE_EFFICIENCY holds priors), so every error
printed is out of sample; the leave-one-source-out figure is therefore the same figure.
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from benchmarks.accuracy import seed_accelerators
from service.core import serving as s
from service.core.presets import PRESETS
from service.core.specs import AcceleratorSpec

DATA = Path(__file__).resolve().parent / "data" / "serving-runs.csv"
MODELS = {"Llama-3.1-8B": "llama3.1-8b", "Meta-Llama-3.1-8B": "llama3.1-8b",
          "Llama-3.3-70B": "llama3.1-70b", "Llama-2-70B": "llama2-70b",
          "Llama-3.1-405B": "llama3.1-405b"}
"""Row model -> preset. Llama 3.3 70B has Llama 3.1 70B's architecture (Meta model card)."""
ENGINES = {"vllm": s.Engine.VLLM, "sglang": s.Engine.SGLANG, "trtllm": s.Engine.TRTLLM}


@dataclass(frozen=True)
class Result:
    row_id: str
    source: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


def _skip_reason(row: dict[str, str]) -> str | None:
    if not any(row["model"].startswith(k) for k in MODELS):
        return "model without a preset"
    if not row["measured_output_tokens_per_s"]:
        return "no output tokens/s"
    if not (row["prompt_tokens"] and row["output_tokens"]):
        return "prompt or output length not stated"
    if not (row["concurrency"] or row["batch_size"]):
        return "neither concurrency nor batch stated"
    if not row["tp"]:
        return "tensor parallelism not stated"
    return None


def evaluate(row: dict[str, str], accelerators: dict[str, AcceleratorSpec]) -> Result:
    preset = next(v for k, v in MODELS.items() if row["model"].startswith(k))
    gpus, tp = int(row["num_gpus"]), int(row["tp"])
    deployment = s.Deployment(
        accelerator=accelerators[row["accelerator"]], gpus_per_replica=gpus, tp=tp,
        pp=gpus // tp,
        weight_precision=(s.WeightPrecision.FP8 if row["weight_precision"] == "fp8"
                          else s.WeightPrecision.BF16),
        kv_cache_precision=(s.KvPrecision.FP8 if row["kv_cache_precision"] == "fp8"
                            else s.KvPrecision.BF16),
        engine=ENGINES.get(row["engine"], s.Engine.UNKNOWN))
    lengths = (s.Lengths.of(mean=float(row["prompt_tokens"])),
               s.Lengths.of(mean=float(row["output_tokens"])))
    if row["batch_size"]:
        traffic = s.Traffic(mode=s.TrafficMode.FIXED_BATCH, prompt=lengths[0],
                            output=lengths[1], batch_size=int(row["batch_size"]))
    else:
        traffic = s.Traffic(mode=s.TrafficMode.ONLINE, prompt=lengths[0], output=lengths[1],
                            concurrency=int(row["concurrency"]))
    estimate = s.serve(PRESETS[preset].model, deployment, traffic)
    return Result(row_id=row["id"], source=row["source"],
                  measured=float(row["measured_output_tokens_per_s"]),
                  predicted=estimate.output_tokens_per_s)


def main() -> int:
    with DATA.open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    skipped = Counter(r for r in map(_skip_reason, rows) if r)
    accelerators = seed_accelerators()  # read once, not per row
    results = [evaluate(r, accelerators) for r in rows if _skip_reason(r) is None]
    print(f"{'row':44s} {'measured':>10s} {'predicted':>10s} {'error':>7s}")
    for r in results:
        print(f"{r.row_id[:44]:44s} {r.measured:10.1f} {r.predicted:10.1f} {r.error:+7.1%}")
    errors = [abs(r.error) for r in results]
    print(f"\n{len(results)} rows from {len({r.source for r in results})} sources evaluated; "
          f"{len(rows) - len(results)} not: {dict(skipped)}")
    print(f"output tokens/s |error|: median {statistics.median(errors):.1%}, "
          f"max {max(errors):.1%}, mean bias "
          f"{statistics.fmean(r.error for r in results):+.1%} (out of sample: nothing fitted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
