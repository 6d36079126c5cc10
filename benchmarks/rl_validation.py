"""RL step estimate against published measurements (issue 43): ``python -m
benchmarks.rl_validation``.

Measure-only: reads ``benchmarks/data/rl-runs.csv`` (42 published RL step breakdowns from 5
documents: verl's one-step-off-policy and fully-async recipe docs, LMSYS's Miles-on-ROCm blog,
NeMo RL's performance summary at three releases (v0.4, v0.5, v0.6) and the NeMo-RL v0.3 blog;
each row quotes its table row in ``notes``) and prints a Markdown report. It fits nothing and
changes no constant, so every figure is out of sample.

verl's and Miles' documents do not state the mean response length of their runs (DAPO's
lengths drift over training; only caps are given), and generation, the forward passes and the
update all scale with it. NeMo RL's do (``mean_response_tokens``: "G-Average Seq len", "Avg.
generated tokens per sample"). So the report gives four checks, named for what they use:

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
4. **step at the stated mean length** (synchronous rows that state it): every phase predicted,
   nothing solved, the step compared, and each phase where the document times it (NeMo-RL's
   v0.3 blog: generation, log-probs of policy and reference together, training, refit).

Rows the model does not represent (fully async streaming with stale samples and partial
rollouts) are listed as skipped with a code.

Mapping: Qwen2.5-Math-7B and Qwen3-30B-A3B from their public configs (``MODELS``: no preset
holds them); the NVIDIA H20 from its datasheet (``H20``: not in the catalogue); FSDP2 rows are
``fsdp`` with ZeRO-3 and full recomputation (verl's DAPO recipes set
``enable_gradient_checkpointing=True``); Megatron rows are ``megatron`` with ZeRO-1, tp as the
row states (Miles TP4/EP8) else 1; a row that states its training layout (``training_tp``,
``training_pp``, ``training_cp``, ``training_ep``), recomputation, reference pass, mean prompt or
packing length (``packed_seq_len``: NeMo RL packs rollouts to ``max_total_sequence_length``) is
run with it; NeMo RL's colocated rows run its weight-sync protocol (``weight_sync_of``:
``RlWeightSync.OFFLOAD_FULL_GATHER``), and their "Refit" is compared with the modelled weight
sync alone; a row that states its engine's memory fraction (``rollout_memory_fraction``: NeMo
RL's ``vllm_cfg.gpu_memory_utilization`` in the row's recipe) gives its rollout that share of
each GPU. Where the prompt length is not stated: ``PROMPT_TOKENS``.
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.accuracy import seed_accelerators
from service.core.errors import InvalidSpecError
from service.core.estimate import Estimate, estimate
from service.core.presets import get_preset
from service.core.serving import Engine
from service.core.specs import (
    AcceleratorSpec,
    ClusterSpec,
    Framework,
    ModelSpec,
    ParallelismPlan,
    Precision,
    RecomputeMode,
    RlPlacement,
    RlSpec,
    RlWeightSync,
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
    # Qwen/Qwen3-32B config.json: 64 layers, hidden 5120, 64 heads of 128, 8 KV heads,
    # intermediate 25600, vocab 151936, untied embeddings.
    "Qwen3-32B": ModelSpec(name="qwen3-32b", num_layers=64, hidden_size=5120, num_heads=64,
                           num_kv_heads=8, head_dim=128, ffn_hidden_size=25600,
                           vocab_size=151936),
    # The presets (service/core/presets.py, each citing its config) for NeMo RL's models.
    "Llama-3.1-8B-Instruct": get_preset("llama3.1-8b").model,
    "Llama-3.1-70B": get_preset("llama3.1-70b").model,
    "DeepSeek-V3": get_preset("deepseek-v3").model,
    "Qwen3-235B-A22B": get_preset("qwen3-235b-a22b").model,
}
H20 = AcceleratorSpec(
    id="h20-96gb", name="NVIDIA H20 96GB (held in the benchmark)", memory_bytes=96 * 2**30,
    hbm_bytes_per_s=4.0e12,
    peak_flops_per_s={Precision.BF16: 148e12, Precision.FP16: 148e12, Precision.FP8: 296e12},
    tdp_w=400.0, scaleup_domain_size=8, scaleup_bytes_per_s=450e9, scaleout_bytes_per_s=50e9)
"""NVIDIA H20 (HGX H20 product brief): 96 GB HBM3 at 4.0 TB/s, 148 TFLOP/s dense BF16, 296
FP8, NVLink 900 GB/s (450 each way), 400 W; one 400 Gb/s NIC per GPU assumed."""
STATED_PHASE_COLUMNS = {"generation": "measured_generation_s",
                        "log_probs": "measured_old_log_prob_s",
                        "update": "measured_update_s", "weight_sync": "measured_weight_sync_s"}
"""Section 4's phases and the columns that time them (NeMo-RL's 'Get logprobs' is the policy's
and the reference's passes together, so the model's two are summed)."""
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
    if row.get("training_tp"):
        # The row states its training layout (NeMo RL's Training [TP,CP,EP,PP] column).
        tp, pp, cp, ep = (int(row[f"training_{k}"]) for k in ("tp", "pp", "cp", "ep"))
    else:
        tp = 4 if row["id"].startswith("miles_") else 1
        pp, cp, ep = 1, 1, 8 if model.num_experts else 1
    recompute = RecomputeMode(row["recompute"]) if row.get("recompute") else RecomputeMode.FULL
    plan = ParallelismPlan(
        tp=tp, pp=pp, dp=n // (tp * pp * cp), cp=cp, ep=ep, vp=1, micro_batch=1,
        sequence_parallel=tp > 1, zero_stage=3 if framework == Framework.FSDP else 1,
        recompute=recompute)
    # GB200 NVL72 trays hold 4 GPUs (NeMo RL's GB200 recipes: gpus_per_node 4).
    cluster = ClusterSpec(accelerator=acc, num_gpus=n,
                          gpus_per_node=4 if acc.id == "gb200-nvl72" else 8)
    return Case(row=row, model=model, cluster=cluster, plan=plan, framework=framework)


def stated_rollout_tp(case: Case) -> int | None:
    """The row's rollout engine tp where the model can hold it (within the accelerator's
    NVLink domain: a node of H100s, the NVL72 rack across its 4-GPU trays; rl._rollout keeps
    tp inside it); None (searched) where the row states none or one past it."""
    tp = int(_num(case.row, "rollout_tp") or 0)
    return tp if 0 < tp <= case.cluster.accelerator.scaleup_domain_size else None


def weight_sync_of(row: dict[str, str]) -> RlWeightSync:
    """NeMo RL's rows ran its colocated protocol (``RlWeightSync.OFFLOAD_FULL_GATHER``: the
    training state to the host and back each step, the engine asleep between rollouts, full
    tensors gathered for the refit; NVIDIA-NeMo/RL v0.3.0-v0.6.0 ``refit_policy_generation``);
    the other documents' rows keep the default."""
    colocated_nemo = row["source"].startswith("NeMo") and row["placement"] == "colocated"
    return RlWeightSync.OFFLOAD_FULL_GATHER if colocated_nemo else RlWeightSync.RESHARD


