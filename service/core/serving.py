"""Serving: memory, prefill, decode, throughput, latency and sizing of one model deployment.

The model (docs/serving.md) is analytic, per replica of ``gpus_per_replica`` GPUs:

- **Weights** per GPU: parameters x bytes per weight / (tp x pp); int4 is weight-only
  (0.5 byte per weight; AWQ/GPTQ group scales are under 1 % and left out).
- **KV cache** per token: 2 x layers x kv_heads x head_dim x bytes (K and V; Pope et al.
  2022, "Efficiently Scaling Transformer Inference", section 2.1). Tensor parallelism splits
  the KV heads; when there are fewer KV heads than tp ranks, each rank keeps one head
  (vLLM replicates them). Multi-head latent attention caches the compressed latent plus the
  rotary key per layer, replicated on every tp rank (DeepSeek-V2, arXiv 2405.04434 §2.1.2).
- **Decode step** at batch b and context c: the larger of moving the weights plus the batch's
  KV cache through HBM at the engine's bandwidth efficiency, and its FLOPs at the engine's
  compute efficiency (the roofline; Williams et al. 2009), plus two tensor-parallel
  all-reduces per layer (Megatron-LM, Shoeybi et al. 2019 §3) and the engine's per-step
  overhead. The crossover batch is where the two terms meet.
- **Prefill** of L tokens: 2 x active parameters x L plus causal attention
  (2 x 2 x layers x L^2 x heads x head_dim / 2) at the engine's prefill efficiency.
- **Continuous batching** (Orca, Yu et al. OSDI 2022): prefill and decode time-share the
  replica, so a request costs its prefill plus output_tokens x step(b) / b of replica time;
  the replica serves mu(b) = 1 / that. Online traffic is split evenly over replicas; the
  running batch follows Little's law, b = lambda x (time in decode), solved by fixed point.
- **Latency**: prefills queue as an M/G/1 queue per replica (Poisson arrivals, the prompt
  distribution's prefill times as service): the mean wait is Pollaczek-Khinchine's
  rho E[S^2] / (2 E[S] (1 - rho)) with the prefill server's utilisation rho = lambda x
  E[S] / (1 - decode share), the decode share being the decode work at the most efficient
  batch (so rho reaches 1 where the replica saturates; a closed loop takes 0), and the
  tail is the exponential approximation of the waiting time, P(W > t) ~ rho exp(-t rho /
  E[W]) (Kingman 1962; Tijms, "A First Course in Stochastic Models", 2003, §2.5). TPOT is
  the decode step stretched by the share of time the replica spends in prefill; its p99
  adds one prefill chunk (chunked prefill, Sarathi-Serve, Agrawal et al. OSDI 2024) when
  more than 1 % of steps carry one. A fixed batch runs in lock-step (static batching, as
  LMDeploy's and vLLM's offline latency benchmarks run it): all of its prefills come first
  (its TTFT is the batch's prefill), then every step decodes, so its TPOT is the plain step.
- **Speculative decoding** with acceptance rate a and k draft tokens yields
  (1 - a^(k+1)) / (1 - a) tokens per target step (Leviathan et al. ICML 2023, eq. 1); the
  target step verifies k + 1 tokens per sequence (k + 1 times the FLOPs, the same weight
  bytes); the draft model's own cost is left out (EAGLE/MTP heads are a few % of a step).

Everything is in SI units; money is not computed here (the API prices GPU-hours).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from service.core.errors import InvalidSpecError
from service.core.params import count_parameters
from service.core.specs import AcceleratorSpec, ModelSpec, Precision


class WeightPrecision(StrEnum):
    BF16 = "bf16"
    FP8 = "fp8"
    INT4 = "int4"


class KvPrecision(StrEnum):
    BF16 = "bf16"
    FP8 = "fp8"


class Engine(StrEnum):
    VLLM = "vllm"
    SGLANG = "sglang"
    TRTLLM = "trtllm"
    UNKNOWN = "unknown"


class TrafficMode(StrEnum):
    OFFLINE = "offline"
    FIXED_BATCH = "fixed_batch"
    ONLINE = "online"


WEIGHT_BYTES = MappingProxyType({WeightPrecision.BF16: 2.0, WeightPrecision.FP8: 1.0,
                                 WeightPrecision.INT4: 0.5})
"""Bytes per weight: bf16 2, fp8 1 (per-tensor scales are negligible), int4 weight-only 0.5
(AWQ, Lin et al. 2024; group scales of 1 fp16 per 128 weights add 0.1 % and are left out)."""
KV_BYTES = MappingProxyType({KvPrecision.BF16: 2.0, KvPrecision.FP8: 1.0})
COMPUTE_PRECISION = MappingProxyType({WeightPrecision.BF16: Precision.BF16,
                                      WeightPrecision.FP8: Precision.FP8,
                                      WeightPrecision.INT4: Precision.BF16})
"""Matmul precision: int4 weights are dequantised to bf16 in the kernel (weight-only)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineEfficiency:
    """What an engine achieves of the datasheet, and what it costs per step.

    ``hbm_fraction``: decode's achieved share of HBM bandwidth (model bandwidth utilisation);
    ``compute_fraction``: prefill's and large-batch decode's share of dense peak FLOP/s;
    ``step_overhead_s``: scheduling and sampling per decode step, outside the GPU kernels;
    ``gpu_memory_fraction``: the share of GPU memory the engine takes for weights, cache and
    workspace (vLLM's ``gpu_memory_utilization`` default 0.9; SGLang's
    ``mem_fraction_static`` 0.88; TensorRT-LLM's ``free_gpu_memory_fraction`` 0.9 of what
    is left after weights, taken here as 0.9 of the whole)."""

    hbm_fraction: float
    compute_fraction: float
    step_overhead_s: float
    gpu_memory_fraction: float
    basis: str


