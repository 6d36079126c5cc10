"""Fused attention kernels: which one a stack runs on an accelerator, and what fraction of the
dense 16-bit peak it reaches over forward and backward (issue 15: one global attention
efficiency overstated attention throughput on PyTorch-FSDP stacks, which run FlashAttention-2,
by about 1.7x against Megatron's cuDNN kernels on Hopper).

``KERNEL_PEAK_FRACTION`` holds kernel microbenchmarks: forward + backward, head dimension 128,
causal (useful FLOPs only, as every source below counts them), long sequences (8k-32k), as a
fraction of the accelerator's dense BF16 peak. The step-time model multiplies them by one
fitted correction (``Calibration.attention_kernel_scale``: a microbenchmark's shape is kinder
than a training step's), so the table sets the ratios between kernels and accelerators and the
fit sets the level. A stack/accelerator pair without a measured kernel (TPU splash attention,
AMD, Gaudi, an unknown stack) keeps the fitted global ``attention_efficiency_fraction``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from service.core.envelope import uses_local_defaults
from service.core.specs import AttentionKernel, Framework

Kernel = AttentionKernel
"""The kernels of the table (``specs.AttentionKernel``)."""


class Generation(StrEnum):
    AMPERE = "ampere"
    HOPPER = "hopper"
    BLACKWELL = "blackwell"


GENERATION_OF: Mapping[str, Generation] = MappingProxyType({
    "a100-sxm4-40gb": Generation.AMPERE,
    "a100-sxm4-80gb": Generation.AMPERE,
    "h100-sxm5-80gb": Generation.HOPPER,
    "h100-pcie-80gb": Generation.HOPPER,
    "h100-96gb-500w": Generation.HOPPER,
    "h100-nvl-94gb": Generation.HOPPER,
    "h800-sxm5-80gb": Generation.HOPPER,
    "h200-sxm-141gb": Generation.HOPPER,
    "b200-sxm-180gb": Generation.BLACKWELL,
    "gb200-nvl72": Generation.BLACKWELL,
})
"""Seed-catalogue accelerators by NVIDIA architecture (NVIDIA A100, H100, H200, H800, B200 and
GB200 datasheets)."""

KERNEL_PEAK_FRACTION: Mapping[tuple[Kernel, Generation], float] = MappingProxyType({
    (Kernel.FA2, Generation.AMPERE): 0.61,
    # Dao-AILab/flash-attention README, "Performance / A100" (the FA2 paper's Fig. 4):
    # FA2 fwd+bwd, hd 128, causal, 16k: 189 TFLOP/s of 312.
    (Kernel.FA2, Generation.HOPPER): 0.33,
    # Same README, "Performance / H100": FA2 fwd+bwd, hd 128, causal, 16k: 328 of 989; the
    # FA3 abstract: "FlashAttention-2 achieving only 35% utilization on the H100". Measured
    # here (PyTorch 2.11 SDPA flash backend, H200, 16 heads, 32k tokens per call): 313 at
    # 16k, 322 at 32k (0.32-0.33).
    (Kernel.FA3, Generation.HOPPER): 0.59,
    # FA3 paper (arXiv 2407.08608): forward 648 TFLOP/s (README assets/flash3_fp16_fwd.png,
    # hd 128, 16k) and backward 561 (the paper's backward figure): 3.5/(1/648 + 2.5/561) = 583.
    (Kernel.CUDNN, Generation.HOPPER): 0.61,
    # NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/
    # llama3.1_20260227_034703.csv (cuDNN 9.19, H200): BF16 causal 16k, fwd 673 and bwd 579
    # TFLOP/s, 603 forward + backward, of 989. Measured here through PyTorch 2.11's SDPA
    # (the same cuDNN 9.19): 530 at 16k and 537 at 32k (0.54); the fitted
    # ``attention_kernel_scale`` sets the level.
    (Kernel.CUDNN, Generation.BLACKWELL): 0.56,
    # cudnn-frontend artifacts sdpa_bf16/fp8_benchmark_results_NVIDIA_B200.csv (cuDNN 9.13.1,
    # B200, 0.53-0.56 at 16k-32k) and _GB200.csv (cuDNN 9.17, 0.57 at 32k of 2500).
    (Kernel.FA2, Generation.BLACKWELL): 0.16,
    # Same B200 artifact: FlashAttention 2.7.4, causal 32k, 367 TFLOP/s forward + backward.
})

STACK_KERNEL: Mapping[tuple[Framework, Generation], Kernel] = MappingProxyType({
    # Megatron-Core runs Transformer Engine's DotProductAttention, whose fused-attention
    # (cuDNN) backend it prefers on Hopper and Blackwell; on Ampere it runs FlashAttention-2.
    (Framework.MEGATRON, Generation.AMPERE): Kernel.FA2,
    (Framework.MEGATRON, Generation.HOPPER): Kernel.CUDNN,
    (Framework.MEGATRON, Generation.BLACKWELL): Kernel.CUDNN,
    # PyTorch SDPA picks its flash (FA2) backend on Ampere and Hopper (torch.nn.attention
    # SDPBackend priority order); on Blackwell FA2 reaches 0.16 of peak, and PyTorch stacks
    # there are assumed to run cuDNN (SDPA's cuDNN backend), the only fast kernel.
    (Framework.TORCHTITAN, Generation.AMPERE): Kernel.FA2,
    # torchtitan calls SDPA, whose order PyTorch changed: cuDNN was opt-in from 2.5.1
    # (pytorch/pytorch#138522) and is preferred again on sm90/sm100 once the bundled cuDNN is
    # newer than 9.15 (``check_prefer_cudnn_attention`` in aten/src/ATen/native/transformers/
    # cuda/sdp_utils.cpp, PyTorch 2.10; PyTorch 2.11 ships cuDNN 9.19). Measured on this
    # project's H200 with PyTorch 2.11 (benchmarks/data/device-h200-attention-2026-11-26.json):
    # the default matched cuDNN's time at 4 of 5 lengths, 530 TFLOP/s forward + backward at
    # 16k (0.54 of 989; flash 313, 0.32). A torchtitan run on an older PyTorch states fa2.
    (Framework.TORCHTITAN, Generation.HOPPER): Kernel.CUDNN,
    (Framework.TORCHTITAN, Generation.BLACKWELL): Kernel.CUDNN,
    (Framework.FSDP, Generation.AMPERE): Kernel.FA2,
    (Framework.FSDP, Generation.HOPPER): Kernel.FA2,
    (Framework.FSDP, Generation.BLACKWELL): Kernel.CUDNN,
    (Framework.DEEPSPEED, Generation.AMPERE): Kernel.FA2,
    (Framework.DEEPSPEED, Generation.HOPPER): Kernel.FA2,
    (Framework.DEEPSPEED, Generation.BLACKWELL): Kernel.CUDNN,
    # MaxText on NVIDIA GPUs uses attention=cudnn_flash_te (cuDNN through Transformer Engine).
    (Framework.MAXTEXT, Generation.AMPERE): Kernel.FA2,
    (Framework.MAXTEXT, Generation.HOPPER): Kernel.CUDNN,
    (Framework.MAXTEXT, Generation.BLACKWELL): Kernel.CUDNN,
})
"""The kernel a stack runs by default; ``unknown`` has none (it keeps the fitted global)."""


PUBLISHED_STACK_KERNEL: Mapping[Framework, Kernel] = MappingProxyType({
    # Before PyTorch 2.10 (January 2026) SDPA ran its flash backend (FlashAttention-2) unless
    # cuDNN was opted into (pytorch/pytorch#138522, 2.5.1): the kernel of torchtitan's
    # published runs (benchmarks/llama3_h100_202412_torchtitan.md states FA2 on H100).
    Framework.TORCHTITAN: Kernel.FA2,
})
"""The default kernel of a stack whose ``STACK_KERNEL`` entry comes from this project's own
measurements (``envelope.LOCAL_DEFAULTS``), for a request whose ``framework_version`` names
the published runs' software (or a release that cannot be placed in time)."""


def kernel_for(framework: Framework, accelerator_id: str,
               stated: Kernel | None = None, version: str | None = None) -> Kernel | None:
    """The kernel the caller stated, else the stack's default on the accelerator's
    generation (for the software ``version`` names: ``envelope.uses_local_defaults``); None
    on an accelerator outside the table."""
    generation = GENERATION_OF.get(accelerator_id)
    if generation is None:
        return None
    if stated is not None:
        return stated
    if framework in PUBLISHED_STACK_KERNEL and not uses_local_defaults(framework, version):
        return PUBLISHED_STACK_KERNEL[framework]
    return STACK_KERNEL.get((framework, generation))


def kernel_peak_fraction(framework: Framework, accelerator_id: str,
                         stated: Kernel | None = None,
                         version: str | None = None) -> float | None:
    """The table's forward + backward peak fraction for the kernel (stated or the stack's),
    or None where the table has no measurement (the fitted global efficiency then applies)."""
    kernel = kernel_for(framework, accelerator_id, stated, version)
    if kernel is None:
        return None
    generation = GENERATION_OF[accelerator_id]
    return KERNEL_PEAK_FRACTION.get((kernel, generation))
