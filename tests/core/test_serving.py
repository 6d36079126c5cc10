"""The serving model (issue 19) against hand-computed cases."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from benchmarks.accuracy import seed_accelerators
from service.core import serving as s
from service.core.errors import InvalidSpecError
from service.core.params import count_parameters
from service.core.presets import PRESETS

ACC = seed_accelerators()
H100 = ACC["h100-sxm5-80gb"]
L70 = PRESETS["llama3.1-70b"].model
L8 = PRESETS["llama3.1-8b"].model


def deployment(**changes: object) -> s.Deployment:
    base = {"accelerator": H100, "gpus_per_replica": 1, "tp": 1, "pp": 1,
            "engine": s.Engine.VLLM}
    return s.Deployment(**{**base, **changes})  # type: ignore[arg-type]


def traffic(**changes: object) -> s.Traffic:
    base = {"mode": s.TrafficMode.OFFLINE, "prompt": s.Lengths.of(mean=1024),
            "output": s.Lengths.of(mean=256)}
    return s.Traffic(**{**base, **changes})  # type: ignore[arg-type]


def test_gqa_kv_cache_is_2_layers_kv_heads_head_dim_bytes_per_token() -> None:
    # Llama 3.1 70B: 80 layers, 8 KV heads of 128: 2 x 80 x 8 x 128 x 2 bytes = 327,680.
    whole = s.kv_bytes_per_token_per_gpu(L70, deployment(gpus_per_replica=1))
    assert whole == 2 * 80 * 8 * 128 * 2
    four = deployment(gpus_per_replica=4, tp=4)
    assert s.kv_bytes_per_token_per_gpu(L70, four) == whole / 4
    fp8 = dataclasses.replace(four, kv_cache_precision=s.KvPrecision.FP8)
    assert s.kv_bytes_per_token_per_gpu(L70, fp8) == whole / 8
    # More tp ranks than KV heads: each rank keeps a whole head (8 heads over tp 16).
    wide = s.Deployment(accelerator=ACC["gb200-nvl72"], gpus_per_replica=16, tp=16)
    assert s.kv_bytes_per_token_per_gpu(L70, wide) == 2 * 80 * 1 * 128 * 2


def test_a_memory_bound_decode_step_is_bytes_moved_over_bandwidth_times_efficiency() -> None:
    d = deployment(weight_precision=s.WeightPrecision.FP8)
    r = s._Replica.build(L8, d)
    context = 2000.0
    step, memory_s, compute_s = r.decode_step(1, context)
    weights = count_parameters(L8).total * 1.0  # fp8: one byte per weight
    kv = context * 2 * 32 * 8 * 128 * 2  # Llama 3.1 8B: 32 layers, 8 KV heads of 128
    eff = s.ENGINE_EFFICIENCY[s.Engine.VLLM]
    floor = 32 * 16.0e-6  # 32 layers x the paged decode-attention kernel's fixed 16 us
    assert memory_s == pytest.approx(
        (weights + kv) / (H100.hbm_bytes_per_s * eff.hbm_fraction) + floor, rel=1e-12)
    assert memory_s > 10 * compute_s  # batch 1 is far below the roofline's ridge
    assert step == pytest.approx(memory_s + eff.step_overhead_s, rel=1e-12)  # tp 1: no all-reduce


def test_the_crossover_batch_is_where_the_two_roofline_terms_meet() -> None:
    r = s._Replica.build(L8, deployment())
    # Short contexts: with 1,152 tokens the KV cache read per sequence outweighs its FLOPs
    # (GQA at bf16, about 4 FLOP/byte), and decode never becomes compute-bound.
    assert s._crossover(r, 1152.0) is None
    context = 64.0
    crossover = s._crossover(r, context)
    assert crossover is not None
    _, below_mem, below_flops = r.decode_step(crossover * 0.9, context)
    _, above_mem, above_flops = r.decode_step(crossover * 1.1, context)
    assert below_mem > below_flops
    assert above_flops > above_mem
    _, at_mem, at_flops = r.decode_step(crossover, context)
    assert at_mem == pytest.approx(at_flops, rel=1e-9)


def test_a_moe_decode_step_reads_only_the_experts_its_batch_touches() -> None:
    mixtral = PRESETS["mixtral-8x7b"].model
    r = s._Replica.build(mixtral, deployment(gpus_per_replica=2, tp=2))
    k, experts = mixtral.experts_per_token, mixtral.num_experts
    assert r.weight_bytes_read(1) == pytest.approx(
        r.dense_weight_bytes_per_gpu + r.expert_bytes_per_gpu * k / experts, rel=1e-12)
    assert r.weight_bytes_read(1000) == pytest.approx(r.weights_bytes_per_gpu, rel=1e-9)


def test_speculative_decoding_yields_the_expected_tokens_per_step() -> None:
    r = s._Replica.build(L8, deployment(speculative_acceptance_rate=0.8,
                                        speculative_draft_tokens=4))
    assert r.tokens_per_step() == pytest.approx((1 - 0.8 ** 5) / (1 - 0.8))  # 3.3616
    plain = s.serve(L8, deployment(), traffic(mode=s.TrafficMode.FIXED_BATCH, batch_size=1))
    fast = s.serve(L8, deployment(speculative_acceptance_rate=0.8),
                   traffic(mode=s.TrafficMode.FIXED_BATCH, batch_size=1))
    assert fast.tpot_s.p50 < plain.tpot_s.p50 / 2.5


def test_online_batch_obeys_littles_law() -> None:
    d = deployment(gpus_per_replica=4, tp=4, weight_precision=s.WeightPrecision.FP8)
    t = traffic(mode=s.TrafficMode.ONLINE, requests_per_s=5.0)
    e = s.serve(L70, d, t, replicas=1)
    decode_time = 256 * e.decode_step_s / (1 - 5.0 * e.prefill_s.p50)
    assert e.batch == pytest.approx(5.0 * decode_time, rel=1e-6)
    assert e.requests_per_s == 5.0
    assert not e.saturated


def test_sizing_adds_replicas_with_load_and_says_when_an_slo_cannot_be_met() -> None:
    d = deployment(gpus_per_replica=4, tp=4, weight_precision=s.WeightPrecision.FP8,
                   engine=s.Engine.TRTLLM)
    slo = s.Slo(ttft_p99_s=2.0, tpot_p99_s=0.1)
    light = s.serve(L70, d, traffic(mode=s.TrafficMode.ONLINE, requests_per_s=2.0, slo=slo))
    heavy = s.serve(L70, d, traffic(mode=s.TrafficMode.ONLINE, requests_per_s=200.0, slo=slo))
    assert light.meets_slo
    assert heavy.meets_slo
    assert heavy.replicas > light.replicas
    assert heavy.requests_per_s <= heavy.capacity_requests_per_s
    # A TPOT below one batch-1 decode step cannot be met by any number of replicas.
    floor = s._Replica.build(L70, d).decode_step(1, 1152)[0]
    hopeless = s.serve(L70, d, traffic(mode=s.TrafficMode.ONLINE, requests_per_s=2.0,
                                       slo=s.Slo(tpot_p99_s=floor / 2)))
    assert hopeless.meets_slo is False
    # Sizing stops once a replica is near idle (load x prefill < 1 %), far below MAX_REPLICAS:
    # 10 replicas at 2 req/s with the fitted TensorRT-LLM prefill of 1,024 tokens (48 ms).
    assert hopeless.replicas <= 10


def test_a_model_too_big_for_the_replica_does_not_fit_and_says_so() -> None:
    e = s.serve(L70, deployment(), traffic())
    assert not e.memory.fits
    assert e.memory.max_concurrency == 0
    assert any("does not fit" in w for w in e.warnings)


def test_offline_throughput_is_the_capacity_at_the_largest_batch() -> None:
    d = deployment(gpus_per_replica=4, tp=4, weight_precision=s.WeightPrecision.FP8,
                   max_batch=128)
    e = s.serve(L70, d, traffic())
    assert e.batch == 128
    assert e.output_tokens_per_s == pytest.approx(e.capacity_requests_per_s * 256)


def test_p50_p99_lengths_fit_a_lognormal_whose_mean_exceeds_the_median() -> None:
    lengths = s.Lengths.of(p50=500, p99=4000)
    sigma = math.log(8) / 2.3263478740408408
    assert lengths.mean == pytest.approx(500 * math.exp(sigma ** 2 / 2))
    assert lengths.second_moment > lengths.mean ** 2
    samples = s.Lengths.of(samples=[100, 200, 300])
    assert (samples.mean, samples.p50) == (200, 200)


def test_a_layout_that_does_not_match_the_replica_is_refused() -> None:
    with pytest.raises(InvalidSpecError) as error:
        deployment(gpus_per_replica=4, tp=2)
    assert error.value.field == "deployment.gpus_per_replica"
    with pytest.raises(InvalidSpecError):
        deployment(gpus_per_replica=16, tp=16)  # beyond the H100's 8-GPU NVLink domain


@pytest.mark.parametrize("rate", [1.0, 5.0, 20.0, 80.0])
def test_sizing_is_judged_on_the_latencies_the_answer_reports(rate: float) -> None:
    """The worst honest case of `meets_slo`: a p99 TPOT just above a batch step but below a
    step plus a prefill chunk. Sizing must count replicas against the p99 it reports (with
    the chunk), so an answer that sized itself never says it misses the SLO."""
    d = deployment(gpus_per_replica=4, tp=4, weight_precision=s.WeightPrecision.FP8,
                   engine=s.Engine.TRTLLM)
    r = s._Replica.build(L70, d)
    step = r.decode_step(32, 1152)[0]
    chunk = r.prefill_s(s.PREFILL_CHUNK_TOKENS)
    slo = s.Slo(tpot_p99_s=step + chunk / 2)
    e = s.serve(L70, d, traffic(mode=s.TrafficMode.ONLINE, requests_per_s=rate,
                                prompt=s.Lengths.of(mean=4096), slo=slo))
    assert e.meets_slo is True, (e.replicas, e.tpot_s)
    assert e.tpot_s.p99 <= slo.tpot_p99_s


def test_ttft_grows_smoothly_with_load_and_diverges_only_at_saturation() -> None:
    """The prefill server's utilisation reaches 1 where the replica saturates, not before:
    the old rho = share / (1 - share) hit its cap at a prefill share of one half, so the
    p99 TTFT of this deployment leapt from 0.39 s at 65 % of capacity to 51,818 s at 75 %
    while the answer still said 'not saturated'."""
    d = deployment(gpus_per_replica=4, tp=4, weight_precision=s.WeightPrecision.FP8,
                   kv_cache_precision=s.KvPrecision.FP8, engine=s.Engine.TRTLLM, max_batch=256)
    capacity = s.serve(L70, d, traffic()).capacity_requests_per_s
    shares = [0.05, 0.25, 0.45, 0.65, 0.75, 0.85, 0.95, 0.99]
    answers = [s.serve(L70, d, traffic(mode=s.TrafficMode.ONLINE,
                                       requests_per_s=capacity * x), replicas=1)
               for x in shares]
    p99 = [e.ttft_s.p99 for e in answers]
    assert not any(e.saturated for e in answers)
    assert p99 == sorted(p99)
    unloaded = answers[0].prefill_s.p99
    # M/G/1 with exponential service: the mean wait grows as rho / (1 - rho); at 75 % of
    # capacity the tail is a few prefills, not hours.
    assert p99[shares.index(0.75)] < 20 * unloaded
    # Each step up in load raises the tail by a bounded factor until the last few percent.
    for before, after in itertools.pairwise(p99[:-1]):
        assert after < 8 * before
    assert p99[-1] > 10 * unloaded  # and it does diverge at the edge


def test_a_closed_loop_ttft_is_a_few_prefills_not_a_queue_at_saturation() -> None:
    """Offline (and a fixed concurrency) serve at capacity by construction; their arrivals
    are their own completions, so prefills do not pile up beyond the slots: the wait uses
    rho = the share of time spent in prefill."""
    e = s.serve(L8, deployment(), traffic())
    share = e.requests_per_s * s._Replica.build(L8, deployment()).prefill_s(1024)
    assert 0 < share < 1
    assert e.ttft_s.p50 < 10 * e.prefill_s.p50
    assert e.ttft_s.p99 < 60.0  # it was 10.5 hours


def test_max_concurrency_holds_each_running_sequence_at_its_prompt_and_half_its_output() -> None:
    e = s.serve(L8, deployment(), traffic())
    per_token = 2 * 32 * 8 * 128 * 2  # Llama 3.1 8B, bf16 KV
    assert e.memory.kv_cache_bytes_per_sequence == (1024 + 256 / 2) * per_token
    assert e.memory.max_concurrency == int(
        e.memory.kv_budget_bytes_per_gpu // ((1024 + 128) * per_token))


def test_a_fixed_batch_decodes_in_lock_step_so_its_tpot_is_the_plain_step() -> None:
    batch = 16
    e = s.serve(L8, deployment(), traffic(mode=s.TrafficMode.FIXED_BATCH, batch_size=batch))
    r = s._Replica.build(L8, deployment())
    step, _, _ = r.decode_step(batch, 1024 + 256 / 2)
    assert e.tpot_s.p50 == pytest.approx(step, rel=1e-12)
    assert e.tpot_s.p99 == e.tpot_s.p50  # no prefill chunk lands between lock-step steps
    # Its prefills all come first: the batch's prefill is the TTFT.
    assert e.ttft_s.p50 == pytest.approx(batch * r.prefill_s(1024), rel=1e-12)
    # The same sequences as a closed loop time-share prefill and decode: a longer TPOT.
    closed = s.serve(L8, deployment(), traffic(mode=s.TrafficMode.ONLINE, concurrency=batch))
    assert closed.tpot_s.p50 > e.tpot_s.p50


def test_a_fixed_batch_larger_than_fits_runs_what_fits_and_the_rest_wait() -> None:
    long = {"prompt": s.Lengths.of(mean=8192), "output": s.Lengths.of(mean=2048)}
    fits = s.serve(L70, deployment(gpus_per_replica=4, tp=4), traffic(**long)).memory
    room = fits.max_concurrency
    assert 1 < room < 1000
    big = s.serve(L70, deployment(gpus_per_replica=4, tp=4),
                  traffic(mode=s.TrafficMode.FIXED_BATCH, batch_size=room * 3, **long))
    at_room = s.serve(L70, deployment(gpus_per_replica=4, tp=4),
                      traffic(mode=s.TrafficMode.FIXED_BATCH, batch_size=room, **long))
    assert big.batch == room  # the decode step runs the sequences whose KV cache fits
    assert big.output_tokens_per_s == at_room.output_tokens_per_s
    # The other 2 x room sequences wait for slots, drained at the replica's completion rate.
    assert big.ttft_s.p50 == pytest.approx(at_room.ttft_s.p50 + 2 * room / at_room.requests_per_s,
                                           rel=1e-12)
    assert any(f"batch {room * 3} exceeds the {room} sequences that fit" in w
               for w in big.warnings)


def test_moe_serving_estimates_warn_that_they_are_unvalidated_and_optimistic() -> None:
    mixtral = PRESETS["mixtral-8x7b"].model
    e = s.serve(mixtral, deployment(gpus_per_replica=2, tp=2), traffic())
    assert s.MOE_SERVING_WARNING in e.warnings
    assert s.MOE_SERVING_WARNING not in s.serve(L8, deployment(), traffic()).warnings


def test_fits_needs_one_sequence_at_its_full_length_not_at_steady_state() -> None:
    """The worst honest case of `fits`: a sequence whose KV cache fits while half its output
    is generated, but not at its end, does not fit."""
    per_token = 2 * 32 * 8 * 128 * 2  # Llama 3.1 8B, bf16 KV, one GPU
    budget = s.serve(L8, deployment(), traffic()).memory.kv_budget_bytes_per_gpu
    tokens = budget / per_token  # what the cache holds
    prompt = tokens * 0.7
    # At steady state it holds prompt + output / 2 = 0.95 of the cache; at its end 1.2.
    tight = traffic(prompt=s.Lengths.of(mean=prompt), output=s.Lengths.of(mean=tokens * 0.5))
    e = s.serve(L8, deployment(), tight)
    assert e.memory.kv_budget_bytes_per_gpu == budget  # the workspace does not depend on it
    assert e.memory.fits is False
    assert e.memory.max_concurrency == 0
    assert any(w.startswith("does not fit") for w in e.warnings)
    # With the output shortened so that the whole sequence fits, it fits, once.
    roomy = traffic(prompt=s.Lengths.of(mean=prompt), output=s.Lengths.of(mean=tokens * 0.29))
    assert s.serve(L8, deployment(), roomy).memory.max_concurrency == 1


def test_an_answer_at_a_request_rate_states_the_measured_ttft_gap() -> None:
    """Decision 150: TTFT at a request rate is not validated (the one open-loop document
    measured 1.9-4.7x the model's); the answer says so in its assumptions, and in its
    warnings when a TTFT SLO decides sizing and meets_slo."""
    d = deployment(gpus_per_replica=4, tp=4, weight_precision=s.WeightPrecision.FP8)
    plain = s.serve(L70, d, traffic(mode=s.TrafficMode.ONLINE, requests_per_s=2.0))
    assert s.OPEN_LOOP_TTFT_NOTE in plain.assumptions
    assert s.OPEN_LOOP_TTFT_NOTE not in plain.warnings
    for slo in (s.Slo(ttft_p99_s=2.0), s.Slo(ttft_p50_s=1.0, tpot_p99_s=0.1)):
        judged = s.serve(L70, d, traffic(mode=s.TrafficMode.ONLINE, requests_per_s=2.0,
                                         slo=slo))
        assert s.OPEN_LOOP_TTFT_NOTE in judged.warnings
        assert s.OPEN_LOOP_TTFT_NOTE not in judged.assumptions
    tpot_only = s.serve(L70, d, traffic(mode=s.TrafficMode.ONLINE, requests_per_s=2.0,
                                        slo=s.Slo(tpot_p99_s=0.1)))
    assert s.OPEN_LOOP_TTFT_NOTE in tpot_only.assumptions
    for closed in (traffic(mode=s.TrafficMode.ONLINE, concurrency=8),
                   traffic(mode=s.TrafficMode.FIXED_BATCH, batch_size=8),
                   traffic(mode=s.TrafficMode.OFFLINE)):
        answer = s.serve(L70, d, closed)
        assert s.OPEN_LOOP_TTFT_NOTE not in (*answer.assumptions, *answer.warnings)


def test_the_iteration_wait_is_half_a_step_times_the_chance_a_sequence_is_decoding() -> None:
    """Issue 40's per-request overhead, the part the schedule implies: an open-loop arrival
    waits for the decode step in flight, the residual of a step being uniform on [0, step]
    and a sequence decoding with probability 1 - exp(-batch) (hand-computed)."""
    r = s._Replica.build(L8, deployment())
    busy = 1.0 - math.exp(-2.0)  # 0.864665
    p50, p99 = r.iteration_wait(2.0, 0.020)
    assert p50 == pytest.approx(0.020 * 0.5 * busy) == pytest.approx(0.0086466, rel=1e-4)
    assert p99 == pytest.approx(0.020 * 0.99 * busy) == pytest.approx(0.0171204, rel=1e-4)
    assert r.iteration_wait(0.0, 0.020) == (0.0, 0.0)


def test_an_open_loop_ttft_adds_the_iteration_wait_and_a_closed_loop_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The TTFT of an answer at a request rate is the one without the wait plus exactly
    (1 - exp(-batch)) x step / 2 of its own batch and step; a fixed concurrency's arrivals
    come at an iteration's end, so its TTFT is unchanged."""
    d = deployment()
    online = traffic(mode=s.TrafficMode.ONLINE, requests_per_s=2.0)
    closed = traffic(mode=s.TrafficMode.ONLINE, concurrency=16)
    with_wait, closed_with = s.serve(L8, d, online, replicas=1), s.serve(L8, d, closed)
    monkeypatch.setattr(s._Replica, "iteration_wait", lambda self, batch, step: (0.0, 0.0))
    without, closed_without = s.serve(L8, d, online, replicas=1), s.serve(L8, d, closed)
    assert with_wait.batch == without.batch
    assert with_wait.batch > 0.5
    expected = (1.0 - math.exp(-with_wait.batch)) * with_wait.decode_step_s * 0.5
    assert with_wait.ttft_s.p50 - without.ttft_s.p50 == pytest.approx(expected, rel=1e-9)
    assert expected > 0.002  # a few ms: the step of an 8B model at this batch
    assert with_wait.ttft_s.p99 - without.ttft_s.p99 == pytest.approx(
        expected / 0.5 * 0.99, rel=1e-9)
    assert closed_with.ttft_s == closed_without.ttft_s


def test_decode_attention_costs_a_fixed_16_us_per_layer_so_its_bandwidth_share_grows_with_kv(
) -> None:
    """Issue 40's decode attention efficiency: each layer's kernel takes 16 us plus its KV
    bytes at the engine's HBM efficiency (onnxruntime PR #21414's FA2 paged-decode table).
    Llama 3.1 70B on 4 H100, bf16 KV: 80 layers, 2 KV heads of 128 per GPU, so 81,920 bytes
    per token; at batch 64 and 256 tokens of context the KV read is 1.342 GB, and the
    attention's share of its bandwidth roofline is t_kv / (t_kv + 80 x 16 us) (hand-computed)."""
    d = deployment(gpus_per_replica=4, tp=4)
    r = s._Replica.build(L70, d)
    assert r.attention_floor_s() == pytest.approx(80 * 16.0e-6)
    hbm = H100.hbm_bytes_per_s * s.ENGINE_EFFICIENCY[s.Engine.VLLM].hbm_fraction
    per_token = 2 * 80 * 2 * 128 * 2
    assert r.kv_bytes_per_token_per_gpu == per_token == 81920

    def share(batch: float, context: float) -> float:
        t_kv = batch * context * per_token / hbm
        _, short, _ = r.decode_step(batch, context)
        _, none, _ = r.decode_step(batch, 0.0)
        assert short - none == pytest.approx(t_kv, rel=1e-9)  # the KV bytes at hbm
        return t_kv / (t_kv + 80 * 16.0e-6)

    low, high = share(64, 256.0), share(64, 4096.0)
    assert low == pytest.approx(1 / (1 + 80 * 16.0e-6 * hbm / (64 * 256 * 81920)), rel=1e-12)
    assert low < 0.3 < 0.8 < high  # short KV: the kernel's floor dominates; long: bandwidth


def test_a_moe_decode_step_pays_the_fused_moe_kernel_s_fixed_time_per_moe_layer() -> None:
    """decisions-moe40: each mixture-of-experts layer's fused kernel takes a fixed 29 us on
    top of the touched experts' bytes (vLLM PR #24700's benchmark_moe tables on H100); a dense
    model pays none. Mixtral 8x7B has 32 MoE layers: on 2 pipeline stages each GPU holds 16,
    and its step's memory term carries 16 x 29 us more than the attention floor."""
    mixtral = PRESETS["mixtral-8x7b"].model
    assert count_parameters(mixtral).num_moe_layers == 32
    r = s._Replica.build(mixtral, deployment(gpus_per_replica=2, tp=1, pp=2))
    assert r.moe_layers_per_gpu == 16
    assert r.kernel_floor_s() - r.attention_floor_s() == pytest.approx(16 * 29.0e-6)
    dense = s._Replica.build(L70, deployment(gpus_per_replica=4, tp=4))
    assert dense.moe_layers_per_gpu == 0
    assert dense.kernel_floor_s() == dense.attention_floor_s()
    _, memory, _ = r.decode_step(1.0, 0.0)
    touched = r.weight_bytes_read(1.0) / r.hbm_effective
    assert memory == pytest.approx(2 * (touched + r.kernel_floor_s()), rel=1e-12)


def test_mla_down_projections_are_held_whole_on_every_tensor_parallel_rank() -> None:
    """decisions-moe40: vLLM's and SGLang's DeepSeek attention builds q_a_proj (7168 x 1536)
    and kv_a_proj_with_mqa (7168 x 576) as ReplicatedLinear, so at tp 8 each rank holds them
    whole: 61 layers x 7168 x 2112 = 923,467,776 parameters, of which the 1/tp share was
    already counted. A model without MLA replicates nothing."""
    v3 = PRESETS["deepseek-v3"].model
    assert s._replicated_parameters(v3) == 61 * 7168 * (1536 + 512 + 64) == 923_467_776
    assert s._replicated_parameters(L70) == 0
    d = deployment(gpus_per_replica=8, tp=8, weight_precision=s.WeightPrecision.FP8)
    r = s._Replica.build(v3, d)
    shared = count_parameters(v3).total * 1.0 / 8
    assert r.weights_bytes_per_gpu - shared == pytest.approx(923_467_776 * 7 / 8, rel=1e-12)
    assert r.weights_bytes_per_gpu - r.dense_weight_bytes_per_gpu == r.expert_bytes_per_gpu