ENGINE_PRIORS: Mapping[Engine, EngineEfficiency] = MappingProxyType({
    Engine.TRTLLM: EngineEfficiency(
        hbm_fraction=0.80, compute_fraction=0.60, step_overhead_s=1.0e-3,
        gpu_memory_fraction=0.90,
        basis="prior: decode kernels near the HBM roofline (NVIDIA, 'Mastering LLM Techniques: "
              "Inference Optimization', 2023, defines MBU and reports 60-80 % on H100); "
              "not yet fitted"),
    Engine.SGLANG: EngineEfficiency(
        hbm_fraction=0.75, compute_fraction=0.55, step_overhead_s=2.0e-3,
        gpu_memory_fraction=0.88,
        basis="prior between TensorRT-LLM and vLLM (SGLang, Zheng et al. 2024, overlapped "
              "CPU scheduling); not yet fitted"),
    Engine.VLLM: EngineEfficiency(
        hbm_fraction=0.70, compute_fraction=0.50, step_overhead_s=3.0e-3,
        gpu_memory_fraction=0.90,
        basis="prior (vLLM, Kwon et al. SOSP 2023; CPU scheduling per step); not yet fitted"),
    Engine.UNKNOWN: EngineEfficiency(
        hbm_fraction=0.60, compute_fraction=0.45, step_overhead_s=4.0e-3,
        gpu_memory_fraction=0.88,
        basis="conservative prior for an unnamed engine: below every named one"),
})
"""The priors, before any fit (their basis in each entry): what an engine keeps when no
evaluable published row was run with it, and what ``benchmarks/serving_validation.py``
starts from (its "before" figures, and every leave-one-source-out fold without that
engine's rows)."""

ENGINE_EFFICIENCY: Mapping[Engine, EngineEfficiency] = MappingProxyType({
    Engine.TRTLLM: EngineEfficiency(
        hbm_fraction=0.95, compute_fraction=0.50, step_overhead_s=3.0e-3,
        gpu_memory_fraction=0.90,
        basis="fitted on 5 rows of 1 document: TensorRT-LLM docs: Performance Tuning Guide "
              "(case study Llama-3.3-70B TP4 on 4 x H100-SXM-80GB; TensorRT-LLM 0.16.0), "
              "2,048 in / 2,048 out: the batch-1 latency runs of the tuned bf16 engine, the FP8 "
              "engine, the FP8 engine with FP8 KV cache and the tuned FP8 engine (output tokens/s "
              "= 2,048 / (TTFT + 2,047 x ITL), mean TTFT and ITL; rows "
              "trtllm_tuneguide_l33_70b_h100x4_bf16_mbs512_b1_2048_2048, "
              "trtllm_tuneguide_l33_70b_h100x4_fp8_b1_2048_2048, "
              "trtllm_tuneguide_l33_70b_h100x4_fp8_fp8kv_b1_2048_2048 and "
              "trtllm_tuneguide_l33_70b_h100x4_fp8_tuned_b1_2048_2048) and the bf16 engine with "
              "max batch size 64 (1,000 requests through fixed batches of 64; row "
              "trtllm_tuneguide_l33_70b_h100x4_bf16_mbs64_1000x2048_2048)"),
    Engine.SGLANG: ENGINE_PRIORS[Engine.SGLANG],
    Engine.VLLM: EngineEfficiency(
        hbm_fraction=0.92, compute_fraction=0.55, step_overhead_s=3.0e-3,
        gpu_memory_fraction=0.90,
        basis="fitted on 11 rows of 3 documents: vLLM blog: The State of FP8 KV-Cache and "
              "Attention Quantization in vLLM (2026-04-22), Table 4 (Llama 3.1 8B, 1 H100, "
              "concurrency 8, ~20k in / ~2k out, bf16 and fp8 KV; output tokens/s, median TPOT "
              "and TTFT; rows vllmblog_fp8kv_llama8b_bf16kv_c8 and "
              "vllmblog_fp8kv_llama8b_fp8kv_c8); AMD ROCm developer hub: Performance results "
              "(vLLM on Instinct MI300X), Latency tables of the vLLM 0.9.1 and 0.10.2 containers "
              "(Llama 3.1 70B FP8, TP8 on 8 MI300X, batch 1-4, 128 in / 2,048 out; output "
              "tokens/s = batch x 2,048 / published latency; rows "
              "amd_mi300x_l31_70b_fp8_tp8_v091_b1_128_2048, "
              "amd_mi300x_l31_70b_fp8_tp8_v091_b2_128_2048, "
              "amd_mi300x_l31_70b_fp8_tp8_v0102_b1_128_2048, "
              "amd_mi300x_l31_70b_fp8_tp8_v0102_b2_128_2048 and "
              "amd_mi300x_l31_70b_fp8_tp8_v0102_b4_128_2048); and vLLM's performance-benchmark "
              "CI (Buildkite builds 9513 and 9523), Latency tests (Llama 3.1 8B TP1 and Llama 3 "
              "70B TP4 on H200 and A100-SXM4-80GB, bf16, batch 8, 32 in / 128 out; output "
              "tokens/s = 8 x 128 / mean latency; rows vllmci_h200_llama8b_tp1_b8_32_128, "
              "vllmci_h200_llama70b_tp4_b8_32_128, vllmci_a100_llama8b_tp1_b8_32_128 and "
              "vllmci_a100_llama70b_tp4_b8_32_128)"),
    Engine.UNKNOWN: EngineEfficiency(
        hbm_fraction=0.75, compute_fraction=0.50, step_overhead_s=3.0e-3,
        gpu_memory_fraction=0.88,
        basis="conservative: per parameter the least efficient of trtllm, sglang and vllm "
              "(lowest HBM and compute fractions, highest step overhead, smallest memory "
              "fraction); never fitted"),
})
"""What the model uses. Fitted per named engine by ``benchmarks/serving_validation.py``
(grid search on the squared log error of output tokens/s, TPOT and TTFT over the evaluable
rows of ``benchmarks/data/serving-runs.csv`` run with that engine); ``sglang`` has no
evaluable dense row yet and keeps its prior (its one dense document, DataCrunch's H200
runs, sends every request at once and does not state how many ran together);
``unknown`` is the conservative combination of the three named engines, never fitted (the
NVIDIA NIM rows, whose engine is not stated, and the LMDeploy TurboMind rows are evaluated
with it and fit nothing). The leave-one-source-out accuracy is in docs/serving.md;
``tests/core/test_serving_validation.py`` checks this table equals the benchmark's in-sample
fit."""