def run(case: Case, response_tokens: int) -> Estimate:
    row = case.row
    prompts = int(_num(row, "prompts_per_step") or NOMINAL_BATCH_PROMPTS)
    samples = int(_num(row, "samples_per_prompt") or 16)
    mini = int(_num(row, "mini_batch_prompts") or prompts)
    prompt = int(_num(row, "mean_prompt_tokens") or PROMPT_TOKENS)
    # Sequences padded to a multiple of the context-parallel size, as validate_plan requires
    # (NeMo RL's recipes pad too: make_sequence_length_divisible_by): at most cp - 1 tokens.
    prompt += -(prompt + response_tokens) % case.plan.cp
    rl = RlSpec(steps=1, prompts_per_step=prompts, samples_per_prompt=samples,
                prompt_tokens=prompt, response_tokens=response_tokens,
                rollout_tp=stated_rollout_tp(case), weight_sync=weight_sync_of(row),
                rollout_memory_fraction=_num(row, "rollout_memory_fraction"),
                reference_model=row.get("reference_model") == "true", max_response_tokens=max(
                    response_tokens, int(_num(row, "max_response_tokens") or response_tokens)),
                placement=RlPlacement(row["placement"]), rollout_engine=Engine(
                    row["rollout_engine"]))
    seq = rl.sequence_tokens
    batch = mini * samples
    packed = int(_num(row, "packed_seq_len") or 0)
    if packed > seq:
        # Sequence packing (NeMo RL's policy.sequence_packing: rollouts packed to
        # train_mb_tokens): the mini-batch's tokens in sequences of ``packed`` tokens.
        batch = max(1, (batch * seq) // packed)
        seq = packed
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
            "old_log_prob": p.old_log_prob_s, "reference": p.reference_s,
            "update": p.policy_update_s, "weight_sync": p.weight_sync_s,
            "offload": p.offload_s}


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


