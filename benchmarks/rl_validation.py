"""RL step estimate against published measurements (issue 43): ``python -m
benchmarks.rl_validation``.

Measure-only: reads ``benchmarks/data/rl-runs.csv`` (11 published RL step breakdowns from 3
documents: verl's one-step-off-policy and fully-async recipe docs, and LMSYS's Miles-on-ROCm
blog; each row quotes its table row in ``notes``) and prints a Markdown report. It fits
nothing and changes no constant, so every figure is out of sample.

No document states the mean response length of its runs (DAPO's lengths drift over training;
only caps are given), and generation, the forward passes and the update all scale with it.
So the report gives two checks, named for what they use:

1. **forward/update ratio** (every row with both phases): the policy's log-probability pass
   over the update, ``old_log_prob / update_actor``. The token count cancels, so it checks the
   forward-pass term (``rl.forward_s`` at the update's HFU) against the update without knowing
   the length; the length is set to half the cap, which moves the ratio little (attention only).
2. **phases given the update** (colocated synchronous rows whose batch is stated): the mean
   response length is solved so that the modelled update equals the measured one (the update
   is then an input, not a check); generation, the log-probability pass and the whole step
   are then predicted and compared. This tests the rest of the step at the tokens the update
   implies.

3. **weight sync** where a row times it (its size does not depend on the length).

Rows the model does not represent (fully async streaming with stale samples and partial
rollouts) are listed as skipped with a code.

Mapping: Qwen2.5-Math-7B and Qwen3-30B-A3B from their public configs (``MODELS``: no preset
holds them); the NVIDIA H20 from its datasheet (``H20``: not in the catalogue); FSDP2 rows are
``fsdp`` with ZeRO-3 and full recomputation (verl's DAPO recipes set
``enable_gradient_checkpointing=True``); Megatron rows are ``megatron`` with ZeRO-1, tp as the
row states (Miles TP4/EP8) else 1. The prompt length is not stated: ``PROMPT_TOKENS``.
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.accuracy import seed_accelerators
from service.core.estimate import Estimate, estimate
from service.core.serving import Engine
from service.core.specs import (
    AcceleratorSpec,
    ClusterSpec,
    Framework,
    InvalidSpecError,
    ModelSpec,
    ParallelismPlan,
    Precision,
    RecomputeMode,
    RlPlacement,
    RlSpec,
    TrainingMethod,
    TrainingSpec,
)

DATA = Path(__file__).parent / "data" / "rl-runs.csv"
PROMPT_TOKENS = 256
"""Mean prompt length where a row does not state it: DAPO-Math-17k's prompts (a problem and a
format instruction) are a few hundred tokens; against responses of thousands it matters
little."""
NOMINAL_BATCH_PROMPTS = 512
"""Prompts per step for the ratio check where a row does not state it (cancels in the ratio)."""

MODELS = {
    # Qwen/Qwen2.5-Math-7B config.json: 28 layers, hidden 3584, 28 heads, 4 KV heads,
    # intermediate 18944, vocab 152064, untied embeddings.
    "Qwen2.5-Math-7B": ModelSpec(name="qwen2.5-math-7b", num_layers=28, hidden_size=3584,
                                 num_heads=28, num_kv_heads=4, ffn_hidden_size=18944,
                                 vocab_size=152064, linear_bias=True),
    # Qwen/Qwen3-30B-A3B config.json: 48 layers, hidden 2048, 32 heads of 128, 4 KV heads,
    # 128 experts, 8 per token, moe_intermediate_size 768, vocab 151936, no dense layers.
    "Qwen3-30B-A3B": ModelSpec(name="qwen3-30b-a3b", num_layers=48, hidden_size=2048,
                               num_heads=32, num_kv_heads=4, head_dim=128,
                               ffn_hidden_size=6144, vocab_size=151936, num_experts=128,
                               experts_per_token=8, moe_ffn_hidden_size=768),
}
H20 = AcceleratorSpec(
    id="h20-96gb", name="NVIDIA H20 96GB (held in the benchmark)", memory_bytes=96 * 2**30,
    hbm_bytes_per_s=4.0e12,
    peak_flops_per_s={Precision.BF16: 148e12, Precision.FP16: 148e12, Precision.FP8: 296e12},
    tdp_w=400.0, scaleup_domain_size=8, scaleup_bytes_per_s=450e9, scaleout_bytes_per_s=50e9)
"""NVIDIA H20 (HGX H20 product brief): 96 GB HBM3 at 4.0 TB/s, 148 TFLOP/s dense BF16, 296
FP8, NVLink 900 GB/s (450 each way), 400 W; one 400 Gb/s NIC per GPU assumed."""
FRAMEWORKS = {"fsdp": Framework.FSDP, "megatron": Framework.MEGATRON}
EVALUATED_MODES = ("sync", "one_step_off")


@dataclass(frozen=True, slots=True)
class Case:
    row: dict[str, str]
    model: ModelSpec
    cluster: ClusterSpec
    plan: ParallelismPlan
    framework: Framework


def load_rows(path: Path = DATA) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _num(row: dict[str, str], key: str) -> float | None:
    value = row.get(key, "")
    return float(value) if value else None


def skip_reason(row: dict[str, str], accelerators: dict[str, AcceleratorSpec]) -> str | None:
    if row["mode"] not in EVALUATED_MODES:
        return "mode_not_modelled"
    if row["model"] not in MODELS:
        return "no_model"
    if row["accelerator"] not in accelerators:
        return "accelerator_not_in_catalogue"
    return None


def case_of(row: dict[str, str], accelerators: dict[str, AcceleratorSpec]) -> Case:
    model = MODELS[row["model"]]
    acc = accelerators[row["accelerator"]]
    n = int(row["num_gpus"])
    framework = FRAMEWORKS[row["framework"]]
    tp = 4 if row["id"].startswith("miles_") else 1
    ep = 8 if model.num_experts else 1
    plan = ParallelismPlan(
        tp=tp, pp=1, dp=n // tp, cp=1, ep=ep, vp=1, micro_batch=1,
        sequence_parallel=tp > 1, zero_stage=3 if framework == Framework.FSDP else 1,
        recompute=RecomputeMode.FULL)
    cluster = ClusterSpec(accelerator=acc, num_gpus=n, gpus_per_node=8)
    return Case(row=row, model=model, cluster=cluster, plan=plan, framework=framework)


def run(case: Case, response_tokens: int) -> Estimate:
    row = case.row
    prompts = int(_num(row, "prompts_per_step") or NOMINAL_BATCH_PROMPTS)
    samples = int(_num(row, "samples_per_prompt") or 16)
    mini = int(_num(row, "mini_batch_prompts") or prompts)
    rl = RlSpec(steps=1, prompts_per_step=prompts, samples_per_prompt=samples,
                prompt_tokens=PROMPT_TOKENS, response_tokens=response_tokens,
                reference_model=False, max_response_tokens=max(
                    response_tokens, int(_num(row, "max_response_tokens") or response_tokens)),
                placement=RlPlacement(row["placement"]), rollout_engine=Engine(
                    row["rollout_engine"]))
    seq = rl.sequence_tokens
    batch = mini * samples
    dp = case.plan.dp
    batch = max(dp, batch - batch % dp)
    training = TrainingSpec(seq_len=seq, global_batch_seqs=batch, tokens=rl.total_tokens,
                            method=TrainingMethod.RL, rl=rl, framework=case.framework)
    return estimate(case.model, case.cluster, case.plan, training)


def figures(result: Estimate, placement: str) -> dict[str, float]:
    assert result.rl is not None
    chosen = result.rl.colocated if placement == "colocated" else result.rl.disaggregated
    assert chosen is not None
    p = chosen.phases
    return {"step": chosen.step_s, "generation": p.generation_s,
            "old_log_prob": p.old_log_prob_s, "update": p.policy_update_s,
            "weight_sync": p.weight_sync_s}


def implied_response(case: Case, measured_update_s: float) -> int | None:
    """The mean response length whose modelled update equals the measured one (bisection on
    the cap), or None if even the cap's update is faster than measured or 16 tokens' slower."""
    low, high = 16, int(_num(case.row, "max_response_tokens") or 32768)

    def update(r: int) -> float:
        return figures(run(case, r), case.row["placement"])["update"]

    if update(high) < measured_update_s or update(low) > measured_update_s:
        return None
    for _ in range(24):
        if high - low <= 1:
            break
        mid = (low + high) // 2
        if update(mid) < measured_update_s:
            low = mid
        else:
            high = mid
    return high


def error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


def _median_abs(values: Sequence[float]) -> float:
    return statistics.median(abs(v) for v in values) if values else float("nan")


def report() -> str:
    accelerators = {**seed_accelerators(), H20.id: H20}
    rows = load_rows()
    skipped: Counter[str] = Counter()
    lines = ["# RL step validation (out of sample, measure-only)", "",
             f"{len(rows)} rows from {len({r['url'] for r in rows})} documents "
             "(benchmarks/data/rl-runs.csv).", ""]
    ratio_lines: list[str] = []
    ratio_errors: list[float] = []
    phase_errors: dict[str, list[float]] = {"generation": [], "old_log_prob": [], "step": []}
    phase_lines: list[str] = []
    sync_lines: list[str] = []
    for row in rows:
        reason = skip_reason(row, accelerators)
        if reason is not None:
            skipped[reason] += 1
            continue
        case = case_of(row, accelerators)
        cap = int(_num(row, "max_response_tokens") or 8192)
        try:
            nominal = figures(run(case, cap // 2), row["placement"])
        except InvalidSpecError as exc:
            skipped[f"invalid_layout ({exc.field})"] += 1
            continue
        measured_old, measured_update = (_num(row, "measured_old_log_prob_s"),
                                         _num(row, "measured_update_s"))
        if measured_old and measured_update:
            predicted = nominal["old_log_prob"] / nominal["update"]
            measured = measured_old / measured_update
            ratio_errors.append(error(predicted, measured))
            ratio_lines.append(f"| {row['id']} | {measured:.3f} | {predicted:.3f} | "
                               f"{error(predicted, measured):+.0%} |")
        sync_measured = _num(row, "measured_weight_sync_s")
        if sync_measured:
            sync_lines.append(f"| {row['id']} | {sync_measured:.1f} | "
                              f"{nominal['weight_sync']:.1f} | "
                              f"{error(nominal['weight_sync'], sync_measured):+.0%} |")
        if (row["placement"] == "colocated" and row["prompts_per_step"] and measured_update
                and row["mode"] == "sync"):
            implied = implied_response(case, measured_update)
            if implied is None:
                phase_lines.append(f"| {row['id']} | no length in [16, cap] gives the update "
                                   "| | | |")
                continue
            f = figures(run(case, implied), row["placement"])
            cells = [f"{implied:,}"]
            for phase, key in (("generation", "measured_generation_s"),
                               ("old_log_prob", "measured_old_log_prob_s"),
                               ("step", "measured_step_s")):
                m = _num(row, key)
                if m:
                    phase_errors[phase].append(error(f[phase], m))
                    cells.append(f"{f[phase]:.0f} vs {m:.0f} ({error(f[phase], m):+.0%})")
                else:
                    cells.append("")
            phase_lines.append(f"| {row['id']} | " + " | ".join(cells) + " |")
    lines += ["## 1. Forward pass over update (old_log_prob / update_actor)", "",
              "| row | measured | model | error |", "|---|---|---|---|", *ratio_lines, "",
              f"Median |error| {_median_abs(ratio_errors):.0%} on {len(ratio_errors)} rows "
              f"from {len({r['url'] for r in rows if r['id'] in _ids(ratio_lines)})} "
              "documents.", "",
              "## 2. Phases given the update (length solved from update_actor)", "",
              "| row | implied mean response | generation s | old_log_prob s | step s |",
              "|---|---|---|---|---|", *phase_lines, ""]
    for phase, values in phase_errors.items():
        lines.append(f"- {phase}: median |error| {_median_abs(values):.0%} on {len(values)} "
                     "rows")
    lines += ["", "## 3. Weight sync (length-independent)", "",
              "| row | measured s | model s | error |", "|---|---|---|---|", *sync_lines]
    lines += ["", "Skipped: " + (", ".join(f"{k} ({v})" for k, v in sorted(skipped.items()))
                                 or "none"), ""]
    return "\n".join(lines)


def _ids(table_lines: Sequence[str]) -> set[str]:
    return {line.split("|")[1].strip() for line in table_lines}


def main() -> None:
    sys.stdout.write(report())


if __name__ == "__main__":
    main()