WORKSPACE_TOKENS = 8192
"""Tokens one forward pass may hold for activation workspace (vLLM's and SGLang's default
``max_num_batched_tokens`` / chunked-prefill budget is 2,048-16,384; 8,192 is the middle)."""
PREFILL_CHUNK_TOKENS = 2048
"""Chunked prefill's chunk (Sarathi-Serve evaluates 512-2,048; vLLM V1 online default 2,048)."""
DEFAULT_DRAFT_TOKENS = 4
"""Draft tokens per speculative step when not given (EAGLE and Medusa evaluate 3-5)."""
MAX_REPLICAS = 100_000
"""Sizing gives up beyond this many replicas (and says so)."""
TAIL_P99 = 0.99
P99_TPOT_STEP_SHARE = 0.01
"""The p99 TPOT includes a prefill chunk when more than this share of steps carry one."""

MOE_SERVING_WARNING = (
    "mixture-of-experts serving is not validated: on the only published MoE runs we hold "
    "(DeepSeek-R1 on 8 x H200 and 8 x MI300X with vLLM 0.7 and SGLang 0.4, early 2025; "
    "dstack's benchmark), measured output tokens/s was 2.8-5.8x below this model's and median TTFT "
    "18x or more above it; read throughput as an upper bound and size with margin")
"""Decision 144 (docs/serving.md, Validation): the model's MoE decode reads only the experts
a batch touches at the engine's dense efficiencies; what MoE kernels at small per-rank
shapes and expert routing cost on top is not modelled, and the one document measuring it
(dstack, 'DeepSeek R1 inference performance: MI300X vs. H200', 2025-03-18, raw data
dstackai/benchmarks@7f37e66 Deepseek-R1/raw_data/online_results.csv) shows the gap above;
those rows are evaluated, and fit nothing."""

OPEN_LOOP_TTFT_NOTE = (
    "time to first token at a request rate is not validated: on the only published runs we "
    "hold at fixed request rates (SGLang, Llama 3.3 70B on 4 x H200 and Llama 3.1 405B on "
    "8 x H200, 1-8 requests/s; DataCrunch's h200-benchmarks), the measured median TTFT was "
    "1.9-4.7x this model's p50 (45-130 ms more per request even at light load, and growing "
    "sooner with load); allow that margin before relying on a TTFT SLO")
