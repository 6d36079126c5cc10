"""RL post-training (issue 43): the phases of one step, both placements, and bad input."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from service.core.errors import InvalidSpecError
from service.core.estimate import estimate
from service.core.rl import (
    RlEstimate,
    _engine_memory_bytes,
    full_gather_s,
    gathered_tensors,
)
from service.core.specs import (
    Framework,
    RecomputeMode,
    RlPlacement,
    RlSpec,
    RlWeightSync,
    TrainingMethod,
    TrainingSpec,
)
from tests.factories import cluster, model, plan


def rl_spec(**overrides: Any) -> RlSpec:
    values: dict[str, Any] = {"steps": 100, "prompts_per_step": 256, "samples_per_prompt": 8,
                              "prompt_tokens": 512, "response_tokens": 1024}
    values.update(overrides)
    return RlSpec(**values)


def rl_training(rl: RlSpec, **overrides: Any) -> TrainingSpec:
    values: dict[str, Any] = {"seq_len": rl.sequence_tokens, "global_batch_seqs": 512,
                              "tokens": rl.total_tokens, "method": TrainingMethod.RL,
                              "rl": rl, "framework": Framework.FSDP}
    values.update(overrides)
    return TrainingSpec(**values)


def run(rl: RlSpec, num_gpus: int = 16, preset: str = "llama3.1-8b") -> Any:
    layout = plan(tp=1, pp=1, dp=num_gpus, cp=1, ep=1, vp=1, micro_batch=1, zero_stage=3,
                  recompute=RecomputeMode.FULL, sequence_parallel=False)
    return estimate(model(preset), cluster(num_gpus), layout, rl_training(rl))


@pytest.fixture(scope="module")
def base() -> Any:
    return run(rl_spec())


def test_colocated_step_is_the_sum_of_its_phases(base: Any) -> None:
    figures: RlEstimate = base.rl
    c = figures.colocated
    p = c.phases
    assert min(p.generation_s, p.old_log_prob_s, p.reference_s, p.policy_update_s,
               p.weight_sync_s) > 0
    assert p.reward_s == 0.0  # rule-based reward
    assert c.step_s == pytest.approx(p.generation_s + p.training_side_s + p.weight_sync_s
                                     + p.offload_s)
    assert c.training_gpus == c.rollout_gpus == 16


def test_disaggregated_overlaps_and_splits_the_gpus(base: Any) -> None:
    d = base.rl.disaggregated
    assert d is not None
    assert d.training_gpus + d.rollout_gpus == 16
    assert d.step_s == pytest.approx(max(d.phases.generation_s, d.phases.training_side_s)
                                     + d.phases.weight_sync_s)
    faster = min((base.rl.colocated, d), key=lambda f: f.step_s)
    assert base.rl.faster_placement == faster.placement


def test_the_job_is_steps_times_the_chosen_step(base: Any) -> None:
    step = base.rl.colocated.step_s
    assert base.throughput.train_s == pytest.approx(100 * step)
    assert base.throughput.gpu_hours == pytest.approx(100 * step * 16 / 3600)
    assert base.throughput.tokens_per_s == pytest.approx(256 * 8 * 1536 / step)
    assert base.throughput.num_steps == 100
    assert any(d.code == "outside_validated_range" and d.field == "training.method"
               for d in base.warning_details)


def test_the_update_trains_on_every_generated_token(base: Any) -> None:
    p = base.rl.colocated.phases
    assert p.policy_update_s == pytest.approx(
        base.rl.tokens_per_step / base.rl.colocated.update_tokens_per_s)
    # The forward passes cost about a third of a non-recomputed update's work, well under it.
    assert p.old_log_prob_s == pytest.approx(p.reference_s)
    assert p.old_log_prob_s < p.policy_update_s / 2


def test_reference_and_reward_models_add_their_passes(base: Any) -> None:
    without = run(rl_spec(reference_model=False))
    assert without.rl.colocated.phases.reference_s == 0.0
    assert without.rl.colocated.step_s < base.rl.colocated.step_s
    scored = run(rl_spec(reward_model=model("llama3.1-8b")))
    reward = scored.rl.colocated.phases.reward_s
    assert reward == pytest.approx(scored.rl.colocated.phases.old_log_prob_s, rel=0.02)
    assert scored.rl.colocated.training_peak_bytes > base.rl.colocated.training_peak_bytes


def test_longer_responses_take_longer_to_generate(base: Any) -> None:
    longer = run(rl_spec(response_tokens=4096))
    assert (longer.rl.colocated.phases.generation_s
            > 3 * base.rl.colocated.phases.generation_s)


def test_asked_placement_is_priced() -> None:
    split = run(rl_spec(placement=RlPlacement.DISAGGREGATED))
    assert split.rl.placement == RlPlacement.DISAGGREGATED
    assert split.rl.disaggregated is not None
    assert split.throughput.train_s == pytest.approx(100 * split.rl.disaggregated.step_s)


def test_disaggregated_needs_a_split() -> None:
    with pytest.raises(InvalidSpecError) as error:
        run(rl_spec(placement=RlPlacement.DISAGGREGATED), num_gpus=1)
    assert error.value.field == "training.rl.placement"


@pytest.mark.parametrize(("change", "field"), [
    ({"response_tokens": None}, "training.rl.response_tokens"),
    ({"samples_per_prompt": 0}, "training.rl.samples_per_prompt"),
    ({"steps": 0}, "training.rl.steps"),
])
def test_bad_rl_input_names_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSpecError) as error:
        rl_spec(**change)
    assert error.value.field == field


@pytest.mark.parametrize(("change", "field"), [
    ({"method": TrainingMethod.FULL_FINETUNE}, "training.rl"),
    ({"rl": None}, "training.rl"),
    ({"seq_len": 1000}, "training.seq_len"),
    ({"examples": 10, "mean_example_tokens": 100.0}, "training.examples"),
    ({"global_batch_seqs": 4096}, "training.global_batch_seqs"),
])
def test_bad_rl_training_names_the_field(change: dict[str, Any], field: str) -> None:
    rl = rl_spec()
    with pytest.raises(InvalidSpecError) as error:
        dataclasses.replace(rl_training(rl), **change)
    assert error.value.field == field


def test_the_longest_response_holds_the_step(base: Any) -> None:
    tailed = run(rl_spec(max_response_tokens=8192))
    extra = (tailed.rl.colocated.phases.generation_s
             - base.rl.colocated.phases.generation_s)
    # 7,168 more tokens decoded alone: at least a few ms per token, far less than the batch's.
    assert 7168 * 2e-3 < extra < 7168 * 50e-3
    assert tailed.rl.colocated.phases.policy_update_s == pytest.approx(
        base.rl.colocated.phases.policy_update_s)
    with pytest.raises(InvalidSpecError) as error:
        rl_spec(max_response_tokens=512)
    assert error.value.field == "training.rl.max_response_tokens"


def test_rl_validation_report_covers_two_documents() -> None:
    from benchmarks.rl_validation import load_rows

    rows = load_rows()
    evaluable = [r for r in rows if r["measured_old_log_prob_s"] and r["measured_update_s"]]
    assert len(evaluable) >= 8
    assert len({r["url"] for r in evaluable}) >= 2
    assert all(r["url"].startswith("https://") and r["table"] for r in rows)


def test_a_stated_rollout_tp_is_the_one_used(base: Any) -> None:
    """RlSpec.rollout_tp fixes the engine's tp (NeMo RL's vllm_cfg.tensor_parallel_size);
    None searches the fastest within a node, which is never slower than a fixed one."""
    searched = base.rl.colocated
    for tp in (1, 2, 4, 8):
        fixed = run(rl_spec(rollout_tp=tp)).rl.colocated
        assert fixed.rollout_tp == tp
        assert fixed.rollout_replicas == 16 // tp
        assert fixed.phases.generation_s >= searched.phases.generation_s - 1e-9
    assert searched.phases.generation_s == pytest.approx(
        run(rl_spec(rollout_tp=searched.rollout_tp)).rl.colocated.phases.generation_s)
    across = run(rl_spec(rollout_tp=16)).rl.colocated  # 16 GPUs span two 8-GPU nodes
    assert not across.fits
    with pytest.raises(InvalidSpecError) as error:
        rl_spec(rollout_tp=0)
    assert error.value.field == "training.rl.rollout_tp"


def test_engine_memory_bytes_gives_the_engine_its_fraction_of_the_whole_gpu() -> None:
    """vLLM requests total memory x gpu_memory_utilization (RlSpec.rollout_memory_fraction);
    the serving model lets the engine use its own fraction (0.9 for vLLM) of the memory it is
    handed, so the rollout hands it fraction x total / 0.9, at most the room. By hand, 80 GB:
    0.6 x 80e9 / 0.9 = 53.333e9; with 40e9 left by the training state, 40e9 / 0.9 = 44.444e9;
    no fraction: the room itself (the engine then takes 0.9 of it, as before)."""
    assert _engine_memory_bytes(80e9, 80e9, 0.6, 0.9) == pytest.approx(53.333333e9)
    assert _engine_memory_bytes(80e9, 40e9, 0.6, 0.9) == pytest.approx(44.444444e9)
    assert _engine_memory_bytes(80e9, 40e9, None, 0.9) == 40e9


def test_rollout_memory_fraction_caps_the_engine(base: Any) -> None:
    """NeMo RL passes vllm_cfg.gpu_memory_utilization 0.6 (grpo_math_1B.yaml, v0.3.0-v0.6.0).
    With its protocol the training state is on the host during the rollout, so the engine
    uses 0.6 of the whole H100 (85,018,877,624 B): 51,011,326,575 B per GPU, not 0.9 of it;
    its KV cache, and so the sequences that decode together, shrink with it."""
    nemo: dict[str, Any] = {"weight_sync": RlWeightSync.OFFLOAD_FULL_GATHER, "rollout_tp": 1}
    default = run(rl_spec(**nemo)).rl.colocated
    capped = run(rl_spec(rollout_memory_fraction=0.6, **nemo)).rl.colocated
    assert default.rollout_memory_bytes == pytest.approx(0.9 * 85_018_877_624.32)
    assert capped.rollout_memory_bytes == pytest.approx(51_011_326_575, rel=1e-9)
    assert capped.rollout_batch <= default.rollout_batch
    assert capped.phases.generation_s >= default.phases.generation_s
    small = run(rl_spec(rollout_memory_fraction=0.25, **nemo)).rl.colocated
    assert small.rollout_batch < default.rollout_batch  # 2048 rollouts on 16 engines: 128
    assert small.rollout_waves > 1.0
    assert small.phases.generation_s > default.phases.generation_s
    for bad in (0.0, 1.5):
        with pytest.raises(InvalidSpecError) as error:
            rl_spec(rollout_memory_fraction=bad)
        assert error.value.field == "training.rl.rollout_memory_fraction"


def test_a_stated_rollout_tp_spans_trays_within_the_nvlink_domain() -> None:
    """GB200 NVL72 trays hold 4 GPUs but NVLink spans the rack's 72 (the datasheet's scale-up
    domain): NeMo RL's vllm_cfg.tensor_parallel_size 8 on 4-GPU trays is held (rl._rollout
    admits a stated tp up to the scale-up domain); the search stays within a tray."""
    rl = rl_spec(rollout_tp=8)
    layout = plan(tp=1, pp=1, dp=16, cp=1, ep=1, vp=1, micro_batch=1, zero_stage=3,
                  recompute=RecomputeMode.FULL, sequence_parallel=False)
    gb200 = cluster(16, "gb200-nvl72", gpus_per_node=4)
    fixed = estimate(model("llama3.1-8b"), gb200, layout, rl_training(rl)).rl
    assert fixed is not None
    assert fixed.colocated.rollout_tp == 8
    assert fixed.colocated.rollout_replicas == 2
    searched = estimate(model("llama3.1-8b"), gb200, layout, rl_training(rl_spec())).rl
    assert searched is not None
    assert searched.colocated.rollout_tp <= 4


def test_gathered_tensors_count_megatron_keys() -> None:
    """Llama 3.1 8B: 32 dense layers x 6 (qkv, proj, fc1, fc2, two norms) + embedding, final
    norm and output = 195. Qwen3-30B-A3B: 48 MoE layers x (4 + router + 2 x 128 experts) + 3
    = 12,531."""
    from benchmarks.rl_validation import MODELS

    assert gathered_tensors(model("llama3.1-8b")) == 195
    assert gathered_tensors(MODELS["Qwen3-30B-A3B"]) == 12_531
    assert full_gather_s(model("llama3.1-8b"), cluster(16), 1) == 0.0  # nothing to gather


def test_nemo_rl_protocol_moves_the_state_through_the_host(base: Any) -> None:
    """RlWeightSync.OFFLOAD_FULL_GATHER (NeMo RL v0.3.0 refit_policy_generation), by hand on
    Llama 3.1 8B, 16 H100 (ZeRO-3, dp 16), engine tp 4: training weights W = 2,007,564,288 B
    and optimizer state O = 4,015,128,576 B per GPU (the update's memory), engine weights
    E = 16,060,522,496 / 4 = 4,015,130,624 B, host link 64 GB/s (PCIe 5.0).
    - offload (sleep E, weights back W, optimizer back O): 10,037,823,488 / 64e9 = 0.15684 s;
    - reference swap 3 W / 64e9 = 0.094105 s on top of the reference pass;
    - refit: the same three moves (0.15684 s) + the full gather over the 16 shards
      (full_gather_s) + one copy into the engine (2 x 16.06 GB / 3.35 TB/s = 0.009588 s).
    The default (RESHARD) keeps the state resident here and is unchanged."""
    kept = base.rl.colocated
    nemo_rl = run(rl_spec(weight_sync=RlWeightSync.OFFLOAD_FULL_GATHER)).rl
    nemo = nemo_rl.colocated
    assert any("offload_full_gather" in a for a in nemo_rl.assumptions)
    assert not any("offload_full_gather" in a for a in base.rl.assumptions)
    # The reference is swapped in from the host: no bf16 reference shard (16,060,522,496 / 16
    # = 1,003,782,656 B) beside the update's peak.
    assert kept.training_peak_bytes - nemo.training_peak_bytes == pytest.approx(1_003_782_656)
    assert not kept.training_state_offloaded
    assert kept.phases.offload_s == 0.0
    assert nemo.training_state_offloaded
    assert base.memory.weights_bytes == 2_007_564_288
    assert base.memory.optimizer_bytes == 4_015_128_576
    assert nemo.rollout_tp == 4
    assert nemo.phases.offload_s == pytest.approx(0.15684, rel=1e-4)
    assert nemo.phases.reference_s - kept.phases.reference_s == pytest.approx(0.094105,
                                                                              rel=1e-4)
    gather = full_gather_s(model("llama3.1-8b"), cluster(16), 16)
    assert gather > 0
    assert nemo.phases.weight_sync_s == pytest.approx(0.15684 + gather + 0.009588, rel=1e-4)
    assert nemo.step_s > kept.step_s
    assert (nemo.phases.generation_s, nemo.phases.policy_update_s) == (
        kept.phases.generation_s, kept.phases.policy_update_s)


def test_rows_that_state_the_mean_length_state_what_the_step_needs() -> None:
    """Section 4 of benchmarks/rl_validation runs these rows as stated: each names its batch,
    its training layout, a mean prompt and its packing length, and its notes quote the row."""
    from benchmarks.rl_validation import load_rows

    stated = [r for r in load_rows() if r["mean_response_tokens"]]
    assert len(stated) >= 8
    for r in stated:
        for column in ("prompts_per_step", "samples_per_prompt", "mini_batch_prompts",
                       "training_tp", "training_pp", "training_cp", "training_ep",
                       "mean_prompt_tokens", "packed_seq_len", "measured_step_s"):
            assert r[column], (r["id"], column)
        assert int(r["mean_response_tokens"]) < int(r["max_response_tokens"]), r["id"]
        assert r["notes"].startswith("Row '"), r["id"]


def test_rl_step_at_the_stated_length_issue_43_figures() -> None:
    """Issue 43's RL target, computed by the benchmark: the step at each row's stated mean
    response length (nothing solved, nothing fitted). The target (median |error| <= 25% on
    >= 8 rows of >= 2 documents) is not reached: the model is fast on every row (generation
    about -30%, refit -73% to -92% where timed, with NeMo RL's host moves and full-model
    gather; docs/model.md, "RL post-training"). With each recipe's vLLM memory fraction
    (0.6, 0.7, 0.4 or 0.3 of the GPU) the Qwen3-235B rows on H100 have no rollout within an
    8-GPU NVLink domain (their recipes run vLLM tp 16 across nodes) and drop out: 23 rows,
    median 40%. This holds today's figure so that a change that moves it is seen."""
    import statistics

    from benchmarks.rl_validation import phase_errors_of, stated_length_check

    outcomes = stated_length_check()
    errors = [o.step_error for o in outcomes]
    assert len(errors) >= 8
    assert len({o.document for o in outcomes}) >= 2
    median = statistics.median(abs(e) for e in errors)
    assert 0.33 <= median <= 0.45, median
    assert all(e < 0 for e in errors)  # fast on every row: the gap is one-sided
    phases = phase_errors_of(outcomes)
    assert {k: len(v) for k, v in phases.items()} == {
        "generation": 6, "log_probs": 6, "update": 6, "weight_sync": 6}
    assert statistics.median(abs(e) for e in phases["log_probs"]) <= 0.25
    assert all(e < 0 for e in phases["generation"])
    assert all(-0.95 < e < -0.6 for e in phases["weight_sync"])
    assert 0.80 <= statistics.median(abs(e) for e in phases["weight_sync"]) <= 0.92


@pytest.mark.xfail(strict=True, reason="issue 43's RL step target is not reached (median "
                   "|error| 40% on 23 rows of 2 documents with each recipe's vLLM "
                   "gpu_memory_utilization and its rollout tp across NVL72 trays; 38% on 24 "
                   "rows before, 45% before NeMo RL's host moves and full-model gather, 42% "
                   "before the MoE layer's fixed kernel time): see the test above")
def test_rl_step_target_issue_43() -> None:
    import statistics

    from benchmarks.rl_validation import stated_length_check

    outcomes = stated_length_check()
    assert len({o.document for o in outcomes}) >= 2
    assert len(outcomes) >= 8
    assert statistics.median(abs(o.step_error) for o in outcomes) <= 0.25