@dataclass(frozen=True, slots=True)
class StatedOutcome:
    """Section 4: one row run at its stated mean response length."""

    row_id: str
    document: str
    version: str
    response_tokens: float
    step_s: float
    measured_step_s: float
    modelled: dict[str, float]
    """Seconds by ``STATED_PHASE_COLUMNS`` phase."""
    measured: dict[str, float]
    """The phases the document times."""

    @property
    def step_error(self) -> float:
        return error(self.step_s, self.measured_step_s)


def stated_outcome(case: Case) -> StatedOutcome | str | None:
    """Section 4 for one row: None where the row states no mean length or step (or is not
    synchronous), a skip code where the model gives no answer, else the outcome."""
    row = case.row
    stated = _num(row, "mean_response_tokens")
    measured_step = _num(row, "measured_step_s")
    if not (stated and measured_step and row["mode"] == "sync"):
        return None
    try:
        f = figures(run(case, int(stated)), row["placement"])
    except InvalidSpecError as exc:
        return f"invalid_layout ({exc.field})"
    if not math.isfinite(f["step"]):
        # The rollout engine's tp is searched within a node (rl._rollout): a model whose bf16
        # weights and a batch exceed a node's memory has no rollout.
        return "no_rollout_within_a_node"
    # NeMo RL's "Refit" is its prepare_for_generation timer, which holds the offload of the
    # optimizer state and weights (the model's weight sync under OFFLOAD_FULL_GATHER); the
    # other host moves (``offload``) are in the step only. Under RESHARD an offload is part
    # of the sync, as before.
    nemo = weight_sync_of(row) == RlWeightSync.OFFLOAD_FULL_GATHER
    modelled = {"generation": f["generation"], "log_probs": f["old_log_prob"] + f["reference"],
                "update": f["update"],
                "weight_sync": f["weight_sync"] + (0.0 if nemo else f["offload"])}
    measured = {phase: value for phase, column in STATED_PHASE_COLUMNS.items()
                if (value := _num(row, column))}
    return StatedOutcome(row_id=row["id"], document=document_of(row["url"]),
                         version=row["url"], response_tokens=stated, step_s=f["step"],
                         measured_step_s=measured_step, modelled=modelled, measured=measured)


def stated_length_check(path: Path = DATA) -> list[StatedOutcome]:
    """Section 4's outcomes for every row that has one (the figures tests hold)."""
    accelerators = {**seed_accelerators(), H20.id: H20}
    outcomes = []
    for row in load_rows(path):
        if skip_reason(row, accelerators) is not None:
            continue
        outcome = stated_outcome(case_of(row, accelerators))
        if isinstance(outcome, StatedOutcome):
            outcomes.append(outcome)
    return outcomes


def phase_errors_of(outcomes: Sequence[StatedOutcome]) -> dict[str, list[float]]:
    return {phase: [error(o.modelled[phase], o.measured[phase]) for o in outcomes
                    if phase in o.measured] for phase in STATED_PHASE_COLUMNS}


def summary_line(outcomes: Sequence[StatedOutcome]) -> str:
    errors = [o.step_error for o in outcomes]
    return (f"Step: median |error| {_median_abs(errors):.0%} on {len(errors)} rows from "
            f"{len({o.document for o in outcomes})} documents "
            f"({len({o.version for o in outcomes})} document versions); mean error "
            f"{statistics.fmean(errors) if errors else 0.0:+.0%}.")


def document_of(url: str) -> str:
    """The document a row's URL names, without the commit it was read at: versions of one page
    (NeMo RL's performance summary at three releases) are one document."""
    parts = url.split("/")
    if "blob" in parts:
        i = parts.index("blob")
        del parts[i + 1]
    return "/".join(parts)


def error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured


def _median_abs(values: Sequence[float]) -> float:
    return statistics.median(abs(v) for v in values) if values else float("nan")