"""Decision 150 (docs/serving.md, "Latency under open-loop load"): the model's TTFT is the
prefill plus an M/G/1 wait; what an engine adds per request (the wait for the running
iteration, scheduling, tokenisation and streaming) is not modelled, and the one document
measuring TTFT at fixed Poisson rates shows the gap above (11 rows the model serves; they fit
nothing). An answer at a request rate states it in its assumptions, and in its warnings when
a TTFT SLO is given (sizing and ``meets_slo`` then rest on it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    accelerator: AcceleratorSpec
    gpus_per_replica: int
    tp: int = 1
    pp: int = 1
    weight_precision: WeightPrecision = WeightPrecision.BF16
    kv_cache_precision: KvPrecision = KvPrecision.BF16
    engine: Engine = Engine.UNKNOWN
    max_batch: int | None = None
    prefix_cache_hit_fraction: float = 0.0
    """Share of prompt tokens served from the prefix cache (0 when prefix caching is off)."""
    speculative_acceptance_rate: float | None = None
    speculative_draft_tokens: int = DEFAULT_DRAFT_TOKENS

    def __post_init__(self) -> None:
        if self.tp * self.pp != self.gpus_per_replica:
            raise InvalidSpecError(
                f"tp x pp ({self.tp} x {self.pp}) must equal gpus_per_replica "
                f"({self.gpus_per_replica})", field="deployment.gpus_per_replica")
        if self.tp > self.accelerator.scaleup_domain_size:
            raise InvalidSpecError(
                f"tp {self.tp} is larger than the accelerator's scale-up domain "
                f"({self.accelerator.scaleup_domain_size} GPUs): tensor parallelism stays "
                "inside one NVLink domain", field="deployment.tp")
        if not 0.0 <= self.prefix_cache_hit_fraction < 1.0:
            raise InvalidSpecError("prefix_cache_hit_fraction must be in [0, 1)",
                                   field="deployment.prefix_cache_hit_fraction")
        rate = self.speculative_acceptance_rate
        if rate is not None and not 0.0 <= rate < 1.0:
            raise InvalidSpecError("speculative acceptance rate must be in [0, 1)",
                                   field="deployment.speculative.acceptance_rate")


@dataclass(frozen=True, slots=True, kw_only=True)
class Lengths:
    """A token-length distribution: its mean, and p50/p99 where known (else the mean)."""

    mean: float
    p50: float
    p99: float
    second_moment: float

    @classmethod
    def of(cls, mean: float | None = None, p50: float | None = None, p99: float | None = None,
           samples: Sequence[float] = ()) -> Lengths:
        """From a mean, from p50 and p99, or from samples. With only p50 and p99 the mean and
        spread are those of a log-normal through the two (a common fit to prompt lengths)."""
        if samples:
            ordered = sorted(samples)
            n = len(ordered)
            m = sum(ordered) / n
            return cls(mean=m, p50=ordered[n // 2], p99=ordered[min(n - 1, int(0.99 * n))],
                       second_moment=sum(x * x for x in ordered) / n)
        if p50 is not None and p99 is not None:
            sigma = math.log(p99 / p50) / 2.3263478740408408 if p99 > p50 else 0.0
            m = p50 * math.exp(sigma * sigma / 2)
            return cls(mean=m, p50=p50, p99=p99,
                       second_moment=p50 * p50 * math.exp(2 * sigma * sigma))
        if mean is None:
            raise InvalidSpecError("a length needs a mean, p50 and p99, or samples",
                                   field="traffic")
        return cls(mean=mean, p50=p50 or mean, p99=p99 or mean, second_moment=mean * mean)


@dataclass(frozen=True, slots=True, kw_only=True)
class Slo:
    ttft_p50_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_p50_s: float | None = None
    tpot_p99_s: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Traffic:
    mode: TrafficMode
    prompt: Lengths
    output: Lengths
    requests_per_s: float | None = None
    concurrency: int | None = None
    batch_size: int | None = None
    slo: Slo = field(default_factory=Slo)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingMemory:
    weights_bytes_per_gpu: float
    kv_cache_bytes_per_token: float
    """Per GPU, for one token of one sequence."""
    kv_cache_bytes_per_sequence: float
    """Per GPU, for one sequence at the mean prompt + output length."""
    workspace_bytes_per_gpu: float
    usable_bytes_per_gpu: float
    kv_budget_bytes_per_gpu: float
    max_concurrency: int
    fits: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Quantiles:
    p50: float
    p99: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingEstimate:
    memory: ServingMemory
    prefill_s: Quantiles
    """One request's prefill at the prompt distribution's p50 and p99, unloaded."""
    decode_step_s: float
    """One decode step at the running batch."""
    decode_step_memory_s: float
    decode_step_compute_s: float
    crossover_batch: float | None
    """Batch above which decode is compute-bound; None when it never is."""
    batch: float
    """Running batch (sequences in decode) per replica."""
    output_tokens_per_s: float
    """Per replica, at the load served."""
    input_tokens_per_s: float
    requests_per_s: float
    """Per replica, served (online: the offered load; otherwise the capacity)."""
    capacity_requests_per_s: float
    """Per replica at the largest batch that fits (or max_batch)."""
    ttft_s: Quantiles
    tpot_s: Quantiles
    e2e_s: Quantiles
    replicas: int
    meets_slo: bool | None
    saturated: bool
    warnings: tuple[str, ...]
    assumptions: tuple[str, ...]


def _kv_heads_per_gpu(model: ModelSpec, tp: int) -> float:
    return max(1.0, model.num_kv_heads / tp)


def kv_bytes_per_token_per_gpu(model: ModelSpec, deployment: Deployment) -> float:
    """K and V of every layer this GPU holds, for one token (module docstring)."""
    layers = model.num_layers / deployment.pp
    width = KV_BYTES[deployment.kv_cache_precision]
    if model.mla is not None:  # latent + rotary key, replicated on each tp rank
        return layers * (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * width
    head_dim = model.head_dim or model.hidden_size // model.num_heads
    return 2.0 * layers * _kv_heads_per_gpu(model, deployment.tp) * head_dim * width


def _attention_width(model: ModelSpec) -> float:
    """heads x (query-key + value head dims) / 2: the per-token, per-context attention FLOPs
    are 2 x 2 x this x layers (QK^T and AV)."""
    if model.mla is not None:
        return model.num_heads * (model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
                                  + model.mla.v_head_dim) / 2
    head_dim = model.head_dim or model.hidden_size // model.num_heads
    return float(model.num_heads * head_dim)


@dataclass(frozen=True, slots=True)
class _Replica:
    """Per-replica constants of one model on one deployment."""

    model: ModelSpec
    deployment: Deployment
    eff: EngineEfficiency
    weights_bytes_per_gpu: float
    dense_weight_bytes_per_gpu: float
    expert_bytes_per_gpu: float
    matmul_flops_per_token_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    peak_flops_per_s: float
    hbm_bytes_per_s: float

    @classmethod
    def build(cls, model: ModelSpec, deployment: Deployment) -> _Replica:
        counts = count_parameters(model)
        width = WEIGHT_BYTES[deployment.weight_precision]
        gpus = deployment.tp * deployment.pp
        experts_total = counts.routed_expert_total
        expert_bytes = experts_total * width / gpus
        weights = counts.total * width / gpus
        active_matmul = counts.active - counts.embedding
        precision = COMPUTE_PRECISION[deployment.weight_precision]
        acc = deployment.accelerator
        if precision not in acc.peak_flops_per_s:
            raise InvalidSpecError(
                f"accelerator {acc.id} has no {precision} peak for "
                f"{deployment.weight_precision} weights", field="deployment.weight_precision")
        return cls(model=model, deployment=deployment, eff=ENGINE_EFFICIENCY[deployment.engine],
                   weights_bytes_per_gpu=weights,
                   dense_weight_bytes_per_gpu=weights - expert_bytes,
                   expert_bytes_per_gpu=expert_bytes,
                   matmul_flops_per_token_per_gpu=2.0 * active_matmul / gpus,
                   kv_bytes_per_token_per_gpu=kv_bytes_per_token_per_gpu(model, deployment),
                   peak_flops_per_s=acc.peak_for(precision),
                   hbm_bytes_per_s=acc.hbm_bytes_per_s)

    def weight_bytes_read(self, batch: float) -> float:
        """Weights one decode step reads: every dense weight, and the routed experts the
        batch touches: E x (1 - (1 - k/E)^(b x tokens)) of E experts when each of b tokens
        picks k uniformly (a balanced router)."""
        model = self.model
        if model.num_experts <= 0 or self.expert_bytes_per_gpu == 0:
            return self.weights_bytes_per_gpu
        experts, k = model.num_experts, model.experts_per_token
        touched = 1.0 - float((1.0 - k / experts) ** max(batch, 1.0))
        return self.dense_weight_bytes_per_gpu + self.expert_bytes_per_gpu * touched

    def tp_allreduce_s(self, tokens: float) -> float:
        """Two all-reduces per layer of tokens x hidden x 2 bytes over NVLink (ring:
        2 (tp - 1) / tp of the bytes), each with a fixed latency of 20 us (the training
        model's fitted collective latency, service/core/calibration.py)."""
        tp = self.deployment.tp
        if tp == 1:
            return 0.0
        layers = self.model.num_layers / self.deployment.pp
        volume = tokens * self.model.hidden_size * 2.0
        bandwidth = self.deployment.accelerator.scaleup_bytes_per_s
        return 2.0 * layers * (20e-6 + 2.0 * (tp - 1) / tp * volume / bandwidth)

    def decode_step(self, batch: float, context: float) -> tuple[float, float, float]:
        """(step, memory term, compute term) in seconds for ``batch`` sequences at mean
        ``context`` tokens; the step covers every pipeline stage in turn."""
        d = self.deployment
        spec_tokens = 1.0
        if d.speculative_acceptance_rate is not None:
            spec_tokens = d.speculative_draft_tokens + 1.0
        layers_per_gpu = self.model.num_layers / d.pp
        attention = (4.0 * layers_per_gpu * _attention_width(self.model) * context
                     / d.tp)
        flops = batch * spec_tokens * (self.matmul_flops_per_token_per_gpu + attention)
        kv = batch * context * self.kv_bytes_per_token_per_gpu
        memory_s = (self.weight_bytes_read(batch * spec_tokens) + kv) / (
            self.hbm_bytes_per_s * self.eff.hbm_fraction)
        compute_s = flops / (self.peak_flops_per_s * self.eff.compute_fraction)
        stage = max(memory_s, compute_s)
        step = d.pp * stage + self.tp_allreduce_s(batch * spec_tokens) + self.eff.step_overhead_s
        return step, d.pp * memory_s, d.pp * compute_s

    def tokens_per_step(self) -> float:
        rate = self.deployment.speculative_acceptance_rate
        if rate is None:
            return 1.0
        k = self.deployment.speculative_draft_tokens
        return float((1.0 - rate ** (k + 1)) / (1.0 - rate))

    def prefill_s(self, prompt_tokens: float) -> float:
        """Compute-bound prefill of one prompt (the uncached part), every stage in turn."""
        d = self.deployment
        tokens = prompt_tokens * (1.0 - d.prefix_cache_hit_fraction)
        layers_per_gpu = self.model.num_layers / d.pp
        attention = 2.0 * layers_per_gpu * _attention_width(self.model) * tokens * (
            prompt_tokens) / d.tp  # causal: half of 4 x layers x width x L x L
        flops = tokens * self.matmul_flops_per_token_per_gpu + attention
        compute = flops / (self.peak_flops_per_s * self.eff.compute_fraction)
        weights = self.weights_bytes_per_gpu / (self.hbm_bytes_per_s * self.eff.hbm_fraction)
        return d.pp * max(compute, weights) + self.tp_allreduce_s(tokens)


def _memory(r: _Replica, traffic: Traffic) -> ServingMemory:
    d = r.deployment
    acc = d.accelerator
    usable = acc.memory_bytes * r.eff.gpu_memory_fraction
    h = r.model.hidden_size
    ffn = max(r.model.ffn_hidden_size, r.model.moe_ffn_hidden_size or 0)
    # Activations of one forward pass of WORKSPACE_TOKENS: residual, QKV and attention
    # output (4h) and the MLP's gate/up/product (3 x ffn / tp), bf16, plus the logits of
    # the sampled tokens (vocab x 4 bytes for up to 256 sequences).
    workspace = WORKSPACE_TOKENS * (4 * h + 3 * ffn / d.tp) * 2.0 + 256 * r.model.vocab_size * 4
    budget = usable - r.weights_bytes_per_gpu - workspace
    per_sequence = (traffic.prompt.mean + traffic.output.mean / 2) * r.kv_bytes_per_token_per_gpu
    # Many sequences share the cache at steady state, but one must still fit at its end.
    fits = budget >= (traffic.prompt.mean + traffic.output.mean) * r.kv_bytes_per_token_per_gpu
    max_concurrency = max(1, int(budget // per_sequence)) if fits else 0
    return ServingMemory(
        weights_bytes_per_gpu=r.weights_bytes_per_gpu,
        kv_cache_bytes_per_token=r.kv_bytes_per_token_per_gpu,
        kv_cache_bytes_per_sequence=per_sequence, workspace_bytes_per_gpu=workspace,
        usable_bytes_per_gpu=usable, kv_budget_bytes_per_gpu=max(budget, 0.0),
        max_concurrency=max_concurrency, fits=fits)


def _crossover(r: _Replica, context: float) -> float | None:
    """Batch where the decode step's compute term equals its memory term (dense weights;
    for MoE an approximation with every expert read)."""
    step_mem_per_seq = context * r.kv_bytes_per_token_per_gpu / (
        r.hbm_bytes_per_s * r.eff.hbm_fraction)
    attention = 4.0 * r.model.num_layers / r.deployment.pp * _attention_width(r.model) * (
        context) / r.deployment.tp
    step_flops_per_seq = (r.matmul_flops_per_token_per_gpu + attention) / (
        r.peak_flops_per_s * r.eff.compute_fraction)
    gap = step_flops_per_seq - step_mem_per_seq
    if gap <= 0:
        return None
    return r.weights_bytes_per_gpu / (r.hbm_bytes_per_s * r.eff.hbm_fraction) / gap


def _capacity(r: _Replica, traffic: Traffic, batch: float) -> float:
    """Requests per second one replica completes at ``batch`` (prefill + decode share)."""
    context = traffic.prompt.mean + traffic.output.mean / 2
    step, _, _ = r.decode_step(batch, context)
    decode_per_request = traffic.output.mean / r.tokens_per_step() * step / batch
    return 1.0 / (r.prefill_s(traffic.prompt.mean) + decode_per_request)


@dataclass(frozen=True, slots=True)
class _Load:
    batch: float
    step_s: float
    prefill_share: float
    saturated: bool


def _online_load(r: _Replica, traffic: Traffic, per_replica_rps: float,
                 largest: float) -> _Load:
    """The running batch at ``per_replica_rps`` by Little's law: b = rate x decode time,
    decode time = output x step(b) / (1 - prefill share), fixed point by bisection."""
    context = traffic.prompt.mean + traffic.output.mean / 2
    prefill_share = per_replica_rps * r.prefill_s(traffic.prompt.mean)
    if prefill_share >= 1.0:
        step, _, _ = r.decode_step(largest, context)
        return _Load(largest, step, min(prefill_share, 1.0), True)
    steps = traffic.output.mean / r.tokens_per_step()

    def excess(b: float) -> float:
        step, _, _ = r.decode_step(b, context)
        return per_replica_rps * steps * step / (1.0 - prefill_share) - b

    if excess(largest) > 0:
        step, _, _ = r.decode_step(largest, context)
        return _Load(largest, step, prefill_share, True)
    low, high = 1e-9, largest
    for _ in range(60):
        mid = (low + high) / 2
        if excess(mid) > 0:
            low = mid
        else:
            high = mid
    batch = max(high, 1.0)
    step, _, _ = r.decode_step(batch, context)
    return _Load(high, step, prefill_share, False)


def _decode_work_share(per_replica_rps: float, capacity: float, prefill_share: float) -> float:
    """The share of an open-loop replica's time its decode work needs at its most efficient
    batch: lambda x output x step(b*) / b*, which is lambda / capacity - lambda E[S] since
    capacity = 1 / (E[S] + output x step(b*) / b*) (``_capacity``). The prefill server has
    the rest, so its utilisation reaches 1 exactly where the replica saturates."""
    return max(per_replica_rps / capacity - prefill_share, 0.0)


def _ttft(r: _Replica, traffic: Traffic, per_replica_rps: float,
          prefill_share: float, decode_share: float) -> Quantiles:
    """Prefill of the p50/p99 prompt plus the M/G/1 wait (module docstring), with the prefill
    server's utilisation rho = lambda E[S] / (1 - decode share): an open loop passes
    ``_decode_work_share``, a closed loop (a fixed concurrency, offline) 0, since its
    arrivals are its own completions and never pile up beyond its slots (rho is then the
    share of time spent in prefill)."""
    p50, p99 = r.prefill_s(traffic.prompt.p50), r.prefill_s(traffic.prompt.p99)
    mean = r.prefill_s(traffic.prompt.mean)
    if per_replica_rps <= 0:
        return Quantiles(p50=p50, p99=p99)
    # Service time second moment: prefill time scales with tokens (linear part dominates).
    ratio = traffic.prompt.second_moment / max(traffic.prompt.mean ** 2, 1e-12)
    s2 = mean * mean * ratio
    rho = min(prefill_share / max(1.0 - decode_share, 1e-9), 0.999999)
    wait_mean = per_replica_rps * s2 / (2.0 * (1.0 - rho))

    def wait_at(p: float) -> float:
        if rho <= 1.0 - p or wait_mean <= 0:
            return 0.0
        return wait_mean / rho * math.log(rho / (1.0 - p))

    return Quantiles(p50=p50 + wait_at(0.5), p99=p99 + wait_at(TAIL_P99))


def serve(model: ModelSpec, deployment: Deployment, traffic: Traffic,
          replicas: int | None = None) -> ServingEstimate:
    """The serving estimate for ``traffic``; online traffic is sized (the fewest replicas
    that keep every replica below saturation and meet the SLOs) unless ``replicas`` is
    given."""
    r = _Replica.build(model, deployment)
    memory = _memory(r, traffic)
    warnings: list[str] = []
    assumptions = [
        f"engine {deployment.engine}: {r.eff.basis}",
        f"continuous batching: prefill and decode time-share each replica; prefill waits "
        f"are M/G/1 (Pollaczek-Khinchine mean, exponential tail); chunked prefill of "
        f"{PREFILL_CHUNK_TOKENS} tokens for the p99 TPOT",
        f"KV cache at steady state: each running sequence holds the mean prompt and half "
        f"the mean output ({traffic.prompt.mean:.0f} + {traffic.output.mean / 2:.0f} tokens; "
        f"paged KV blocks are allocated as tokens arrive)",
    ]
    if deployment.speculative_acceptance_rate is not None:
        assumptions.append(
            f"speculative decoding: {r.tokens_per_step():.2f} tokens per target step "
            f"({deployment.speculative_draft_tokens} draft tokens, acceptance "
            f"{deployment.speculative_acceptance_rate:g}); the draft model's cost is left out")
    warnings.extend(unvalidated_warnings(model, traffic))
    if (traffic.mode is TrafficMode.ONLINE and traffic.requests_per_s is not None
            and OPEN_LOOP_TTFT_NOTE not in warnings):
        assumptions.append(OPEN_LOOP_TTFT_NOTE)
    largest = float(max(memory.max_concurrency, 1))
    if deployment.max_batch is not None:
        largest = float(min(largest, deployment.max_batch))
    if not memory.fits:
        warnings.append(
            f"does not fit: weights take {memory.weights_bytes_per_gpu / 1e9:.1f} GB of the "
            f"{memory.usable_bytes_per_gpu / 1e9:.1f} GB the engine uses per GPU, leaving no "
            f"room for one sequence's KV cache at its full {traffic.prompt.mean:.0f} + "
            f"{traffic.output.mean:.0f} tokens; use more GPUs per replica or lower precision")
    context = traffic.prompt.mean + traffic.output.mean / 2
    capacity = _capacity(r, traffic, largest)
    crossover = _crossover(r, context)

    if traffic.mode is TrafficMode.ONLINE and traffic.requests_per_s is not None:
        count = replicas or _size(r, traffic, largest, capacity)
        per_replica = traffic.requests_per_s / count
        load = _online_load(r, traffic, per_replica, largest)
        ttft = _ttft(r, traffic, per_replica, load.prefill_share,
                     _decode_work_share(per_replica, capacity, load.prefill_share))
        batch, step, served = load.batch, load.step_s, per_replica
        saturated = load.saturated
    else:
        if traffic.mode is TrafficMode.FIXED_BATCH:
            requested = float(traffic.batch_size or 1)
        elif traffic.mode is TrafficMode.ONLINE:  # a fixed concurrency (closed loop)
            requested = float(traffic.concurrency or 1)
        else:
            requested = largest
        # Sequences beyond those whose KV cache fits wait for a slot (the engine admits
        # what fits, as vLLM's and TensorRT-LLM's schedulers do), so the batch that runs is
        # at most ``largest``.
        batch = min(requested, largest)
        count = replicas or 1
        step, _, _ = r.decode_step(batch, context)
        served = _capacity(r, traffic, batch)
        load = _Load(batch, step, served * r.prefill_s(traffic.prompt.mean), False)
        saturated = False
        if traffic.mode is TrafficMode.FIXED_BATCH:
            ttft = Quantiles(p50=r.prefill_s(traffic.prompt.p50) * batch,
                             p99=r.prefill_s(traffic.prompt.p99) * batch)
        else:
            ttft = _ttft(r, traffic, served, load.prefill_share, 0.0)
        waiting = requested - batch
        if waiting > 0:
            # The extra sequences wait in line, and by Little's law the line drains at the
            # replica's completion rate.
            queue_s = waiting / served
            ttft = Quantiles(p50=ttft.p50 + queue_s, p99=ttft.p99 + queue_s)
            what = ("batch" if traffic.mode is TrafficMode.FIXED_BATCH else "concurrency")
            warnings.append(
                f"{what} {requested:g} exceeds the {batch:g} sequences that fit; "
                f"{waiting:g} wait about {queue_s:.3g} s for a slot")
    if traffic.mode is TrafficMode.FIXED_BATCH:
        # Lock-step: the batch's prefills all run before its first decode step (they are in
        # the TTFT above), so no decode step waits on a prefill or carries a chunk.
        tpot = _tpot(r, traffic, step, 0.0, 0.0)
    else:
        tpot = _tpot(r, traffic, step, load.prefill_share, served)
    # A request's decode time sums hundreds of steps, so its tail is the mean step times the
    # tail output length (the p99 step is a rare chunk, not every step's).
    e2e = Quantiles(p50=ttft.p50 + tpot.p50 * max(traffic.output.p50 - 1, 0),
                    p99=ttft.p99 + tpot.p50 * max(traffic.output.p99 - 1, 0))
    within = _within_slo(traffic.slo, ttft, tpot)
    meets = None if within is None else (not saturated and memory.fits and within)
    _, memory_s, compute_s = r.decode_step(load.batch, context)
    if saturated:
        warnings.append(f"saturated: {served:.3g} requests/s per replica exceeds the replica's "
                        f"capacity of {capacity:.3g}")
    return ServingEstimate(
        memory=memory, prefill_s=Quantiles(p50=r.prefill_s(traffic.prompt.p50),
                                           p99=r.prefill_s(traffic.prompt.p99)),
        decode_step_s=step, decode_step_memory_s=memory_s, decode_step_compute_s=compute_s,
        crossover_batch=crossover, batch=load.batch,
        output_tokens_per_s=served * traffic.output.mean,
        input_tokens_per_s=served * traffic.prompt.mean, requests_per_s=served,
        capacity_requests_per_s=capacity, ttft_s=ttft, tpot_s=tpot, e2e_s=e2e,
        replicas=count, meets_slo=meets, saturated=saturated, warnings=tuple(warnings),
        assumptions=tuple(assumptions))


def _tpot(r: _Replica, traffic: Traffic, step: float, prefill_share: float,
          served: float) -> Quantiles:
    """The decode step stretched by the replica's prefill share; its p99 adds one prefill
    chunk when more than ``P99_TPOT_STEP_SHARE`` of steps carry one (module docstring)."""
    p50 = step / max(1.0 - prefill_share, 1e-9) / r.tokens_per_step()
    chunk = r.prefill_s(min(PREFILL_CHUNK_TOKENS, traffic.prompt.p99))
    steps_with_prefill = served * step  # prefills arriving per decode step
    return Quantiles(p50=p50,
                     p99=p50 + (chunk if steps_with_prefill > P99_TPOT_STEP_SHARE else 0.0))


def unvalidated_warnings(model: ModelSpec, traffic: Traffic) -> list[str]:
    """The warnings of an answer that rests on what the model is not validated for: a
    mixture-of-experts model (``MOE_SERVING_WARNING``), and a TTFT SLO judged at a request
    rate (``OPEN_LOOP_TTFT_NOTE``: sizing and ``meets_slo`` then rest on that TTFT). The
    serving estimate and the lines of a serving quote both carry them."""
    found = []
    if model.num_experts > 0:
        found.append(MOE_SERVING_WARNING)
    if (traffic.mode is TrafficMode.ONLINE and traffic.requests_per_s is not None
            and (traffic.slo.ttft_p50_s is not None or traffic.slo.ttft_p99_s is not None)):
        found.append(OPEN_LOOP_TTFT_NOTE)
    return found


def _within_slo(slo: Slo, ttft: Quantiles, tpot: Quantiles) -> bool | None:
    """Whether every SLO given holds; None when none is given."""
    given = [(limit, value) for limit, value in (
        (slo.ttft_p50_s, ttft.p50), (slo.ttft_p99_s, ttft.p99),
        (slo.tpot_p50_s, tpot.p50), (slo.tpot_p99_s, tpot.p99)) if limit is not None]
    return None if not given else all(value <= limit for limit, value in given)


def _size(r: _Replica, traffic: Traffic, largest: float, capacity: float) -> int:
    """The fewest replicas that serve the load below saturation and meet the SLOs, judged
    with the same TTFT and TPOT the answer reports (``_ttft``, ``_tpot``)."""
    assert traffic.requests_per_s is not None  # noqa: S101 - online with a rate
    count = max(1, math.ceil(traffic.requests_per_s / capacity))
    while count <= MAX_REPLICAS:
        per_replica = traffic.requests_per_s / count
        load = _online_load(r, traffic, per_replica, largest)
        if not load.saturated:
            ttft = _ttft(r, traffic, per_replica, load.prefill_share,
                         _decode_work_share(per_replica, capacity, load.prefill_share))
            tpot = _tpot(r, traffic, load.step_s, load.prefill_share, per_replica)
            if _within_slo(traffic.slo, ttft, tpot) is not False:
                return count
            # An SLO missed at a near-idle replica cannot be met by adding replicas.
            if per_replica * r.prefill_s(traffic.prompt.mean) < 0.01:
                return count
        count = max(count + 1, math.ceil(count * 1.1))
    return MAX_REPLICAS


# -- serving plans ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class PlanCandidate:
    deployment: Deployment
    estimate: ServingEstimate
    usd_per_hour: float | None
    """All replicas at the caller's GPU-hour price; None without one."""

    @property
    def num_gpus(self) -> int:
        return self.estimate.replicas * self.deployment.gpus_per_replica


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingPlans:
    plans: tuple[PlanCandidate, ...]
    """Deployments that fit and meet the SLOs at the load, cheapest first (GPUs when no
    price is given), at most ``top_k``."""
    pareto: tuple[PlanCandidate, ...]
    """Among all feasible deployments, the cost (GPUs when no price is given) against p99
    TTFT front: cheapest first, each faster than the one before, none dominated; at most
    ``search.PARETO_POINTS_MAX`` points, thinned evenly with both ends kept."""
    candidates_total: int
    feasible: int
    closest: tuple[PlanCandidate, ...]
    """When nothing meets the SLOs: the candidates that missed by the least."""


def _tp_options(accelerator: AcceleratorSpec, limit: int | None) -> list[int]:
    top = min(accelerator.scaleup_domain_size, limit or accelerator.scaleup_domain_size)
    return [t for t in (1, 2, 4, 8, 16, 32, 64, 72) if t <= top]


def plan_serving(model: ModelSpec, accelerators: Sequence[AcceleratorSpec], traffic: Traffic,
                 *, engine: Engine = Engine.UNKNOWN,
                 weight_precisions: Sequence[WeightPrecision] = (WeightPrecision.BF16,),
                 kv_cache_precisions: Sequence[KvPrecision] = (KvPrecision.BF16,),
                 max_batches: Sequence[int | None] = (None,),
                 max_tp: int | None = None,
                 price_per_gpu_hour_usd: dict[str, float] | None = None,
                 top_k: int = 10,
                 engines: Sequence[Engine] | None = None) -> ServingPlans:
    """Every (accelerator, tp, weight and KV precision, engine, max batch) deployment of one
    pipeline stage, each sized for the online load; ranked by cost per hour (price x GPUs;
    GPUs without prices). ``engines`` defaults to ``(engine,)``.

    The candidates are evaluated in bulk by ``serving_search.plan_search`` (the formulas of
    ``serve``, on numpy columns); only the plans returned (top_k, the front, the closest)
    are re-estimated one by one with ``serve``, so each answer is exactly the serving
    estimate of its deployment."""
    if traffic.mode is not TrafficMode.ONLINE or traffic.requests_per_s is None:
        raise InvalidSpecError("a serving plan sizes an online load: give traffic.mode online "
                               "with requests_per_s", field="traffic.requests_per_s")
    from service.core import serving_search  # imports this module: not at the top

    prices = price_per_gpu_hour_usd or {}
    candidates = serving_search.grid(
        accelerators, [_tp_options(a, max_tp) for a in accelerators], weight_precisions,
        kv_cache_precisions, tuple(engines) if engines else (engine,), max_batches)
    ranking = serving_search.plan_search(model, candidates, traffic,
                                         price_per_gpu_hour_usd=prices, top_k=top_k)
    answered: dict[int, PlanCandidate] = {}

    def answer(position: int) -> PlanCandidate:
        if position not in answered:
            deployment = candidates.deployment(position)
            estimate = serve(model, deployment, traffic)
            price = prices.get(deployment.accelerator.id)
            answered[position] = PlanCandidate(
                deployment=deployment, estimate=estimate,
                usd_per_hour=None if price is None else (
                    price * estimate.replicas * deployment.tp))
        return answered[position]

    return ServingPlans(plans=tuple(answer(p) for p in ranking.plans),
                        pareto=tuple(answer(p) for p in ranking.pareto),
                        candidates_total=ranking.candidates_total, feasible=ranking.feasible,
                        closest=tuple(answer(p) for p in ranking.closest))


def _miss(estimate: ServingEstimate, slo: Slo) -> float:
    """How far the worst SLO is missed, as a ratio (1 = met)."""
    pairs = ((slo.ttft_p50_s, estimate.ttft_s.p50), (slo.ttft_p99_s, estimate.ttft_s.p99),
             (slo.tpot_p50_s, estimate.tpot_s.p50), (slo.tpot_p99_s, estimate.tpot_s.p99))
    return max((value / limit for limit, value in pairs if limit), default=1.0)
