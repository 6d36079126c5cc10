"""The model's free constants, kept as data with their provenance (docs/model.md section 5).

Every constant below was fitted by ``benchmarks/calibrate.py`` against the published training
runs in ``benchmarks/data/published-runs.csv`` (copied from the team's validation set; sources
listed in that file's README), minimising the mean absolute log error of tokens/s per GPU with
a pull towards the physically motivated starting points named in each field's comment (strong
for the knobs few source families inform: ``benchmarks.calibrate.strong_prior``).
Re-run the fit after changing the model and paste its output here.

Efficiencies are fractions of the datasheet dense peak (NVIDIA A100/H100 datasheets) and of
nominal link bandwidth (nccl-tests PERFORMANCE.md defines bus bandwidth against which these
are measured).
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.envelope import uses_local_defaults
from service.core.specs import Framework, Precision


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmEfficiency:
    """Peak fraction reached by large GEMMs on one accelerator, per precision."""

    by_precision: dict[Precision, float]

    def for_precision(self, precision: Precision) -> float:
        if precision in self.by_precision:
            return self.by_precision[precision]
        return self.by_precision[Precision.BF16]


@dataclass(frozen=True, slots=True, kw_only=True)
class Band:
    """The 80% band of one regime: order statistics of (predicted / measured - 1) on published
    runs, each predicted by a refit without its source family (split conformal, Vovk et al. 2005;
    Angelopoulos and Bates 2021, section 1: the ceil((n+1) q)-th order statistics).
    Derived by ``python -m benchmarks.band`` (docs/validation.md, "The band")."""

    regime: str
    low_fraction: float
    high_fraction: float
    rows: int
    """Out-of-sample rows behind it."""
    coverage_fraction: float
    """Share of those rows inside the band when each source's rows are judged by a band
    derived without that source (leave-one-source-out coverage)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """Fitted constants of the performance and memory model."""

    version: str
    provenance: str
    gemm_efficiency: dict[str, GemmEfficiency]
    """Large-GEMM peak fraction by accelerator id; ``default`` covers uncalibrated ones."""
    gemm_shape_ridge_multiple: float
    """Half-efficiency point of the GEMM size curve, in multiples of the roofline ridge
    (peak FLOP/s / HBM bytes/s): efficiency = max * I / (I + k * ridge), I = 1/(1/M+1/K+1/N)
    (Williams et al. 2009, roofline; Calculon, Isaev et al. SC'23, keeps such curves as data)."""
    attention_efficiency_fraction: float
    """FlashAttention throughput relative to the GEMM peak fraction (Dao 2023 reports 50-73% of
    peak for FlashAttention-2 forward+backward on A100)."""
    step_overhead_s: float = 0.0
    """Seconds per optimizer step that do not scale with the work or the GPU count: kernel
    launches of the optimizer and gradient clipping, the loss read-back, logging and the data
    loader's hand-off (``timing.step_overhead_s``; the scale-dependent parts are
    ``step_sync_s_per_doubling`` and ``straggler_fraction``)."""
    step_sync_s_per_doubling: float = 0.0
    """Seconds per step per doubling of the GPU count: the latency of the step's global
    synchronisations (``timing.step_overhead_s``)."""
    straggler_fraction: float = 0.0
    """Coefficient of variation of one rank's step time: the step waits for the slowest rank,
    mean x (1 + this x sqrt(2 ln N)) (``timing.step_overhead_s``)."""
    attention_kernel_scale: float = 1.0
    """Training-step attention throughput relative to the kernel microbenchmarks of
    ``attention.KERNEL_PEAK_FRACTION``, for stack/accelerator pairs that have one."""
    elementwise_passes: float
    """HBM passes over the stored activations per micro-batch for norms, activations, residuals,
    dropout-free softmax statistics and casts (memory-bound work)."""
    eager_elementwise_multiplier: float = 1.0
    """How many times the elementwise HBM passes an eager PyTorch step makes over a compiled
    one (``TrainingSpec.torch_compile`` False on torchtitan or an FSDP trainer): eager runs
    each norm, activation, rotary and residual op as its own kernel, reading and writing the
    activations each time, where ``torch.compile`` (Ansel et al. 2024, PyTorch 2, TorchInductor
    fusion) fuses them. Fitted on the rows that state compile on or off: the same layouts run
    both ways measured 8.7-10.3% apart on an H200 (benchmarks/device) and 11-28% in fms-fsdp's
    and IBM's Llama 2 tables."""
    moe_expert_efficiency_fraction: float
    """Grouped expert GEMMs plus token permutation relative to dense GEMMs (MoE benchmark rows)."""
    scaleup_efficiency_fraction: float
    """Achieved fraction of NVLink/Infinity Fabric bandwidth for large collectives."""
    scaleout_efficiency_fraction: float
    """Achieved fraction of InfiniBand/RoCE/EFA per-GPU bandwidth for large collectives."""
    collective_latency_s: float
    """Fixed latency per collective (nccl-tests small-message latency, tens of microseconds)."""
    tp_comm_exposed_fraction: float
    """Share of tensor-parallel collectives not hidden behind GEMMs."""
    dp_comm_min_exposed_fraction: float
    """Share of data-parallel traffic that is never hidden (the last gradient bucket)."""
    ep_comm_exposed_fraction: float
    """Share of expert-parallel all-to-all time not hidden behind another micro-batch's compute
    (Megatron-Core MoE all-to-all overlap; DeepSeek-V3 dual micro-batch overlap)."""
    selective_activation_fraction: float
    """Activation memory kept under selective recomputation, fitted to torchtitan's peaks."""
    memory_overhead_bytes: float
    """CUDA context, NCCL buffers and workspace per GPU."""
    memory_fragmentation_fraction: float
    """Allocator fragmentation, as a fraction of activation memory: part of the peak that must
    fit (fitted under the constraint that every published layout that ran fits)."""
    allocator_reserve_fraction: float = 0.0
    """What PyTorch's caching allocator reserves beyond the peak it must fit, as a fraction of
    it: cached blocks it releases and retries when an allocation fails (PyTorch CUDA
    semantics, memory management). Published peaks are mostly reserved memory (torchtitan
    logs max_reserved), so this is fitted to them; ``fits`` never uses it."""
    residual_low_fraction: float
    """10th percentile of (predicted / measured - 1) for tokens/s over the fit rows."""
    residual_high_fraction: float
    """90th percentile of the same, in sample (reported by the fit; the estimate's band comes
    from ``bands``, which are out of sample)."""
    stack_efficiency: dict[str, float]
    """Compute throughput of a training stack relative to Megatron-Core (1.0), by framework:
    kernels (attention, fused norms and activations), compilation and launch overhead differ
    by stack at the same layout (issue 15: one global efficiency was really one stack's fit).
    ``unknown`` is the geometric mean of the fitted stacks. Fitted like the other constants."""
    stack_dp_exposed_fraction: dict[str, float]
    """Per stack, the share of data-parallel (ZeRO/FSDP) traffic that is never hidden, where
    it differs from ``dp_comm_min_exposed_fraction`` (issue 15: FSDP trainers expose much more
    of the ZeRO-3 all-gathers and reduce-scatters than Megatron's overlapped distributed
    optimizer; the first all-gather and the last reduce-scatter cannot overlap at all, Zhao et
    al. 2023, PyTorch FSDP, section 4). Fitted."""
    bands: dict[str, Band]
    """The 80% band by regime (``regime_of``); a regime without its own band, such as
    ``uncalibrated``, takes ``unknown``, which pools every out-of-sample row."""

    def gemm_efficiency_for(self, accelerator_id: str, precision: Precision) -> float:
        table = self.gemm_efficiency.get(accelerator_id, self.gemm_efficiency["default"])
        return table.for_precision(precision)

    def is_calibrated_for(self, accelerator_id: str) -> bool:
        return accelerator_id in self.gemm_efficiency

    def band_for(self, *, framework: Framework, moe: bool, accelerator_id: str,
                 framework_version: str | None = None) -> Band:
        """The regime's band: an uncalibrated accelerator first (its efficiency is a prior,
        not a fit), then MoE, then the stack; a regime without enough rows uses ``unknown``.
        A stack whose band rests on rows measured here (``envelope.LOCAL_DEFAULTS``) takes
        ``unknown`` too when ``framework_version`` names older software or cannot be placed:
        its published runs are too few (8 torchtitan rows) for a band of their own."""
        regime = self.regime_of(framework=framework, moe=moe, accelerator_id=accelerator_id)
        if regime == framework.value and not uses_local_defaults(framework, framework_version):
            return self.bands[Framework.UNKNOWN.value]
        return self.bands.get(regime, self.bands[Framework.UNKNOWN.value])

    def stack_efficiency_for(self, framework: Framework) -> float:
        return self.stack_efficiency.get(framework.value, 1.0)

    def dp_exposed_fraction_for(self, framework: Framework) -> float:
        return self.stack_dp_exposed_fraction.get(framework.value,
                                                  self.dp_comm_min_exposed_fraction)

    def regime_of(self, *, framework: Framework, moe: bool, accelerator_id: str) -> str:
        if not self.is_calibrated_for(accelerator_id):
            return "uncalibrated"
        if moe:
            return "moe"
        return framework.value


