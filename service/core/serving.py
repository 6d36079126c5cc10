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
  overhead. Each layer's paged decode-attention kernel adds a fixed time to the memory
  term (``DECODE_ATTENTION_LAYER_S``, 16 us: onnxruntime PR #21414's FlashAttention-2
  paged-decode table on H100), so attention reaches its bandwidth only at long KV and large
  batches. The crossover batch is where the two terms meet.
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
  E[W]) (Kingman 1962; Tijms, "A First Course in Stochastic Models", 2003, §2.5); an
  open-loop arrival also waits for the decode iteration in flight, half a step at the p50
  (``ITERATION_WAIT_NOTE``; Orca's iteration-level scheduling). TPOT is
  the decode step stretched by the share of time the replica spends in prefill; its p99
  adds one prefill chunk (chunked prefill, Sarathi-Serve, Agrawal et al. OSDI 2024) when
  more than 1 % of steps carry one. A fixed batch runs in lock-step (static batching, as
  LMDeploy's and vLLM's offline latency benchmarks run it): all of its prefills come first
  (its TTFT is the batch's prefill), then every step decodes, so its TPOT is the plain step.
- **Speculative decoding** with acceptance rate a and k draft tokens yields
  (1 - a^(k+1)) / (1 - a) tokens per target step (Leviathan et al. ICML 2023, eq. 1); the
  target step verifies k + 1 tokens per sequence (k + 1 times the FLOPs, the same weight
  bytes); the draft model's own cost is left out (EAGLE/MTP heads are a few % of a step).

- **Engine limits** (issue 40): each engine version's documented scheduler defaults
  (``ENGINE_LIMITS``, each with its source) bound the running batch where the deployment
  sets no ``max_batch``; pinned ``replicas`` past their capacity are answered saturated,
  with the queue's growth, instead of being re-sized.

The formulas are written once (``_Replica``'s methods and ``_answer``) over the array-like
protocol of ``service/core/ops.py``: ``serve()`` runs them on Python numbers,
``serving_search`` on numpy arrays with one element per deployment.

Everything is in SI units; money is not computed here (the API prices GPU-hours).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from service.core.errors import InvalidSpecError
from service.core.ops import Num, ScalarOps
from service.core.params import count_parameters
from service.core.plausibility import DEFAULTED_INPUT, OUTSIDE_VALIDATED_RANGE, WarningDetail
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
        hbm_fraction=0.90, compute_fraction=0.50, step_overhead_s=1.0e-3,
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
        hbm_fraction=0.90, compute_fraction=0.55, step_overhead_s=2.0e-3,
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
        hbm_fraction=0.75, compute_fraction=0.50, step_overhead_s=2.0e-3,
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

UNCALIBRATED_ENGINE = "uncalibrated_engine"
"""The warning code of an engine x accelerator pair no fitted row was run on: its efficiencies
are the engine's fit on other accelerators, or a prior, and its band is the wide one."""

CALIBRATED_PAIRS: Mapping[tuple[Engine, str], int] = MappingProxyType({
    (Engine.TRTLLM, "h100-sxm5-80gb"): 5,
    (Engine.VLLM, "a100-sxm4-80gb"): 2,
    (Engine.VLLM, "h100-sxm5-80gb"): 2,
    (Engine.VLLM, "h200-sxm-141gb"): 2,
    (Engine.VLLM, "mi300x-192gb"): 5,
})
"""(engine, accelerator id) -> the dense rows of that pair ``ENGINE_EFFICIENCY`` was fitted on:
fitted by ``python -m benchmarks.serving_validation --band`` on
benchmarks/data/serving-runs.csv as of 6cbf3a3: the dense rows of each named engine that
``benchmarks.serving_validation.fit`` fits it on. The rows of its ``HELD_OUT_DOCUMENTS``
(dstack's Llama 3.1 405B vLLM runs on H100 and MI300X, added by 6cbf3a3) fit nothing until
the refit per engine x accelerator, so they count for no pair (decision 338).
A pair not listed answers with ``UNCALIBRATED_ENGINE``; ``unknown`` is never fitted, so it
is never listed. ``tests/core/test_serving_band.py`` checks this equals the fit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidatedRange:
    """The lengths and running batch the evaluated dense rows span: beyond them an answer is
    ``outside_validated_range``."""

    prompt_tokens: tuple[float, float]
    output_tokens: tuple[float, float]
    running_batch_max: float


VALIDATED_RANGE = ValidatedRange(prompt_tokens=(1.0, 20000.0), output_tokens=(128.0, 2048.0),
                                 running_batch_max=250.0)


@dataclass(frozen=True, slots=True)
class BandEntry:
    """One band of the serving answer (issue 40): the measured figure over the model's lies
    from ``low`` to ``high`` times the model's (already widened by ``factor``). How it held
    out of sample: ``inside`` of ``rows`` published rows lay in the band computed without
    their own document and widened by the same factor; ``held`` is whether that reached 80 %
    at some factor of ``benchmarks.serving_validation.WIDEN_FACTORS`` (1 to 3)."""

    low: float
    high: float
    factor: float
    inside: int
    rows: int
    held: bool


BAND_METRICS = ("output_tokens_per_s", "ttft_s", "tpot_s")
"""The figures a band is given for: output tokens/s, and the p50 of TTFT and TPOT."""

SERVING_BAND: Mapping[tuple[Engine, bool, bool], Mapping[str, BandEntry]] = MappingProxyType({
})
"""(engine, mixture of experts, open loop) -> metric -> band, for an engine x accelerator pair
in ``CALIBRATED_PAIRS``: the 10th-90th percentile of out-of-sample ratios measured / model
(each row predicted by the table fitted without its document) over that regime's rows of
calibrated pairs (at least 5), widened until it holds 80 % of rows of documents left out of
it. Printed by ``python -m benchmarks.serving_validation --band`` (decision 396);
``tests/core/test_serving_band.py`` checks it equals the benchmark's.

Empty since the engine-version regime (issue 40, helper enginever): the two vLLM regimes it
held, dense and MoE closed loop, were made only of rows of vLLM 0.6-0.7 (V0: dstack's
405B and DeepSeek-R1 documents), whose pairs are calibrated by other documents; they are
``SERVING_LEGACY_BAND``'s now. No later-core regime has 5 rows whose engine x accelerator pair
is calibrated without their own document (vLLM 0.9-0.19's 11 dense rows are each their pair's
only document), so every other answer takes ``SERVING_WIDE_BAND``, which holds on them
(11 of 11 vLLM rows of those releases inside, out of sample)."""

SERVING_LEGACY_BAND: Mapping[tuple[Engine, bool, bool], Mapping[str, BandEntry]] = (
    MappingProxyType({
        (Engine.VLLM, False, False): MappingProxyType({
            "output_tokens_per_s": BandEntry(low=0.1694, high=1.6305, factor=1.25, inside=45,
                                             rows=56, held=True),
            "tpot_s": BandEntry(low=0.6606, high=10.1998, factor=1.25, inside=16, rows=19,
                                held=True),
            "ttft_s": BandEntry(low=0.1741, high=193.6423, factor=1.0, inside=19, rows=19,
                                held=True),
        }),
        (Engine.VLLM, True, False): MappingProxyType({
            "output_tokens_per_s": BandEntry(low=0.2118, high=1.3044, factor=1.0, inside=12,
                                             rows=12, held=True),
            "tpot_s": BandEntry(low=0.8258, high=8.1598, factor=1.0, inside=12, rows=12,
                                held=True),
            "ttft_s": BandEntry(low=0.058, high=580.9269, factor=3.0, inside=3, rows=12,
                                held=False),
        }),
    }))
"""(engine, mixture of experts, open loop) -> metric -> band of an answer for a release of an
earlier core (``LEGACY_ENGINE_CORES``: vLLM before 0.8, V0), on any pair: the wide band's 5th
and 95th percentiles widened by the smallest factor at which 80 % of that regime's rows (at
least 5) lie in the wide band computed without their document and so widened. The earlier
core's own rows are not a band of their own: its two dense documents lie 2-3x apart (dstack's
405B FP8 runs at 0.32-0.71 of the model, its 405B bf16 MI300X runs at 0.05-0.55), so a band
from one never held the other (27 of 56 rows inside out of sample), where the wide band holds
45 of 56. A metric or regime not listed takes ``SERVING_WIDE_BAND``. Printed by
``python -m benchmarks.serving_validation --band``; ``tests/core/test_serving_band.py``
checks it equals the benchmark's."""

LEGACY_CORE_EVIDENCE = (
    "on the published rows of vLLM 0.6.2-0.6.4 we hold (Llama 3.1 405B on 8 x H100 and "
    "4-8 x MI300X, dstack's two 2024 documents) measured output tokens/s was 0.05-0.75 of "
    "this model's, against 0.84-1.22 for vLLM 0.9-0.19 rows predicted out of sample (the V1 "
    "blog reports V1 up to 1.7x V0's throughput)")
"""Why a V0 answer is ``outside_validated_range`` (the message's evidence): the out-of-sample
ratios measured / model of output tokens/s of the dense closed-loop vLLM rows by
``engine_version`` (``python -m benchmarks.serving_validation --band``, its "by engine core"
lines; decisions-enginever; helper overhead's refit): V0 56 rows 0.052-0.752, V1 (0.9.1,
0.10.2, 0.19.1 and the versionless CI builds) 11 rows 0.840-1.220 (before the decode-attention
floor: 0.051-0.712 and 0.81-1.25). All V0 dense rows are Llama 3.1 405B and all V1
rows 8B or 70B, so model size is not ruled out; TGI on the same 405B MI300X document
measures 0.36-0.76."""

SERVING_WIDE_BAND: Mapping[str, BandEntry] = MappingProxyType({
    "output_tokens_per_s": BandEntry(low=0.2118, high=1.3044, factor=1.0, inside=174,
                                     rows=200, held=True),
    "tpot_s": BandEntry(low=0.8258, high=8.1598, factor=1.0, inside=149, rows=173, held=True),
    "ttft_s": BandEntry(low=0.0871, high=387.2846, factor=2.0, inside=143, rows=173,
                        held=True),
})
"""The band of every other answer (an uncalibrated pair, or a regime without its own band):
the 5th-95th percentile of every out-of-sample ratio pooled, widened the same way."""
"""From ``benchmarks.serving_validation.validated_range`` on benchmarks/data/serving-runs.csv
(session 23): the smallest and largest mean prompt and output lengths, and the largest batch
or concurrency, of the evaluated dense rows (every engine) the fit takes. The rows of
``HELD_OUT_DOCUMENTS`` do not widen it: the model is 1.3-20x off on their long prompts and
short bursts (decision 361), so 32,784- and 128,000-token prompts stay outside it.
``tests/core/test_serving_band.py`` checks this equals the fit."""

DECODE_ATTENTION_LAYER_S = 16.0e-6
"""Fixed time of one layer's paged decode-attention kernel, on top of its KV bytes at the
engine's HBM efficiency (issue 40: decode attention efficiency against KV length and batch).
Source: the nvbench table of FlashAttention-2's paged batch decode on H100 SXM in
microsoft/onnxruntime PR #21414 (cloudhan, 2024-08-29, 'FA2 - paged batch decode', Llama 3
70B GQA 8, head size 128, page size 256, 64 sequences): GPU time 21.135, 22.958, 28.780 and
43.563 us for 10, 18, 34 and 66 MiB moved at KV lengths 32-256 (bandwidth utilisation
14.8-47.4 %); the least-squares line through those four points is 16.0 us + bytes / 2.56
TB/s (77 % of the 3.35 TB/s datasheet). So a kernel's achieved bandwidth share is
(bytes / bandwidth) / (16 us + bytes / bandwidth): low for a short KV or a small batch,
approaching the engine's ``hbm_fraction`` for a long one. Not fitted to any serving row;
one source, measured on one kernel and GPU, so every engine and accelerator takes it
(decisions-overhead). The slope (77 %) was tried as a separate KV-read efficiency and made
the dense rows' leave-one-source-out throughput worse (median 24.7 % -> 32.2 %); it is not
used."""

MOE_LAYER_FIXED_S = 29.0e-6
"""Fixed time of one layer's fused mixture-of-experts kernel in a decode step, on top of the
touched experts' bytes at the engine's HBM efficiency (issue 40: MoE kernel efficiency at
small per-expert token counts). Source: vLLM's ``benchmarks/kernels/benchmark_moe.py`` on
H100 SXM in vllm-project/vllm PR #24700 (mgoin, 2025-09-11, "Improve default fused moe
configs by analyzing tuned configs", section "Benchmarks on H100"): Mixtral 8x7B bf16 at
tp 2 with its tuned config, 144.03 us at batch 1 and 483.14 us at batch 64, and Qwen3-30B-A3B
fp8 at tp 1 with the PR's config, 40.44 us and 237.26 us. Through the bytes this model reads
at those batches (the expected distinct experts of ``_Replica.weight_bytes_read``: Mixtral
352 and 1,409 MB, Qwen3 37.7 and 594 MB) the lines are 31.0 us + bytes / 3.12 TB/s and
27.1 us + bytes / 2.83 TB/s (93 % and 84 % of the H100's 3.35 TB/s, near the engines' HBM
fractions, so the slope stays the engine's); this is their mean intercept. The kernel's
fixed time covers token sorting and padding to its M tile (``moe_align_block_size``), two
grouped GEMMs with few tokens per expert, the activation and the weighted sum. Not fitted to
any serving row; one GPU, one engine's kernel, so every MoE deployment takes it
(decisions-moe40)."""
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
TP_ALLREDUCE_LATENCY_S = 20e-6
"""Fixed latency of one tensor-parallel all-reduce over NVLink: the training model's fitted
collective latency (service/core/calibration.py)."""
BISECTION_STEPS = 60
"""Halvings of the running-batch bisection (``_online_load``; ``serving_search`` the same)."""
NEAR_IDLE_PREFILL_SHARE = 0.01
"""Sizing stops adding replicas once a replica spends under 1 % of its time in prefill: an
SLO missed there cannot be met by more replicas."""
REPLICA_GROWTH = 1.1
"""Sizing tries max(count + 1, ceil(count x 1.1)) replicas next."""

MOE_SERVING_WARNING = (
    "mixture-of-experts serving is not validated: on the published MoE runs we hold "
    "(DeepSeek-R1 and V3 on 8 x H200, 8 x MI300X and 8 x B200: dstack's vLLM 0.7 and SGLang 0.4 "
    "runs, early 2025, the SGLang cookbook's SGLang 0.5.6-0.5.7 runs, and one TensorRT-LLM run "
    "on 8 x H200 at 1,024 concurrent requests), measured output tokens/s ranged from 5.1x below "
    "this model's to 1.5x above it, and median TTFT, where stated, was 4.5x or more above it; "
    "the throughput can be wrong either way: size with margin")
"""Decision 144 (docs/serving.md, Validation): the model's MoE decode reads only the experts
a batch touches at the engine's dense efficiencies, plus the fused-MoE kernel's fixed time
per layer (``MOE_LAYER_FIXED_S``) and, for MLA, the down-projections every rank holds whole
(``_replicated_parameters``; both decisions-moe40); what MoE and MLA kernels of an engine
release cost beyond that is not modelled. The documents measuring it (dstack, 'DeepSeek R1
inference performance: MI300X vs. H200', 2025-03-18, raw data dstackai/benchmarks@7f37e66
Deepseek-R1/raw_data/online_results.csv: 2.5-4.7x below (2.7-5.7x before those two terms);
and, added 2026-12-02, the SGLang cookbook's DeepSeek pages, 1.1-5.1x below (1.4-5.3x), and
TensorRT-LLM's 'How to get best performance on DeepSeek-R1' H200 max-throughput run: 1.5x
above (1.4x), no TTFT stated) show the gap above; those rows are evaluated, and fit
nothing."""

OPEN_LOOP_TTFT_NOTE = (
    "time to first token at a request rate is not validated: on the published runs we hold at "
    "fixed request rates, the measured median TTFT was 1.6-3.8x this model's p50 for SGLang "
    "serving Llama 3.3 70B on 4 x H200 and Llama 3.1 405B on 8 x H200 at 1-8 requests/s "
    "(DataCrunch's h200-benchmarks; 35-110 ms more per request even at light load, and growing "
    "sooner with load), 6-37x for vLLM serving Llama 3.1 405B FP8 on 8 x H100 and 8 x MI300X "
    "at 16 requests/s (dstack's benchmarks), and 12-26x for SGLang serving DeepSeek-V3 (MoE) "
    "on 8 x H200 at 1-8 requests/s (DataCrunch's blog); allow that margin before relying on a "
    "TTFT SLO")
"""Decision 150 (docs/serving.md, "Latency under open-loop load"): the model's TTFT is the
prefill plus an M/G/1 wait plus the wait for the running iteration (``ITERATION_WAIT_NOTE``,
helper overhead; the ranges above are with it); what an engine adds per request beyond
that (scheduling, tokenisation and streaming) is not modelled, and the one document
measuring TTFT at fixed Poisson rates shows the gap above (11 rows the model serves; they fit
nothing), and the two documents added by 6cbf3a3 (``HELD_OUT_DOCUMENTS``: 10 more rows the
model serves, out of sample) show it much wider for a large dense model near its capacity
and for MoE. An answer at a request rate states it in its assumptions, and in its warnings when
a TTFT SLO is given (sizing and ``meets_slo`` then rest on it)."""


ITERATION_WAIT_NOTE = (
    "open-loop arrivals wait for the decode iteration in flight: iteration-level scheduling "
    "admits a new request only at an iteration's end (Orca, Yu et al. OSDI 2022, section 3.1; "
    "vLLM's and SGLang's schedulers run one step per loop), and a Poisson arrival sees the "
    "running step's residual, uniform on [0, step] (PASTA and the residual life of a renewal "
    "process, Kleinrock, 'Queueing Systems' vol. 1, 1975, section 5.2), so its TTFT adds "
    "half a step at the p50 and 0.99 of one at the p99, times the chance that any sequence "
    "is decoding, 1 - exp(-batch)")
"""Issue 40's per-request overhead, the part that follows from the schedule (helper overhead,
decisions-overhead): derived, no constant. A closed loop's arrivals are its own completions,
which come at an iteration's end, so it waits for none. Front-end costs (HTTP, tokenisation)
were looked for and left out: vLLM 0.19's request decomposition on MI300X puts the CPU share
of a single request's end-to-end time at 0.4-0.6 % and tokenisation at ~2.2 us per token
(andyluo7, 'CPU-GPU Co-Design for Agentic LLM Inference', 2026-05-14), a few ms at the
validated prompt lengths."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineLimits:
    """One engine version's documented scheduler defaults: what runs when a deployment sets
    none of them (issue 40). ``max_running_seqs`` and ``max_batched_tokens`` are those of a
    GPU of at least ``LARGE_GPU_MIN_MEMORY_BYTES`` other than an A100; ``small_gpu_*`` those
    of the others where the engine tells them apart (None: the same)."""

    version: str
    max_running_seqs: int | None
    """The running-batch limit: vLLM ``max_num_seqs``, TensorRT-LLM ``max_batch_size``,
    SGLang ``max_running_requests``; None where the engine sets none (KV memory bounds it)."""
    max_batched_tokens: int | None
    """Tokens one scheduler step may carry: vLLM ``max_num_batched_tokens`` (the OpenAI
    server's), TensorRT-LLM ``max_num_tokens``, SGLang ``max_prefill_tokens``; None where it
    follows the model's context length."""
    chunked_prefill_tokens: int | None
    """The prefill chunk; None where chunked prefill is off by default."""
    scheduling_policy: str
    source: str
    small_gpu_max_running_seqs: int | None = None
    small_gpu_max_batched_tokens: int | None = None
    small_gpu_chunked_prefill_tokens: int | None = None
    long_context_chunked_prefill_tokens: int | None = None
    """The step's token budget when the engine turns chunked prefill on by itself for a long
    context window (vLLM V0: above ``long_context_min_tokens`` of ``max_model_len``); None
    where it never does. Stated in ``assumptions``; the model does not branch on it (a
    ``ModelSpec`` carries no context window)."""
    long_context_min_tokens: int | None = None
    """The ``max_model_len`` above which ``long_context_chunked_prefill_tokens`` applies."""
    long_context_note: str = ""

    def on(self, accelerator: AcceleratorSpec) -> tuple[int | None, int | None, int | None]:
        """(running sequences, batched tokens, prefill chunk) on ``accelerator``: vLLM's
        V1 engine gives GPUs of at least 70 GiB other than the A100 the larger defaults
        (``EngineArgs.get_batch_defaults``: ``device_memory >= 70 * GiB_bytes and "a100"
        not in device_name``)."""
        large = (accelerator.memory_bytes >= LARGE_GPU_MIN_MEMORY_BYTES
                 and "a100" not in accelerator.id.lower())
        if large or self.small_gpu_max_running_seqs is None:
            return self.max_running_seqs, self.max_batched_tokens, self.chunked_prefill_tokens
        return (self.small_gpu_max_running_seqs, self.small_gpu_max_batched_tokens,
                self.small_gpu_chunked_prefill_tokens)

    def running_limit(self, accelerator: AcceleratorSpec) -> float:
        """The largest running batch the defaults admit on ``accelerator`` (+inf for none):
        the running-sequence limit, at most one decode token per sequence within the step's
        token budget (vLLM: ``max_num_seqs = min(default, max_num_batched_tokens)``)."""
        seqs, tokens, _ = self.on(accelerator)
        limits = [float(x) for x in (seqs, tokens) if x is not None]
        return min(limits) if limits else math.inf

    def describe(self, engine: Engine, accelerator: AcceleratorSpec) -> str:
        seqs, tokens, chunk = self.on(accelerator)
        name = {Engine.VLLM: ("max_num_seqs", "max_num_batched_tokens"),
                Engine.TRTLLM: ("max_batch_size", "max_num_tokens"),
                Engine.SGLANG: ("max_running_requests", "max_prefill_tokens")}.get(
                    engine, ("running limit", "token budget"))
        running = (f"{seqs:,} running sequences ({name[0]})" if seqs is not None
                   else f"no running-sequence limit ({name[0]} unset: KV memory bounds it)")
        budget = (f"{tokens:,} tokens per step ({name[1]})" if tokens is not None
                  else f"{name[1]} from the context length")
        chunked = (f"chunked prefill of {chunk:,} tokens" if chunk is not None
                   else "chunked prefill off")
        long_chunk, above = self.long_context_chunked_prefill_tokens, self.long_context_min_tokens
        if long_chunk is not None and above is not None:
            chunked += (f" up to a {above:,}-token max_model_len; above it (a model's full "
                        f"context by default, e.g. Llama 3.1's 131,072) chunked prefill is on "
                        f"at {long_chunk:,} tokens per step, decodes included"
                        f"{self.long_context_note}")
        return (f"{engine} {self.version} defaults on {accelerator.id}: {running}, {budget}, "
                f"{chunked}, scheduling {self.scheduling_policy} [{self.source}]")


LARGE_GPU_MIN_MEMORY_BYTES = 70 * 2**30
"""vLLM V1's threshold for its larger batch defaults, 70 GiB of device memory
(vllm/engine/arg_utils.py, ``EngineArgs.get_batch_defaults``; PR #12369 raised the H100/H200
token budget, PR #17885 keeps the A100 on the smaller one)."""

ENGINE_LIMITS: Mapping[Engine, tuple[EngineLimits, ...]] = MappingProxyType({
    Engine.VLLM: (
        EngineLimits(
            version="0.6", max_running_seqs=256, max_batched_tokens=None,
            chunked_prefill_tokens=None, scheduling_policy="fcfs",
            long_context_chunked_prefill_tokens=512, long_context_min_tokens=32768,
            long_context_note=" (not on ROCm from 0.6.5)",
            source="vLLM 0.6 engine arguments, --max-num-seqs default 256; V0 engine, chunked "
                   "prefill off by default up to 32K context, max_num_batched_tokens follows "
                   "max_model_len: https://docs.vllm.ai/en/v0.6.6/serving/engine_args.html; "
                   "above it: vllm/engine/arg_utils.py of v0.6.3 and v0.6.4 "
                   "(EngineArgs.create_engine_config: 'use_long_context = max_model_len > "
                   "32768' turns enable_chunked_prefill on on any 'cuda' device, ROCm "
                   "included) and vllm/config.py (SchedulerConfig: max_num_batched_tokens = "
                   "512 with chunked prefill and one scheduler step); v0.6.5 adds 'not "
                   "current_platform.is_rocm()' (PR #11146, 'On ROCm platform chunked prefill "
                   "is showing poor performance due to a suboptimal triton kernel')"),
        EngineLimits(
            version="0.10", max_running_seqs=1024, max_batched_tokens=8192,
            chunked_prefill_tokens=8192, scheduling_policy="fcfs",
            small_gpu_max_running_seqs=256, small_gpu_max_batched_tokens=2048,
            small_gpu_chunked_prefill_tokens=2048,
            source="vLLM 0.10 V1 engine, EngineArgs.get_batch_defaults for the OpenAI server: "
                   "max_num_seqs 1024 and max_num_batched_tokens 8192 on GPUs of 70 GiB or "
                   "more other than A100, else 256 and 2048; V1 always chunks prefill to the "
                   "token budget; --scheduling-policy default fcfs: "
                   "https://github.com/vllm-project/vllm/blob/v0.10.2/vllm/engine/arg_utils.py"),
    ),
    Engine.TRTLLM: (
        EngineLimits(
            version="0.16", max_running_seqs=2048, max_batched_tokens=8192,
            chunked_prefill_tokens=None, scheduling_policy="guaranteed_no_evict",
            source="TensorRT-LLM 0.16 trtllm-build: --max_batch_size default 2048, "
                   "--max_num_tokens default 8192; chunked context off unless "
                   "enable_chunked_context; capacity scheduler GUARANTEED_NO_EVICT: "
                   "https://nvidia.github.io/TensorRT-LLM/0.16.0/commands/trtllm-build.html"),
        EngineLimits(
            version="0.18", max_running_seqs=2048, max_batched_tokens=8192,
            chunked_prefill_tokens=None, scheduling_policy="guaranteed_no_evict",
            source="TensorRT-LLM 0.18 trtllm-serve: --max_batch_size and --max_num_tokens "
                   "default to BuildConfig's 2048 and 8192; chunked context off by default; "
                   "capacity scheduler GUARANTEED_NO_EVICT: "
                   "https://nvidia.github.io/TensorRT-LLM/0.18.2/commands/trtllm-serve.html"),
    ),
    Engine.SGLANG: (
        EngineLimits(
            version="0.4", max_running_seqs=None, max_batched_tokens=16384,
            chunked_prefill_tokens=8192, scheduling_policy="fcfs",
            source="SGLang 0.4 server arguments: --max-running-requests unset (the KV pool "
                   "bounds the running batch), --max-prefill-tokens 16384, "
                   "--chunked-prefill-size 8192, --schedule-policy fcfs: "
                   "https://docs.sglang.ai/backend/server_arguments.html"),
    ),
    Engine.UNKNOWN: (),
})
"""The documented defaults per engine and version, oldest first; a deployment that names no
``engine_version`` takes the engine's latest (and says so, ``defaulted_input``). They apply
where the deployment sets no ``max_batch``; ``unknown`` has none (KV memory alone bounds the
batch)."""


ENGINE_VERSION_PATTERN = re.compile(
    r"v?(?P<release>\d{1,4}(?:\.\d{1,4}){1,3})(?P<pre>(?:a|b|rc)\d{1,4})?"
    r"(?P<post>\.post\d{1,4})?(?P<dev>\.dev\d{1,6})?(?:\+[0-9a-z][0-9a-z.]{0,40})?",
    re.IGNORECASE)
"""An engine release as the engines number them (PEP 440's public versions, the scheme vLLM,
SGLang and TensorRT-LLM publish on PyPI, https://peps.python.org/pep-0440/): a release of
two to four numbers (``0.6``, ``0.6.3``), an optional pre-release (``rc1``), post-release
(``.post2``), development release (``.dev308``) and local build label (``+gb489fc3c``),
optionally written with a leading ``v`` (``v0.4.1``, as the engines tag them)."""


@dataclass(frozen=True, slots=True)
class EngineRelease:
    """A parsed engine version: its release numbers and whether it comes before that
    release (a pre- or development release of it, PEP 440's ordering)."""

    release: tuple[int, ...]
    before_release: bool

    @classmethod
    def parse(cls, version: str) -> EngineRelease | None:
        """The release ``version`` names, or None when it is not one
        (``ENGINE_VERSION_PATTERN``)."""
        match = ENGINE_VERSION_PATTERN.fullmatch(version)
        if match is None:
            return None
        numbers = [int(x) for x in match["release"].split(".")]
        while len(numbers) > 1 and numbers[-1] == 0:
            numbers.pop()  # 0.8.0 is 0.8 (PEP 440: trailing zeros are equal)
        before = match["pre"] is not None or (match["dev"] is not None
                                              and match["post"] is None)
        return cls(tuple(numbers), before)

    def at_or_above(self, final: EngineRelease) -> bool:
        """Whether this version is ``final``'s release or later (``final``: a release as
        ``ENGINE_LIMITS`` documents them, without a pre- or development part): a
        development build of 0.6.4 is above 0.6 and below 0.6.4."""
        if self.release != final.release:
            return self.release > final.release
        return not self.before_release


def _release(version: str) -> EngineRelease:
    parsed = EngineRelease.parse(version)
    assert parsed is not None, version  # noqa: S101 - the documented versions parse
    return parsed


def engine_limits(engine: Engine, version: str | None) -> EngineLimits | None:
    """The defaults of ``engine`` at ``version``: the newest documented version at or below
    it (a release such as 0.6.3 takes 0.6's), the latest known when None; None for an engine
    with none documented. A malformed version, one older than the oldest documented, or any
    version of an engine with none documented is refused, naming the known ones."""
    known = ENGINE_LIMITS[engine]
    if version is None:
        return known[-1] if known else None
    names = ", ".join(limits.version for limits in known) or "none"
    parsed = EngineRelease.parse(version)
    if parsed is None:
        raise InvalidSpecError(
            f"engine_version {version!r} is not a version: give a release such as 0.6.3 "
            f"(PEP 440, optionally v-prefixed); {engine}'s documented versions: {names}",
            field="deployment.engine_version")
    below = [limits for limits in known if parsed.at_or_above(_release(limits.version))]
    if not below:
        why = (f"older than the oldest documented {engine} version" if known
               else f"{engine} has no documented versions")
        raise InvalidSpecError(
            f"engine_version {version!r} is {why} (known: {names})",
            field="deployment.engine_version")
    return below[-1]


def engine_version_assumption(engine: Engine, version: str | None) -> str | None:
    """The sentence for ``assumptions`` when ``version`` is not itself a documented version
    but maps to one (``engine_limits``); None otherwise."""
    if version is None:
        return None
    limits = engine_limits(engine, version)
    if limits is None or limits.version == version:
        return None
    names = ", ".join(x.version for x in ENGINE_LIMITS[engine])
    return (f"deployment.engine_version {version}: {engine}'s documented defaults at or below "
            f"it are {limits.version}'s, the newest of the documented versions ({names}) that "
            "is not later than it")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCore:
    """An engine's earlier core: the releases before ``until`` run it by default. The serving
    efficiencies are fitted on rows of the later core only (``benchmarks.serving_validation``),
    so an answer for one of these releases is ``outside_validated_range`` on
    ``deployment.engine_version`` and takes the band measured on this core's rows
    (``SERVING_LEGACY_BAND``)."""

    name: str
    until: str
    """The first release that no longer runs it by default."""
    source: str


LEGACY_ENGINE_CORES: Mapping[Engine, EngineCore] = MappingProxyType({
    Engine.VLLM: EngineCore(
        name="V0", until="0.8",
        source="vLLM blog, 'vLLM V1: A Major Upgrade to vLLM's Core Architecture' "
               "(2025-01-27, https://blog.vllm.ai/2025/01/27/v1-alpha-release.html): V1 is "
               "opt-in with VLLM_USE_V1=1 and 'we plan to transition V1 into the default "
               "engine'; vLLM v0.8.0 release notes (2025-03-19, "
               "https://github.com/vllm-project/vllm/releases/tag/v0.8.0): 'We have now "
               "enabled V1 engine by default' (PR #13726, 'V1 Enablement Oracle', which falls "
               "back to V0 only for features V1 lacks; docs v1_user_guide, PR #15064: "
               "'To disable V1, please set the environment variable as: VLLM_USE_V1=0')"),
})
"""Per engine, the earlier core whose releases the fit holds no row of. vLLM before 0.8 runs
V0 (its own scheduler, no always-on chunked prefill, CPU-bound between steps: the V1 blog's
motivation); SGLang and TensorRT-LLM have no such split in the rows we hold (decision in
docs/decisions.md, engine-version regime)."""


def legacy_core(engine: Engine, version: str | None) -> EngineCore | None:
    """The earlier core ``engine`` ``version`` runs (``LEGACY_ENGINE_CORES``), or None (also
    for no version: the latest is assumed). ``version`` is one ``engine_limits`` accepts."""
    core = LEGACY_ENGINE_CORES.get(engine)
    if core is None or version is None:
        return None
    parsed = EngineRelease.parse(version)
    if parsed is None or parsed.at_or_above(_release(core.until)):
        return None
    return core


SATURATED = "saturated"
"""The warning code of an open-loop load past what its replicas serve: the queue grows."""


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
    engine_version: str | None = None
    """The engine's release (``ENGINE_VERSION_PATTERN``, e.g. 0.6.3): its defaults are the
    newest of ``ENGINE_LIMITS[engine]`` at or below it; None: the latest known."""
    replicas: int | None = None
    """Pinned replica count: online traffic is not sized but served by these (saturated past
    their capacity); None: sized."""

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
        engine_limits(self.engine, self.engine_version)  # refuses a malformed or too old one
        if self.replicas is not None and not 1 <= self.replicas <= MAX_REPLICAS:
            raise InvalidSpecError(f"replicas must be in [1, {MAX_REPLICAS}]",
                                   field="deployment.replicas")

    @property
    def limits(self) -> EngineLimits | None:
        """The engine's documented defaults at ``engine_version`` (the latest known)."""
        return engine_limits(self.engine, self.engine_version)

    def running_limit(self) -> float:
        """The largest running batch: ``max_batch``, else the engine's documented default on
        this accelerator (+inf where there is none)."""
        if self.max_batch is not None:
            return float(self.max_batch)
        limits = self.limits
        return math.inf if limits is None else limits.running_limit(self.accelerator)


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
    warning_details: tuple[WarningDetail, ...] = ()
    """Coded warnings (``defaulted_input``, ``saturated``, ``uncalibrated_engine``,
    ``outside_validated_range``)."""
    queue_growth_requests_per_s: float = 0.0
    """Saturated at a request rate: how fast the queue grows over all replicas (offered load
    less what the replicas complete); 0 otherwise."""
    band: ServingBand | None = None
    """Where the measured figures are expected to lie (``serving_band``)."""
    slow_end: SlowEnd | None = None
    """Sizing at the band's slow end (``slow_end_factor``); None without a request rate."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SlowEnd:
    """The same deployment judged at its band's slow end (issue 40): every time on the
    replica ``factor`` times longer. A replica whose every service time is k times longer,
    at a rate lambda, is the model's replica at k x lambda with every time k times longer
    (the queue and Little's law only see time in units of service), so this is the model
    at ``factor`` x the load with each SLO divided by ``factor``: exact under a uniform
    slow-down, not a second model."""

    factor: float
    replicas: int
    """What sizing gives at the slow end (the pinned count when pinned)."""
    meets_slo: bool | None
    saturated: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingBand:
    """The answer's band (issue 40): (low, high) of output tokens/s per replica and of the
    TTFT and TPOT p50, from ``SERVING_BAND`` (a calibrated pair's regime) or
    ``SERVING_WIDE_BAND``. ``ttft_p50_s`` is None where the TTFT is (pinned and saturated)."""

    output_tokens_per_s: tuple[float, float]
    ttft_p50_s: tuple[float, float] | None
    tpot_p50_s: tuple[float, float]
    entries: Mapping[str, BandEntry]
    own: bool
    """Whether the bands are the regime's own (else the wide ones)."""
    legacy: str | None = None
    """The earlier core whose band it is (``SERVING_LEGACY_BAND``), e.g. 'vllm V0'; None
    otherwise."""


def band_entries(model: ModelSpec, deployment: Deployment,
                 traffic: Traffic) -> tuple[dict[str, BandEntry], bool]:
    """The bands an answer carries, per metric, and whether they are its regime's own: the
    regime (engine, mixture of experts, open loop) of a release of an earlier core
    (``legacy_core``) where ``SERVING_LEGACY_BAND`` has it, else of a pair in
    ``CALIBRATED_PAIRS`` where ``SERVING_BAND`` has it, else the wide band."""
    open_loop = traffic.mode is TrafficMode.ONLINE and traffic.requests_per_s is not None
    calibrated = (deployment.engine, deployment.accelerator.id) in CALIBRATED_PAIRS
    key = (deployment.engine, model.num_experts > 0, open_loop)
    if legacy_core(deployment.engine, deployment.engine_version) is not None:
        regime = SERVING_LEGACY_BAND.get(key, {})
    else:
        regime = SERVING_BAND.get(key, {}) if calibrated else {}
    entries = {m: regime.get(m, SERVING_WIDE_BAND[m]) for m in BAND_METRICS}
    return entries, all(m in regime for m in BAND_METRICS)


def serving_band(model: ModelSpec, deployment: Deployment, traffic: Traffic, *,
                 output_tokens_per_s: float, capacity_output_tokens_per_s: float,
                 ttft_p50_s: float | None, tpot_p50_s: float) -> ServingBand:
    """The band around an answer's figures: each figure times its band's (low, high) ratio
    measured / model. At a request rate the replica serves the offered load while it keeps
    up, so throughput's band is [min(load, capacity x low), min(load, capacity x high)]: the
    uncertainty is in the capacity, and the slow end is where the load is no longer met."""
    entries, own = band_entries(model, deployment, traffic)
    core = legacy_core(deployment.engine, deployment.engine_version)
    out, ttft, tpot = (entries[m] for m in BAND_METRICS)
    if traffic.mode is TrafficMode.ONLINE and traffic.requests_per_s is not None:
        throughput = (min(output_tokens_per_s, capacity_output_tokens_per_s * out.low),
                      min(output_tokens_per_s, capacity_output_tokens_per_s * out.high))
    else:
        throughput = (output_tokens_per_s * out.low, output_tokens_per_s * out.high)
    return ServingBand(
        output_tokens_per_s=throughput,
        ttft_p50_s=None if ttft_p50_s is None else (ttft_p50_s * ttft.low,
                                                    ttft_p50_s * ttft.high),
        tpot_p50_s=(tpot_p50_s * tpot.low, tpot_p50_s * tpot.high), entries=entries, own=own,
        legacy=None if core is None else f"{deployment.engine} {core.name}")


def slow_end_factor(band: ServingBand) -> float:
    """How much slower than the model the band's slow end is: 1 / the throughput band's low
    ratio (at least 1). The TTFT and TPOT bands are not used: their out-of-sample spread
    (0.1-290x pooled) comes from per-request overhead and queueing the model lacks, which a
    uniform slow-down of the replica does not represent (decision 412)."""
    return max(1.0, 1.0 / band.entries["output_tokens_per_s"].low)


def _slower(slo: Slo, factor: float) -> Slo:
    """Each SLO given divided by ``factor``."""
    def scaled(limit: float | None) -> float | None:
        return None if limit is None else limit / factor
    return Slo(ttft_p50_s=scaled(slo.ttft_p50_s), ttft_p99_s=scaled(slo.ttft_p99_s),
               tpot_p50_s=scaled(slo.tpot_p50_s), tpot_p99_s=scaled(slo.tpot_p99_s))


def band_warning(band: ServingBand) -> WarningDetail | None:
    """``outside_validated_range`` on ``deployment.engine`` when a band the answer carries
    did not hold 80 % of the rows of documents left out of it, even widened 3 times."""
    failed = [f"{m} ({e.inside} of {e.rows} rows)" for m, e in band.entries.items()
              if not e.held]
    if not failed:
        return None
    return WarningDetail(
        code=OUTSIDE_VALIDATED_RANGE, field="deployment.engine",
        message=("the band is not validated: widened 3 times it still held under 80 % of "
                 "published rows of documents left out of it for " + ", ".join(failed)))


def band_assumption(band: ServingBand) -> str:
    """The band's basis, in one sentence for ``assumptions``."""
    parts = [f"{m} x{e.low:.3g} to x{e.high:.3g} (widened x{e.factor:g}; held {e.inside} of "
             f"{e.rows})" for m, e in band.entries.items()]
    if band.legacy is not None and band.own:
        which = (f"the wide band made to hold on {band.legacy} rows (the earlier core's "
                 "regime), measured / model from out-of-sample residuals of published rows "
                 "(each predicted by the fit without its document), 5th-95th percentile of "
                 f"every row widened until it held 80 % of the {band.legacy} rows of "
                 "documents left out of it")
    else:
        which = ("this engine's regime" if band.own else
                 "the wide band (an uncalibrated pair, or a regime with too few rows)")
        which += (", measured / model from out-of-sample residuals of published rows (each "
                  "predicted by the fit without its document), 10th-90th percentile widened "
                  "until it held 80 % of rows of documents left out of it")
    return f"band: {which}: " + "; ".join(parts)


# -- the model, written once ------------------------------------------------------------------
#
# Every formula below runs on one deployment (Python numbers, ``SERVING_SCALAR``) or on many
# at once (numpy arrays with one element per deployment, ``serving_search``): the arithmetic
# is ordinary operators plus ``xp.where``, ``xp.maximum``, ``xp.minimum`` and ``xp.log``
# (``service/core/ops.py``), so both run the same formulas in the same order. Control flow
# that differs between one and many (the running-batch bisection, sizing) is each caller's.


class _ServingOps(ScalarOps):
    """``ops.ScalarOps`` plus the natural log the TTFT tail needs and the exponential of the
    iteration wait (numpy has ``np.log`` and ``np.exp``)."""

    @staticmethod
    def log(a: Num) -> Num:
        return math.log(a)

    @staticmethod
    def exp(a: Num) -> Num:
        return math.exp(a)


SERVING_SCALAR = _ServingOps()
"""The scalar namespace ``serve()`` passes; ``serving_search`` passes ``numpy``."""


def _kv_bytes(xp: Any, model: ModelSpec, layers: Num, tp: Num, width: Num) -> Num:
    """K and V of every layer one GPU holds, for one token (module docstring)."""
    if model.mla is not None:  # latent + rotary key, replicated on each tp rank
        return layers * (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * width
    head_dim = model.head_dim or model.hidden_size // model.num_heads
    return 2.0 * layers * xp.maximum(1.0, model.num_kv_heads / tp) * head_dim * width


def kv_bytes_per_token_per_gpu(model: ModelSpec, deployment: Deployment) -> float:
    """K and V of every layer this GPU holds, for one token (module docstring)."""
    return float(_kv_bytes(SERVING_SCALAR, model, model.num_layers / deployment.pp,
                           deployment.tp, KV_BYTES[deployment.kv_cache_precision]))


def _attention_width(model: ModelSpec) -> float:
    """heads x (query-key + value head dims) / 2: the per-token, per-context attention FLOPs
    are 2 x 2 x this x layers (QK^T and AV)."""
    if model.mla is not None:
        return model.num_heads * (model.mla.qk_nope_head_dim + model.mla.qk_rope_head_dim
                                  + model.mla.v_head_dim) / 2
    head_dim = model.head_dim or model.hidden_size // model.num_heads
    return float(model.num_heads * head_dim)


def _replicated_parameters(model: ModelSpec) -> int:
    """Parameters every tensor-parallel rank holds whole instead of a 1/tp share: multi-head
    latent attention's query and KV down-projections (hidden x q_lora_rank and hidden x
    (kv_lora_rank + qk_rope_head_dim) per layer), which vLLM and SGLang build as
    ``ReplicatedLinear`` (vllm-project/vllm@002d6073 ``vllm/model_executor/models/
    deepseek_v2.py``, ``DeepseekV2Attention``: ``q_a_proj`` and ``kv_a_proj_with_mqa``);
    0 without MLA."""
    if model.mla is None:
        return 0
    mla = model.mla
    return model.num_layers * model.hidden_size * (
        mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim)


def _context(traffic: Traffic) -> float:
    """The mean context of a running sequence: its prompt and half its output."""
    return traffic.prompt.mean + traffic.output.mean / 2


@dataclass(frozen=True, slots=True, kw_only=True)
class _Replica:
    """Per-replica constants of one model on one deployment (Python numbers), or on many
    (numpy arrays, one element per deployment, with ``xp`` numpy); the methods are the
    model's formulas."""

    xp: Any
    model: ModelSpec
    tp: Num
    pp: Num
    layers_per_gpu: Num
    weights_bytes_per_gpu: Num
    dense_weight_bytes_per_gpu: Num
    expert_bytes_per_gpu: Num
    matmul_flops_per_token_per_gpu: Num
    kv_bytes_per_token_per_gpu: Num
    hbm_effective: Num
    """HBM bytes/s x the engine's hbm_fraction."""
    compute_effective: Num
    """Peak FLOP/s at the weights' matmul precision x the engine's compute_fraction."""
    scaleup_bytes_per_s: Num
    step_overhead_s: Num
    memory_bytes: Num
    gpu_memory_fraction: Num
    prefix_cache_hit_fraction: Num
    spec_tokens: Num
    """Tokens a target step verifies per sequence: k + 1 with speculative decoding, else 1."""
    spec_yield: Num
    """Tokens a target step yields per sequence (``tokens_per_step``)."""
    attention_width: float
    moe: bool
    experts_keep: float
    """1 - k / E: the chance an expert is not picked by one token."""
    moe_layers_per_gpu: Num
    """Mixture-of-experts layers of one pipeline stage (0 for a dense model)."""

    @classmethod
    def create(cls, xp: Any, model: ModelSpec, *, tp: Num, pp: Num, weight_bytes: Num,
               kv_bytes: Num, peak_flops_per_s: Num, hbm_bytes_per_s: Num,
               scaleup_bytes_per_s: Num, memory_bytes: Num, hbm_fraction: Num,
               compute_fraction: Num, step_overhead_s: Num, gpu_memory_fraction: Num,
               prefix_cache_hit_fraction: Num, speculative: Num, acceptance_rate: Num,
               draft_tokens: Num) -> _Replica:
        """``acceptance_rate`` is read only where ``speculative`` (pass 0 elsewhere)."""
        counts = count_parameters(model)
        gpus = tp * pp
        expert_bytes = counts.routed_expert_total * weight_bytes / gpus
        weights = (counts.total * weight_bytes / gpus
                   + _replicated_parameters(model) * weight_bytes / pp * (1.0 - 1.0 / tp))
        layers = model.num_layers / pp
        moe = model.num_experts > 0 and counts.routed_expert_total != 0
        rate = acceptance_rate
        return cls(
            xp=xp, model=model, tp=tp, pp=pp, layers_per_gpu=layers,
            weights_bytes_per_gpu=weights, dense_weight_bytes_per_gpu=weights - expert_bytes,
            expert_bytes_per_gpu=expert_bytes,
            matmul_flops_per_token_per_gpu=2.0 * (counts.active - counts.embedding) / gpus,
            kv_bytes_per_token_per_gpu=_kv_bytes(xp, model, layers, tp, kv_bytes),
            hbm_effective=hbm_bytes_per_s * hbm_fraction,
            compute_effective=peak_flops_per_s * compute_fraction,
            scaleup_bytes_per_s=scaleup_bytes_per_s, step_overhead_s=step_overhead_s,
            memory_bytes=memory_bytes, gpu_memory_fraction=gpu_memory_fraction,
            prefix_cache_hit_fraction=prefix_cache_hit_fraction,
            spec_tokens=xp.where(speculative, draft_tokens + 1.0, 1.0),
            spec_yield=xp.where(speculative, (1.0 - rate ** (draft_tokens + 1)) / (1.0 - rate),
                                1.0),
            attention_width=_attention_width(model), moe=moe,
            experts_keep=(1.0 - model.experts_per_token / model.num_experts) if moe else 1.0,
            moe_layers_per_gpu=(counts.num_moe_layers if moe else 0) / pp)

    @classmethod
    def build(cls, model: ModelSpec, deployment: Deployment) -> _Replica:
        """One deployment, in Python numbers."""
        d = deployment
        precision = COMPUTE_PRECISION[d.weight_precision]
        acc = d.accelerator
        if precision not in acc.peak_flops_per_s:
            raise InvalidSpecError(
                f"accelerator {acc.id} has no {precision} peak for "
                f"{d.weight_precision} weights", field="deployment.weight_precision")
        eff = ENGINE_EFFICIENCY[d.engine]
        rate = d.speculative_acceptance_rate
        return cls.create(
            SERVING_SCALAR, model, tp=d.tp, pp=d.pp, weight_bytes=WEIGHT_BYTES[d.weight_precision],
            kv_bytes=KV_BYTES[d.kv_cache_precision], peak_flops_per_s=acc.peak_for(precision),
            hbm_bytes_per_s=acc.hbm_bytes_per_s, scaleup_bytes_per_s=acc.scaleup_bytes_per_s,
            memory_bytes=acc.memory_bytes, hbm_fraction=eff.hbm_fraction,
            compute_fraction=eff.compute_fraction, step_overhead_s=eff.step_overhead_s,
            gpu_memory_fraction=eff.gpu_memory_fraction,
            prefix_cache_hit_fraction=d.prefix_cache_hit_fraction,
            speculative=rate is not None, acceptance_rate=0.0 if rate is None else rate,
            draft_tokens=d.speculative_draft_tokens)

    def weight_bytes_read(self, tokens: Num) -> Num:
        """Weights one decode step reads: every dense weight, and the routed experts the
        batch touches: E x (1 - (1 - k/E)^(b x tokens)) of E experts when each of b tokens
        picks k uniformly (a balanced router)."""
        if not self.moe:
            return self.weights_bytes_per_gpu
        touched = 1.0 - self.experts_keep ** self.xp.maximum(tokens, 1.0)
        return self.dense_weight_bytes_per_gpu + self.expert_bytes_per_gpu * touched

    def tp_allreduce_s(self, tokens: Num) -> Num:
        """Two all-reduces per layer of tokens x hidden x 2 bytes over NVLink (ring:
        2 (tp - 1) / tp of the bytes), each with a fixed latency of
        ``TP_ALLREDUCE_LATENCY_S``; none at tp 1."""
        xp, tp = self.xp, self.tp
        single = tp == 1
        volume = tokens * self.model.hidden_size * 2.0
        bandwidth = xp.where(single, 1.0, self.scaleup_bytes_per_s)
        time = 2.0 * self.layers_per_gpu * (
            TP_ALLREDUCE_LATENCY_S + 2.0 * (tp - 1) / tp * volume / bandwidth)
        return xp.where(single, 0.0, time)

    def decode_attention(self, context: Num) -> Num:
        """Attention FLOPs of one decoded token at ``context`` tokens, per GPU."""
        return 4.0 * self.layers_per_gpu * self.attention_width * context / self.tp

    def attention_floor_s(self) -> Num:
        """The decode step's fixed attention time on one GPU: ``DECODE_ATTENTION_LAYER_S``
        for each of its layers (part of the memory term)."""
        return DECODE_ATTENTION_LAYER_S * self.layers_per_gpu

    def kernel_floor_s(self) -> Num:
        """The decode step's fixed kernel time on one GPU (part of the memory term): the
        attention floor, and ``MOE_LAYER_FIXED_S`` for each of its mixture-of-experts
        layers."""
        return self.attention_floor_s() + MOE_LAYER_FIXED_S * self.moe_layers_per_gpu

    def decode_step(self, batch: Num, context: Num) -> tuple[Num, Num, Num]:
        """(step, memory term, compute term) in seconds for ``batch`` sequences at mean
        ``context`` tokens; the step covers every pipeline stage in turn."""
        tokens = batch * self.spec_tokens
        flops = tokens * (self.matmul_flops_per_token_per_gpu + self.decode_attention(context))
        kv = batch * context * self.kv_bytes_per_token_per_gpu
        memory_s = ((self.weight_bytes_read(tokens) + kv) / self.hbm_effective
                    + self.kernel_floor_s())
        compute_s = flops / self.compute_effective
        step = (self.pp * self.xp.maximum(memory_s, compute_s) + self.tp_allreduce_s(tokens)
                + self.step_overhead_s)
        return step, self.pp * memory_s, self.pp * compute_s

    def tokens_per_step(self) -> Num:
        return self.spec_yield

    def prefill_s(self, prompt_tokens: Num) -> Num:
        """Compute-bound prefill of one prompt (the uncached part), every stage in turn."""
        tokens = prompt_tokens * (1.0 - self.prefix_cache_hit_fraction)
        attention = 2.0 * self.layers_per_gpu * self.attention_width * tokens * (
            prompt_tokens) / self.tp  # causal: half of 4 x layers x width x L x L
        flops = tokens * self.matmul_flops_per_token_per_gpu + attention
        compute = flops / self.compute_effective
        weights = self.weights_bytes_per_gpu / self.hbm_effective
        return self.pp * self.xp.maximum(compute, weights) + self.tp_allreduce_s(tokens)

    def memory(self, traffic: Traffic) -> tuple[Num, Num, Num, Num, Num]:
        """(usable, workspace, KV budget, KV per sequence, largest concurrency) per GPU."""
        xp, model = self.xp, self.model
        usable = self.memory_bytes * self.gpu_memory_fraction
        h = model.hidden_size
        ffn = max(model.ffn_hidden_size, model.moe_ffn_hidden_size or 0)
        # Activations of one forward pass of WORKSPACE_TOKENS: residual, QKV and attention
        # output (4h) and the MLP's gate/up/product (3 x ffn / tp), bf16, plus the logits of
        # the sampled tokens (vocab x 4 bytes for up to 256 sequences).
        workspace = WORKSPACE_TOKENS * (4 * h + 3 * ffn / self.tp) * 2.0 + (
            256 * model.vocab_size * 4)
        budget = usable - self.weights_bytes_per_gpu - workspace
        kv = self.kv_bytes_per_token_per_gpu
        per_sequence = _context(traffic) * kv
        # Many sequences share the cache at steady state, but one must still fit at its end.
        whole = budget >= (traffic.prompt.mean + traffic.output.mean) * kv
        sequences = xp.where(whole, budget, 0.0) // per_sequence
        return (usable, workspace, budget, per_sequence,
                xp.where(whole, xp.maximum(sequences, 1.0), 0.0))

    def crossover(self, context: Num) -> Num:
        """Batch where the decode step's compute term equals its memory term (dense weights;
        for MoE an approximation with every expert read); NaN where it never does."""
        mem_per_seq = context * self.kv_bytes_per_token_per_gpu / self.hbm_effective
        attention = 4.0 * self.model.num_layers / self.pp * self.attention_width * (
            context) / self.tp
        flops_per_seq = (self.matmul_flops_per_token_per_gpu + attention) / (
            self.compute_effective)
        gap = flops_per_seq - mem_per_seq
        positive = gap > 0
        return self.xp.where(positive, (self.weights_bytes_per_gpu / self.hbm_effective
                                        + self.kernel_floor_s())
                             / self.xp.where(positive, gap, 1.0), math.nan)

    def capacity(self, traffic: Traffic, batch: Num, prefill_mean: Num) -> Num:
        """Requests per second one replica completes at ``batch`` (prefill + decode share);
        ``prefill_mean`` is ``prefill_s`` of the mean prompt."""
        step = self.decode_step(batch, _context(traffic))[0]
        decode_per_request = traffic.output.mean / self.spec_yield * step / batch
        return 1.0 / (prefill_mean + decode_per_request)

    def iteration_wait(self, batch: Num, step: Num) -> tuple[Num, Num]:
        """(p50, p99) of the wait of an open-loop arrival for the decode iteration running
        when it arrives (``ITERATION_WAIT_NOTE``): none when no sequence is decoding, else
        the residual of a step of length ``step``, uniform on [0, step]; a sequence is
        decoding with probability 1 - exp(-batch), the running count being Poisson with
        mean ``batch`` (M/G/infinity)."""
        busy = 1.0 - self.xp.exp(-self.xp.maximum(batch, 0.0))
        return busy * step * 0.5, busy * step * TAIL_P99

    def ttft(self, traffic: Traffic, per_replica_rps: Num, prefill_share: Num,
             prefill_mean: Num, decode_share: Num, *, batch: Num = 0.0,
             step: Num = 0.0) -> tuple[Num, Num]:
        """(p50, p99): prefill of the p50/p99 prompt plus the M/G/1 wait (module docstring),
        with the prefill server's utilisation rho = lambda E[S] / (1 - decode share): an
        open loop passes ``_decode_work_share``, a closed loop (a fixed concurrency,
        offline) 0, since its arrivals are its own completions and never pile up beyond its
        slots (rho is then the share of time spent in prefill). An open loop also passes its
        running ``batch`` and decode ``step``: its arrivals wait for the iteration in flight
        (``iteration_wait``); a closed loop's arrive at an iteration's end and pass none."""
        xp, prompt = self.xp, traffic.prompt
        wait = self.iteration_wait(batch, step)
        p50 = self.prefill_s(prompt.p50) + wait[0]
        p99 = self.prefill_s(prompt.p99) + wait[1]
        # Service time second moment: prefill time scales with tokens (linear part dominates).
        ratio = prompt.second_moment / max(prompt.mean ** 2, 1e-12)
        s2 = prefill_mean * prefill_mean * ratio
        rho = xp.minimum(prefill_share / xp.maximum(1.0 - decode_share, 1e-9), 0.999999)
        wait_mean = per_replica_rps * s2 / (2.0 * (1.0 - rho))

        def wait_at(tail: float) -> Num:
            none = (rho <= tail) | (wait_mean <= 0)
            safe_rho = xp.where(none, 1.0, rho)
            return xp.where(none, 0.0, wait_mean / safe_rho * xp.log(safe_rho / tail))

        idle = per_replica_rps <= 0
        return (xp.where(idle, p50, p50 + wait_at(1.0 - 0.5)),
                xp.where(idle, p99, p99 + wait_at(1.0 - TAIL_P99)))

    def tpot(self, traffic: Traffic, step: Num, prefill_share: Num,
             served: Num) -> tuple[Num, Num]:
        """(p50, p99): the decode step stretched by the replica's prefill share; its p99
        adds one prefill chunk when more than ``P99_TPOT_STEP_SHARE`` of steps carry one
        (module docstring)."""
        p50 = step / self.xp.maximum(1.0 - prefill_share, 1e-9) / self.spec_yield
        chunk = self.prefill_s(min(PREFILL_CHUNK_TOKENS, traffic.prompt.p99))
        steps_with_prefill = served * step  # prefills arriving per decode step
        return p50, p50 + self.xp.where(steps_with_prefill > P99_TPOT_STEP_SHARE, chunk, 0.0)


def _decode_work_share(xp: Any, per_replica_rps: Num, capacity: Num, prefill_share: Num) -> Num:
    """The share of an open-loop replica's time its decode work needs at its most efficient
    batch: lambda x output x step(b*) / b*, which is lambda / capacity - lambda E[S] since
    capacity = 1 / (E[S] + output x step(b*) / b*) (``_Replica.capacity``). The prefill
    server has the rest, so its utilisation reaches 1 exactly where the replica saturates."""
    return xp.maximum(per_replica_rps / capacity - prefill_share, 0.0)


def _within_slo(slo: Slo, ttft: tuple[Num, Num], tpot: tuple[Num, Num]) -> Num | None:
    """Whether every SLO given holds (p50, p99 pairs); None when none is given."""
    given = [(limit, value) for limit, value in (
        (slo.ttft_p50_s, ttft[0]), (slo.ttft_p99_s, ttft[1]),
        (slo.tpot_p50_s, tpot[0]), (slo.tpot_p99_s, tpot[1])) if limit is not None]
    if not given:
        return None
    within: Num = True
    for limit, value in given:
        within = within & (value <= limit)
    return within


@dataclass(frozen=True, slots=True)
class _Load:
    batch: Num
    step_s: Num
    prefill_share: Num
    saturated: Num


@dataclass(frozen=True, slots=True, kw_only=True)
class _Answer:
    """What ``serve()`` answers, for one deployment or many (``_answer``)."""

    largest: Num
    capacity: Num
    count: Num
    load: _Load
    served: Num
    requested: Num
    waiting: Num
    queue_s: Num
    ttft: tuple[Num, Num]
    tpot: tuple[Num, Num]
    e2e: tuple[Num, Num]
    within: Num | None
    meets: Num
    memory_s: Num
    compute_s: Num


def _largest(xp: Any, max_concurrency: Num, max_batch: Num) -> Num:
    """The largest running batch: what fits (at least 1), at most ``max_batch`` (+inf for
    none)."""
    return xp.minimum(xp.maximum(max_concurrency, 1.0) * 1.0, max_batch)


def _answer(r: _Replica, traffic: Traffic, *, largest: Num, fits: Num, prefill_mean: Num,
            replicas: int | None, size: Callable[[Num], Num],
            online_load: Callable[[Num, Num], _Load]) -> _Answer:
    """The serving answer's figures (module docstring): online traffic at a rate on the
    replica count ``size(capacity)`` returns (the given count, or sizing), with the running
    batch from ``online_load(per_replica_rps, capacity)``; otherwise the batch the mode asks
    for, at most ``largest``, on ``replicas`` (default 1)."""
    xp = r.xp
    context = _context(traffic)
    capacity = r.capacity(traffic, largest, prefill_mean)
    if traffic.mode is TrafficMode.ONLINE and traffic.requests_per_s is not None:
        count = size(capacity)
        served = traffic.requests_per_s / count
        load = online_load(served, capacity)
        ttft = r.ttft(traffic, served, load.prefill_share, prefill_mean,
                      _decode_work_share(xp, served, capacity, load.prefill_share),
                      batch=load.batch, step=load.step_s)
        requested: Num = 0.0
        waiting: Num = 0.0
        queue_s: Num = 0.0
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
        batch = xp.minimum(requested, largest)
        count = replicas or 1
        step = r.decode_step(batch, context)[0]
        served = r.capacity(traffic, batch, prefill_mean)
        load = _Load(batch, step, served * prefill_mean, largest < 0.0)  # never saturated
        if traffic.mode is TrafficMode.FIXED_BATCH:
            ttft = (r.prefill_s(traffic.prompt.p50) * batch,
                    r.prefill_s(traffic.prompt.p99) * batch)
        else:
            ttft = r.ttft(traffic, served, load.prefill_share, prefill_mean, 0.0)
        # The extra sequences wait in line, and by Little's law the line drains at the
        # replica's completion rate.
        waiting = requested - batch
        queue_s = xp.where(waiting > 0, waiting / served, 0.0)
        ttft = (ttft[0] + queue_s, ttft[1] + queue_s)
    if traffic.mode is TrafficMode.FIXED_BATCH:
        # Lock-step: the batch's prefills all run before its first decode step (they are in
        # the TTFT above), so no decode step waits on a prefill or carries a chunk.
        tpot = r.tpot(traffic, load.step_s, 0.0, 0.0)
    else:
        tpot = r.tpot(traffic, load.step_s, load.prefill_share, served)
    # A request's decode time sums hundreds of steps, so its tail is the mean step times the
    # tail output length (the p99 step is a rare chunk, not every step's).
    output = traffic.output
    e2e = (ttft[0] + tpot[0] * max(output.p50 - 1, 0),
           ttft[1] + tpot[0] * max(output.p99 - 1, 0))
    within = _within_slo(traffic.slo, ttft, tpot)
    meets = xp.where(load.saturated, False, fits & (True if within is None else within))
    _, memory_s, compute_s = r.decode_step(load.batch, context)
    return _Answer(largest=largest, capacity=capacity, count=count, load=load, served=served,
                   requested=requested, waiting=waiting, queue_s=queue_s, ttft=ttft,
                   tpot=tpot, e2e=e2e, within=within, meets=meets, memory_s=memory_s,
                   compute_s=compute_s)


# -- one deployment -----------------------------------------------------------------------------

def _memory(r: _Replica, traffic: Traffic) -> ServingMemory:
    usable, workspace, budget, per_sequence, largest = r.memory(traffic)
    max_concurrency = int(largest)
    return ServingMemory(
        weights_bytes_per_gpu=r.weights_bytes_per_gpu,
        kv_cache_bytes_per_token=r.kv_bytes_per_token_per_gpu,
        kv_cache_bytes_per_sequence=per_sequence, workspace_bytes_per_gpu=workspace,
        usable_bytes_per_gpu=usable, kv_budget_bytes_per_gpu=max(budget, 0.0),
        max_concurrency=max_concurrency, fits=max_concurrency >= 1)


def _crossover(r: _Replica, context: float) -> float | None:
    """``_Replica.crossover``; None when decode never becomes compute-bound."""
    crossover = r.crossover(context)
    return None if math.isnan(crossover) else crossover


def _online_load(r: _Replica, traffic: Traffic, per_replica_rps: float,
                 largest: float) -> _Load:
    """The running batch at ``per_replica_rps`` by Little's law: b = rate x decode time,
    decode time = output x step(b) / (1 - prefill share), fixed point by bisection
    (``serving_search._online_load`` lands on the same root for many deployments)."""
    context = _context(traffic)
    prefill_share = per_replica_rps * r.prefill_s(traffic.prompt.mean)
    if prefill_share >= 1.0:
        step, _, _ = r.decode_step(largest, context)
        return _Load(largest, step, min(prefill_share, 1.0), True)
    steps = traffic.output.mean / r.spec_yield

    def excess(b: float) -> float:
        step, _, _ = r.decode_step(b, context)
        gap: float = per_replica_rps * steps * step / (1.0 - prefill_share) - b
        return gap

    if excess(largest) > 0:
        step, _, _ = r.decode_step(largest, context)
        return _Load(largest, step, prefill_share, True)
    low, high = 1e-9, largest
    for _ in range(BISECTION_STEPS):
        mid = (low + high) / 2
        if excess(mid) > 0:
            low = mid
        else:
            high = mid
    batch = max(high, 1.0)
    step, _, _ = r.decode_step(batch, context)
    return _Load(high, step, prefill_share, False)


def serve(model: ModelSpec, deployment: Deployment, traffic: Traffic,
          replicas: int | None = None) -> ServingEstimate:
    """The serving estimate for ``traffic``; online traffic is sized (the fewest replicas
    that keep every replica below saturation and meet the SLOs) unless ``replicas`` (or
    ``deployment.replicas``) pins the count."""
    r = _Replica.build(model, deployment)
    memory = _memory(r, traffic)
    pinned = replicas or deployment.replicas
    warnings: list[str] = []
    details: list[WarningDetail] = []
    assumptions = [
        f"engine {deployment.engine}: {ENGINE_EFFICIENCY[deployment.engine].basis}",
        f"continuous batching: prefill and decode time-share each replica; prefill waits "
        f"are M/G/1 (Pollaczek-Khinchine mean, exponential tail); chunked prefill of "
        f"{PREFILL_CHUNK_TOKENS} tokens for the p99 TPOT",
        f"KV cache at steady state: each running sequence holds the mean prompt and half "
        f"the mean output ({traffic.prompt.mean:.0f} + {traffic.output.mean / 2:.0f} tokens; "
        f"paged KV blocks are allocated as tokens arrive)",
    ]
    limits = deployment.limits
    if limits is not None:
        applied = ("applied: max_batch not given, so the running batch is at most "
                   f"{deployment.running_limit():,.0f}" if deployment.max_batch is None
                   else f"max_batch {deployment.max_batch} given, in place of the default")
        described = limits.describe(deployment.engine, deployment.accelerator)
        assumptions.append(f"engine limits: {described}; {applied}")
        if (mapped := engine_version_assumption(deployment.engine,
                                                deployment.engine_version)) is not None:
            assumptions.append(mapped)
        if deployment.engine_version is None:
            known = ", ".join(x.version for x in ENGINE_LIMITS[deployment.engine])
            message = (f"deployment.engine_version not given: {deployment.engine} "
                       f"{limits.version} assumed, the latest of the documented versions "
                       f"({known})")
            assumptions.append(message)
            details.append(WarningDetail(code=DEFAULTED_INPUT,
                                         field="deployment.engine_version", message=message))
    else:
        assumptions.append(f"engine limits: engine {deployment.engine} has no documented "
                           "defaults; the running batch is bounded by KV memory"
                           + ("" if deployment.max_batch is None
                              else f" and max_batch {deployment.max_batch}"))
    if deployment.speculative_acceptance_rate is not None:
        assumptions.append(
            f"speculative decoding: {r.tokens_per_step():.2f} tokens per target step "
            f"({deployment.speculative_draft_tokens} draft tokens, acceptance "
            f"{deployment.speculative_acceptance_rate:g}); the draft model's cost is left out")
    warnings.extend(unvalidated_warnings(model, traffic))
    if traffic.mode is TrafficMode.ONLINE and traffic.requests_per_s is not None:
        assumptions.append(ITERATION_WAIT_NOTE)
        if OPEN_LOOP_TTFT_NOTE not in warnings:
            assumptions.append(OPEN_LOOP_TTFT_NOTE)
    largest = _largest(SERVING_SCALAR, memory.max_concurrency, deployment.running_limit())
    if not memory.fits:
        warnings.append(
            f"does not fit: weights take {memory.weights_bytes_per_gpu / 1e9:.1f} GB of the "
            f"{memory.usable_bytes_per_gpu / 1e9:.1f} GB the engine uses per GPU, leaving no "
            f"room for one sequence's KV cache at its full {traffic.prompt.mean:.0f} + "
            f"{traffic.output.mean:.0f} tokens; use more GPUs per replica or lower precision")
    prefill_mean = r.prefill_s(traffic.prompt.mean)

    def answer_at(load: Traffic) -> _Answer:
        """The answer's figures at ``load`` (the request's traffic, or its slow end)."""
        return _answer(r, load, largest=largest, fits=memory.fits, prefill_mean=prefill_mean,
                       replicas=pinned,
                       size=lambda capacity: pinned or _size(r, load, largest, capacity,
                                                             prefill_mean),
                       online_load=lambda rps, _: _online_load(r, load, rps, largest))

    a = answer_at(traffic)
    if a.waiting > 0:
        what = "batch" if traffic.mode is TrafficMode.FIXED_BATCH else "concurrency"
        warnings.append(
            f"{what} {a.requested:g} exceeds the {a.load.batch:g} sequences that "
            f"fit; {a.waiting:g} wait about {a.queue_s:.3g} s for a slot")
    saturated = bool(a.load.saturated)
    growth = 0.0
    if saturated:
        growth = max(float(a.served - a.capacity), 0.0) * a.count
        message = (f"saturated: {a.served:.3g} requests/s per replica exceeds the "
                   f"replica's capacity of {a.capacity:.3g}")
        warnings.append(message)
        details.append(WarningDetail(
            code=SATURATED,
            field="deployment.replicas" if pinned else "traffic.requests_per_s",
            message=(f"{message}: the queue grows by {growth:.3g} requests/s over "
                     f"{a.count} replica(s), so latency has no steady state")))
    for detail in validation_warnings(model, deployment, traffic, float(a.load.batch)):
        details.append(detail)
        if detail.message not in warnings:
            warnings.append(detail.message)
    unbounded = saturated and pinned is not None
    band = serving_band(
        model, deployment, traffic, output_tokens_per_s=a.served * traffic.output.mean,
        capacity_output_tokens_per_s=a.capacity * traffic.output.mean,
        ttft_p50_s=None if unbounded else a.ttft[0], tpot_p50_s=a.tpot[0])
    assumptions.append(band_assumption(band))
    if (band_detail := band_warning(band)) is not None:
        details.append(band_detail)
        warnings.append(band_detail.message)
    slow_end = None
    if traffic.mode is TrafficMode.ONLINE and traffic.requests_per_s is not None:
        factor = slow_end_factor(band)
        slow = dataclasses.replace(traffic, requests_per_s=traffic.requests_per_s * factor,
                                   slo=_slower(traffic.slo, factor))
        b = answer_at(slow)
        slow_end = SlowEnd(factor=factor, replicas=int(b.count),
                           meets_slo=None if b.within is None else bool(b.meets),
                           saturated=bool(b.load.saturated))
        verdict = ("" if slow_end.meets_slo is None else
                   ", meeting the SLOs" if slow_end.meets_slo else ", missing the SLOs")
        assumptions.append(
            f"band slow end: every time on the replica x{factor:.3g} (1 / the throughput "
            f"band's low ratio) needs {slow_end.replicas} "
            f"replica(s){verdict}{' (saturated)' if slow_end.saturated else ''}; the "
            "replicas and meets_slo above are the model's own figures")
    return ServingEstimate(
        memory=memory, prefill_s=Quantiles(p50=r.prefill_s(traffic.prompt.p50),
                                           p99=r.prefill_s(traffic.prompt.p99)),
        decode_step_s=a.load.step_s, decode_step_memory_s=a.memory_s,
        decode_step_compute_s=a.compute_s, crossover_batch=_crossover(r, _context(traffic)),
        batch=a.load.batch, output_tokens_per_s=a.served * traffic.output.mean,
        input_tokens_per_s=a.served * traffic.prompt.mean, requests_per_s=a.served,
        capacity_requests_per_s=a.capacity, ttft_s=Quantiles(p50=a.ttft[0], p99=a.ttft[1]),
        tpot_s=Quantiles(p50=a.tpot[0], p99=a.tpot[1]),
        e2e_s=Quantiles(p50=a.e2e[0], p99=a.e2e[1]), replicas=a.count,
        meets_slo=None if a.within is None else bool(a.meets), saturated=saturated,
        warnings=tuple(warnings), assumptions=tuple(assumptions),
        warning_details=tuple(details), queue_growth_requests_per_s=growth, band=band,
        slow_end=slow_end)


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


def _batch_field(traffic: Traffic) -> str:
    return ("traffic.batch_size" if traffic.mode is TrafficMode.FIXED_BATCH
            else "traffic.concurrency")


def validation_warnings(model: ModelSpec, deployment: Deployment, traffic: Traffic,
                        batch: float, *,
                        pairs: Mapping[tuple[Engine, str], int] = CALIBRATED_PAIRS,
                        validated: ValidatedRange = VALIDATED_RANGE) -> list[WarningDetail]:
    """The coded warnings of an answer outside what the serving rows validate (issue 40):
    ``uncalibrated_engine`` for an engine x accelerator pair no fitted row ran on (``pairs``),
    ``outside_validated_range`` for a mixture-of-experts model (field ``model``, the message
    ``MOE_SERVING_WARNING``) and for a mean prompt or output length, or the running ``batch``
    of a closed loop (a concurrency or a fixed batch the caller gave), beyond the evaluated
    dense rows (``validated``); an offline or open-loop batch is the engine's, not coded.
    ``pairs`` and ``validated`` default to the shipped fit; the validation passes each
    fold's."""
    details: list[WarningDetail] = []
    engine, accelerator = deployment.engine, deployment.accelerator.id
    if (engine, accelerator) not in pairs:
        fitted = sorted(a for e, a in pairs if e is engine)
        why = ("the unknown engine is never fitted: it takes the least efficient of the named "
               "engines" if engine is Engine.UNKNOWN else
               f"{engine} is fitted on {', '.join(fitted)} only" if fitted else
               f"{engine} has no fitted row and keeps its prior")
        details.append(WarningDetail(
            code=UNCALIBRATED_ENGINE, field="deployment.engine",
            message=(f"uncalibrated engine: no published row of {engine} on {accelerator} "
                     f"was fitted ({why}); the figures are a conservative prior and the band "
                     "is the wide one")))
    if (core := legacy_core(engine, deployment.engine_version)) is not None:
        details.append(WarningDetail(
            code=OUTSIDE_VALIDATED_RANGE, field="deployment.engine_version",
            message=legacy_core_warning(engine, deployment.engine_version, core)))
    if model.num_experts > 0:
        details.append(WarningDetail(code=OUTSIDE_VALIDATED_RANGE, field="model",
                                     message=MOE_SERVING_WARNING))
    for name, value, (low, high) in (
            ("traffic.prompt_tokens", traffic.prompt.mean, validated.prompt_tokens),
            ("traffic.output_tokens", traffic.output.mean, validated.output_tokens)):
        if not low <= value <= high:
            details.append(WarningDetail(
                code=OUTSIDE_VALIDATED_RANGE, field=name,
                message=(f"outside the validated range: a mean of {value:,.0f} "
                         f"{name.split('.')[1].replace('_', ' ')}, where the validated serving "
                         f"rows span {low:,.0f} to {high:,.0f}")))
    closed = traffic.mode is TrafficMode.FIXED_BATCH or traffic.concurrency is not None
    if closed and batch > validated.running_batch_max:
        details.append(WarningDetail(
            code=OUTSIDE_VALIDATED_RANGE, field=_batch_field(traffic),
            message=(f"outside the validated range: a running batch of {batch:,.0f} "
                     "sequences, where the validated serving rows run at most "
                     f"{validated.running_batch_max:,.0f}")))
    return details


def legacy_core_warning(engine: Engine, version: str | None, core: EngineCore) -> str:
    """The message of ``outside_validated_range`` on ``deployment.engine_version`` for a
    release of an earlier core (``LEGACY_ENGINE_CORES``)."""
    return (f"outside the validated range: {engine} {version} runs the {core.name} engine "
            f"(releases before {core.until}); the efficiencies are fitted on rows of later "
            f"releases only, and {LEGACY_CORE_EVIDENCE}; the band is the wide one, widened "
            f"until it held on the {core.name} rows")


def _size(r: _Replica, traffic: Traffic, largest: float, capacity: float,
          prefill_mean: float) -> int:
    """The fewest replicas that serve the load below saturation and meet the SLOs, judged
    with the same TTFT and TPOT the answer reports (``_Replica.ttft``, ``_Replica.tpot``),
    trying max(count + 1, ceil(count x REPLICA_GROWTH)) replicas next."""
    assert traffic.requests_per_s is not None  # noqa: S101 - online with a rate
    count = max(1, math.ceil(traffic.requests_per_s / capacity))
    while count <= MAX_REPLICAS:
        per_replica = traffic.requests_per_s / count
        load = _online_load(r, traffic, per_replica, largest)
        if not load.saturated:
            ttft = r.ttft(traffic, per_replica, load.prefill_share, prefill_mean,
                          _decode_work_share(SERVING_SCALAR, per_replica, capacity,
                                             load.prefill_share),
                          batch=load.batch, step=load.step_s)
            tpot = r.tpot(traffic, load.step_s, load.prefill_share, per_replica)
            if _within_slo(traffic.slo, ttft, tpot) is not False:
                return count
            # An SLO missed at a near-idle replica cannot be met by adding replicas.
            if per_replica * prefill_mean < NEAR_IDLE_PREFILL_SHARE:
                return count
        count = max(count + 1, math.ceil(count * REPLICA_GROWTH))
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