def report() -> str:
    accelerators = {**seed_accelerators(), H20.id: H20}
    rows = load_rows()
    skipped: Counter[str] = Counter()
    lines = ["# RL step validation (out of sample, measure-only)", "",
             f"{len(rows)} rows from {len({document_of(r['url']) for r in rows})} documents "
             f"({len({r['url'] for r in rows})} document versions; "
             "benchmarks/data/rl-runs.csv).", ""]
    ratio_lines: list[str] = []
    ratio_errors: list[float] = []
    phase_errors: dict[str, list[float]] = {"generation": [], "old_log_prob": [], "step": []}
    phase_lines: list[str] = []
    sync_lines: list[str] = []
    stated_lines: list[str] = []
    stated_results: list[StatedOutcome] = []
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
            # The measured column holds the reference pass too where the row has one.
            predicted = (nominal["old_log_prob"] + nominal["reference"]) / nominal["update"]
            measured = measured_old / measured_update
            ratio_errors.append(error(predicted, measured))
            ratio_lines.append(f"| {row['id']} | {measured:.3f} | {predicted:.3f} | "
                               f"{error(predicted, measured):+.0%} |")
        sync_measured = _num(row, "measured_weight_sync_s")
        if sync_measured:
            sync_lines.append(f"| {row['id']} | {sync_measured:.1f} | "
                              f"{nominal['weight_sync']:.1f} | "
                              f"{error(nominal['weight_sync'], sync_measured):+.0%} |")
        outcome = stated_outcome(case)
        if outcome is not None:
            if isinstance(outcome, str):
                skipped[outcome] += 1
                stated_lines.append(f"| {row['id']} | {row['mean_response_tokens']} | "
                                    f"{outcome} | | | | | |")
                continue
            stated_results.append(outcome)
            cells = []
            for phase, value in outcome.modelled.items():
                m = outcome.measured.get(phase)
                digits = 1 if phase == "weight_sync" else 0
                cells.append(f"{value:.{digits}f}" if m is None else
                             f"{value:.{digits}f} vs {m:.0f} ({error(value, m):+.0%})")
            stated_tp = int(_num(row, "rollout_tp") or 0)
            mark = ("" if not stated_tp or stated_rollout_tp(case) else
                    f" (rollout tp {stated_tp} spans the NVLink domain: searched)")
            stated_lines.append(
                f"| {row['id']}{mark} | {int(outcome.response_tokens):,} | " + " | ".join(cells)
                + f" | {outcome.step_s:.0f} vs {outcome.measured_step_s:.0f} | "
                f"{outcome.step_error:+.0%} |")
            continue
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
    lines += ["## 1. Forward passes over update (old_log_prob [+ reference] / update_actor)", "",
              "| row | measured | model | error |", "|---|---|---|---|", *ratio_lines, "",
              f"Median |error| {_median_abs(ratio_errors):.0%} on {len(ratio_errors)} rows "
              f"from {len({document_of(r['url']) for r in rows if r['id'] in _ids(ratio_lines)})} "
              "documents.", "",
              "## 2. Phases given the update (length solved from update_actor)", "",
              "| row | implied mean response | generation s | old_log_prob s | step s |",
              "|---|---|---|---|---|", *phase_lines, ""]
    for phase, values in phase_errors.items():
        lines.append(f"- {phase}: median |error| {_median_abs(values):.0%} on {len(values)} "
                     "rows")
    lines += ["", "## 3. Weight sync (length-independent)", "",
              "| row | measured s | model s | error |", "|---|---|---|---|", *sync_lines]
    lines += ["", "## 4. Step at the stated mean response length (colocated, synchronous)", "",
              "The row states its mean generated length, so nothing is solved: every phase is "
              "predicted, and compared where the document times it (model vs measured).", "",
              "| row | mean response | generation s | log-probs s (policy + reference) | "
              "update s | weight sync s (NeMo RL: its refit) | step s | error |",
              "|---|---|---|---|---|---|---|---|", *stated_lines, "",
              summary_line(stated_results), ""]
    for phase, values in phase_errors_of(stated_results).items():
        lines.append(f"- {phase}: median |error| {_median_abs(values):.0%} on {len(values)} rows"
                     + (f", mean {statistics.fmean(values):+.0%}" if values else ""))
    lines += ["", "Skipped: " + (", ".join(f"{k} ({v})" for k, v in sorted(skipped.items()))
                                 or "none"), ""]
    return "\n".join(lines)


def _ids(table_lines: Sequence[str]) -> set[str]:
    return {line.split("|")[1].strip() for line in table_lines}


def main() -> None:
    sys.stdout.write(report())


if __name__ == "__main__":
    main()