def half_efficiency(efficiency: float, *, fp8: float | None = None) -> GemmEfficiency:
    """One efficiency for bf16 and fp16 (the same tensor-core rate), and fp8 where fitted."""
    table = {Precision.BF16: efficiency, Precision.FP16: efficiency}
    if fp8 is not None:
        table[Precision.FP8] = fp8
    return GemmEfficiency(by_precision=table)


DEFAULT_CALIBRATION = Calibration(
    version="2026-12-02.2",
    provenance=(
        "Fitted by benchmarks/calibrate.py on 237 of the 239 usable runs (two FSDP 1T runs "
        "bottlenecked by allocator retries are left out: fit_excluded) from 36 source "
        "families (benchmarks/data/published-runs.csv: SC'21 Megatron-LM, Megatron-LM, NVIDIA "
        "DGX Cloud, NeMo and Megatron-Bridge, torchtitan, llm-foundry, MLPerf Training v3.0-"
        "v5.1, MaxText/TPU recipes, PyTorch FSDP, DeepSpeed, nanotron, Megatron-MoE ModelZoo, "
        "AMD MI325X Primus logs, open-model reports, and 31 single-GPU steps this project "
        "measured on an H200 and an H100, benchmarks/device), each family weighted equally; 55 "
        "rows state torch.compile on or off (the eager elementwise multiplier). Memory "
        "constants on the same rows: the reserve on the 44 published peaks, the rest under the "
        "constraint that every layout that ran fits. "
        "Refit on 2026-12-02 after issue 37's physics (NCCL's collective latency by "
        "algorithm, protocol and ring size; score-matrix traffic without FlashAttention; "
        "Megatron's scattered and overlapped pipeline sends). "
        "Refit on 2026-12-02 (2026-12-02.2) after the A100's NVLink was stored per "
        "direction (300 GB/s, as every other scale-up figure; it was 600) and the A800 rows' "
        "links with it (200 GB/s). "
        "Out-of-sample figures (leave one family out) are in docs/validation.md."
    ),
    gemm_efficiency={
        "a100-sxm4-80gb": half_efficiency(0.6477),
        "a100-sxm4-40gb": half_efficiency(0.6477),
        # H200 and H800 are H100 silicon (NVIDIA H200 and H800 datasheets).
        "h100-sxm5-80gb": half_efficiency(0.6864, fp8=0.6259),
        "h200-sxm-141gb": half_efficiency(0.6864, fp8=0.6259),
        "h800-sxm5-80gb": half_efficiency(0.6864, fp8=0.6259),
        "h100-96gb-500w": half_efficiency(0.5069, fp8=0.3738),
        "b200-sxm-180gb": half_efficiency(0.721, fp8=0.6136),
        "gb200-nvl72": half_efficiency(0.721, fp8=0.6136),
        "tpu-v4": half_efficiency(0.749),
        "tpu-v5e": half_efficiency(0.7282),
        "tpu-v5p": half_efficiency(0.7426),
        "tpu-v6e": half_efficiency(0.721),
        # MI325X is MI300X silicon (AMD datasheets): both fitted on the MI325X runs.
        "mi300x-192gb": half_efficiency(0.5941, fp8=0.5),
        "mi325x-256gb": half_efficiency(0.5941, fp8=0.5),
        # Accelerators without published runs: a conservative prior, below every fitted
        # GPU (issue 15: they used to get the best calibrated GPU's efficiency), with the
        # widest band.
        "default": half_efficiency(0.60, fp8=0.50),
    },
    gemm_shape_ridge_multiple=1.176,
    step_overhead_s=0.0103,
    step_sync_s_per_doubling=0.01096,
    straggler_fraction=0.009439,
    attention_kernel_scale=0.8611,
    attention_efficiency_fraction=0.4669,
    elementwise_passes=3.552,
    eager_elementwise_multiplier=2.0,
    moe_expert_efficiency_fraction=0.7797,
    scaleup_efficiency_fraction=0.8791,
    scaleout_efficiency_fraction=0.95,
    collective_latency_s=20e-6,
    tp_comm_exposed_fraction=0.4104,
    dp_comm_min_exposed_fraction=0.05,
    ep_comm_exposed_fraction=0.7776,
    selective_activation_fraction=0.4173,
    memory_overhead_bytes=1.563e+09,
    memory_fragmentation_fraction=0.07795,
    allocator_reserve_fraction=0.2222,
    residual_low_fraction=-0.1705,
    residual_high_fraction=0.1937,
    stack_efficiency={"megatron": 1.0, "torchtitan": 0.9901, "fsdp": 1.0,
                      "deepspeed": 0.9901, "maxtext": 1.059, "unknown": 1.008},
    stack_dp_exposed_fraction={"fsdp": 0.5, "deepspeed": 0.5, "torchtitan": 0.05},
    # python -m benchmarks.band (2026-12-02): leave-one-source-out residuals of all 239 usable
    # rows (make holdout, calibration 2026-12-02.2), 36 source families; each side's tail
    # chosen separately; coverage is leave-one-family-out (overall 83.7%; every regime at
    # least 80%).
    bands={
        "fsdp": Band(regime="fsdp", low_fraction=-0.3582, high_fraction=0.2832,
                  rows=34, coverage_fraction=0.853),
        "maxtext": Band(regime="maxtext", low_fraction=-0.3581, high_fraction=0.3160,
                  rows=36, coverage_fraction=0.861),
        "megatron": Band(regime="megatron", low_fraction=-0.1567, high_fraction=0.1469,
                  rows=60, coverage_fraction=0.850),
        "moe": Band(regime="moe", low_fraction=-0.2608, high_fraction=0.5143,
                  rows=30, coverage_fraction=0.867),
        "torchtitan": Band(regime="torchtitan", low_fraction=-0.0362, high_fraction=0.1828,
                  rows=39, coverage_fraction=0.821),
        "unknown": Band(regime="unknown", low_fraction=-0.1998, high_fraction=0.2567,
                  rows=239, coverage_fraction=0.812),
    }
)
