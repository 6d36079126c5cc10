"""The region the calibration was fitted on, and which dimensions of a request leave it
(issue 37, cause 8: "the band does not know its envelope").

``REGIONS`` is data: per training stack, what its usable rows of
``benchmarks/data/published-runs.csv`` cover (source families, rows, GPU counts, hidden sizes,
sequence lengths, accelerators, MoE or not); ``unknown`` pools every row, since a request that
names no stack gets the pooled fit. ``python -m benchmarks.envelope`` derives it from the CSV
(calibration 2026-11-27.6, 239 usable rows, 36 families) and ``tests/core/test_envelope.py``
checks the two agree, so a new row cannot leave it stale.

``outside_details`` names each dimension of a request outside its stack's region, as an
``outside_validated_range`` warning whose ``field`` is the request field: ``cluster.num_gpus``,
``model.hidden_size``, ``training.seq_len``, ``cluster.accelerator``, ``model.num_experts``
(MoE) or ``training.framework``. Ranges are the rows' hull, with no margin: a request one GPU
past the largest run is outside, and the message says by how many doublings.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from service.core.plausibility import OUTSIDE_VALIDATED_RANGE, WarningDetail
from service.core.specs import Framework

LOCAL_SOURCE = "ComputeQuote device measurement"
"""The ``source`` of the rows this project measured on its own GPUs (benchmarks/device)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Region:
    """What one stack's rows cover."""

    framework: str
    rows: int
    local_rows: int
    """Rows measured by this project (``LOCAL_SOURCE``), not published."""
    families: tuple[str, ...]
    num_gpus: tuple[int, int]
    hidden_size: tuple[int, int]
    seq_len: tuple[int, int]
    accelerators: tuple[str, ...]
    moe: bool


SAME_SILICON: Mapping[str, str] = MappingProxyType({
    "a100-sxm4-40gb": "a100", "a100-sxm4-80gb": "a100",
    "h100-sxm5-80gb": "h100", "h200-sxm-141gb": "h100", "h800-sxm5-80gb": "h100",
    "h100-96gb-500w": "h100",
    "b200-sxm-180gb": "b200", "gb200-nvl72": "b200",
    "mi300x-192gb": "mi300", "mi325x-256gb": "mi300",
})
"""Accelerators that are one chip (NVIDIA A100, H100, H200, H800, B200, GB200 and AMD MI300X,
MI325X datasheets; the calibration gives each group one GEMM efficiency): a stack whose rows
ran on one of a group is taken to cover the others."""


# python -m benchmarks.envelope (2026-12-01): the usable rows of published-runs.csv.
REGIONS: Mapping[str, Region] = MappingProxyType({
    "deepspeed": Region(
        framework="deepspeed", rows=8, local_rows=0,
        families=(
            "DeepSpeed blog",
            "jzhang38/TinyLlama",
            "microsoft/Megatron-DeepSpeed",
        ),
        num_gpus=(64, 1024), hidden_size=(2048, 32768), seq_len=(512, 2048),
        accelerators=(
            "a100-sxm4-40gb",
            "a100-sxm4-80gb",
            "v100-sxm2-32gb",
        ),
        moe=False),
    "fsdp": Region(
        framework="fsdp", rows=34, local_rows=0,
        families=(
            "Belevich",
            "PyTorch blog",
            "allenai/OLMo-core",
            "foundation-model-stack/fms-fsdp",
            "jzhang38/TinyLlama",
            "llm-foundry",
            "mosaicml/mpt-7b",
        ),
        num_gpus=(8, 512), hidden_size=(2048, 25600), seq_len=(512, 65536),
        accelerators=(
            "a100-sxm4-40gb",
            "a100-sxm4-80gb",
            "h100-sxm5-80gb",
        ),
        moe=False),
    "maxtext": Region(
        framework="maxtext", rows=40, local_rows=0,
        families=(
            "AI-Hypercomputer/maxtext",
            "AI-Hypercomputer/tpu-recipes",
            "NVIDIA dgxc-benchmarking",
            "google/maxtext",
        ),
        num_gpus=(8, 8192), hidden_size=(4096, 20480), seq_len=(1024, 8192),
        accelerators=(
            "h100-sxm5-80gb",
            "tpu-v4",
            "tpu-v5e",
            "tpu-v5p",
            "tpu-v6e",
        ),
        moe=True),
    "megatron": Region(
        framework="megatron", rows=86, local_rows=0,
        families=(
            "FlagOpen/FlagPerf",
            "Megatron-LM",
            "NVIDIA Megatron-Bridge",
            "NVIDIA NeMo",
            "NVIDIA dgxc-benchmarking",
            "NVIDIA/Megatron-LM",
            "Narayanan",
            "Skywork-13B",
            "hisohara/ai-scripts",
            "mlcommons/training_results_v3.0",
            "mlcommons/training_results_v4.0",
            "mlcommons/training_results_v4.1",
            "mlcommons/training_results_v5.0",
            "mlcommons/training_results_v5.1",
            "yanring/Megatron-MoE-ModelZoo",
        ),
        num_gpus=(8, 10752), hidden_size=(2048, 25600), seq_len=(2048, 131072),
        accelerators=(
            "a100-sxm4-40gb",
            "a100-sxm4-80gb",
            "b200-sxm-180gb",
            "gb200-nvl72",
            "h100-sxm5-80gb",
            "h200-sxm-141gb",
            "mi325x-256gb",
        ),
        moe=True),
    "torchtitan": Region(
        framework="torchtitan", rows=39, local_rows=31,
        families=(
            "ComputeQuote",
            "torchtitan",
        ),
        num_gpus=(1, 512), hidden_size=(1024, 16384), seq_len=(2048, 32768),
        accelerators=(
            "a100-sxm4-80gb",
            "h100-96gb-500w",
            "h100-sxm5-80gb",
            "h200-sxm-141gb",
        ),
        moe=False),
    "unknown": Region(
        framework="unknown", rows=239, local_rows=31,
        families=(
            "AI-Hypercomputer/maxtext",
            "AI-Hypercomputer/tpu-recipes",
            "Belevich",
            "Chowdhery",
            "ComputeQuote",
            "DeepSpeed blog",
            "FlagOpen/FlagPerf",
            "Megatron-LM",
            "NVIDIA Megatron-Bridge",
            "NVIDIA NeMo",
            "NVIDIA dgxc-benchmarking",
            "NVIDIA/Megatron-LM",
            "Narayanan",
            "PyTorch blog",
            "ServiceNow/Fast-LLM",
            "Skywork-13B",
            "allenai/OLMo-core",
            "foundation-model-stack/fms-fsdp",
            "google/maxtext",
            "hisohara/ai-scripts",
            "huggingface/nanotron",
            "huggingface/smollm",
            "jzhang38/TinyLlama",
            "llm-foundry",
            "microsoft/Megatron-DeepSpeed",
            "mlcommons/training_results_v3.0",
            "mlcommons/training_results_v4.0",
            "mlcommons/training_results_v4.1",
            "mlcommons/training_results_v5.0",
            "mlcommons/training_results_v5.1",
            "mosaicml/mpt-7b",
            "tiiuae/falcon-180B",
            "tiiuae/falcon-40b",
            "tiiuae/falcon-7b",
            "torchtitan",
            "yanring/Megatron-MoE-ModelZoo",
        ),
        num_gpus=(1, 10752), hidden_size=(1024, 32768), seq_len=(512, 131072),
        accelerators=(
            "a100-sxm4-40gb",
            "a100-sxm4-80gb",
            "b200-sxm-180gb",
            "gb200-nvl72",
            "h100-96gb-500w",
            "h100-sxm5-80gb",
            "h200-sxm-141gb",
            "mi325x-256gb",
            "tpu-v4",
            "tpu-v5e",
            "tpu-v5p",
            "tpu-v6e",
            "v100-sxm2-32gb",
        ),
        moe=True),
})


def _silicon(accelerator_id: str) -> str:
    return SAME_SILICON.get(accelerator_id, accelerator_id)


def _doublings(value: int, low: int, high: int) -> float:
    if value < low:
        return math.log2(low / value)
    if value > high:
        return math.log2(value / high)
    return 0.0


def outside_details(*, framework: Framework, accelerator_id: str, calibrated: bool,
                    num_gpus: int, hidden_size: int, seq_len: int, moe: bool,
                    regions: Mapping[str, Region] | None = None) -> list[WarningDetail]:
    """An ``outside_validated_range`` warning for each dimension of the request outside its
    stack's region (``regions``: ``REGIONS`` unless given, e.g. one derived without a source
    family). An accelerator without a calibration is not judged here: it carries
    ``uncalibrated_accelerator`` instead."""
    table = REGIONS if regions is None else regions
    stack = framework.value
    region = table.get(stack)
    if region is None:
        return [WarningDetail(OUTSIDE_VALIDATED_RANGE, "training.framework",
                              f"no published run of the {stack} stack is in the calibration "
                              "set")]
    found: list[WarningDetail] = []
    label = "the calibration set" if framework == Framework.UNKNOWN else f"{stack} runs"
    for field, value, (low, high), unit in (
            ("cluster.num_gpus", num_gpus, region.num_gpus, "GPUs"),
            ("model.hidden_size", hidden_size, region.hidden_size, "hidden size"),
            ("training.seq_len", seq_len, region.seq_len, "tokens per sequence")):
        distance = _doublings(value, low, high)
        if distance > 0:
            side = "below" if value < low else "above"
            found.append(WarningDetail(
                OUTSIDE_VALIDATED_RANGE, field,
                f"{value:,} {unit} is {distance:.1f} doublings {side} the {low:,}-{high:,} of "
                f"the {region.rows} {label} the estimate is calibrated on"))
    if calibrated and _silicon(accelerator_id) not in {_silicon(a) for a in region.accelerators}:
        found.append(WarningDetail(
            OUTSIDE_VALIDATED_RANGE, "cluster.accelerator",
            f"none of the {region.rows} {label} in the calibration set ran on {accelerator_id} "
            f"or the same chip (they ran on {', '.join(region.accelerators)})"))
    if moe and not region.moe:
        found.append(WarningDetail(
            OUTSIDE_VALIDATED_RANGE, "model.num_experts",
            f"no mixture-of-experts model is among the {region.rows} {label} in the "
            "calibration set"))
    return found


class VersionEra(StrEnum):
    """Where ``training.framework_version`` places a run against the rows measured here."""

    NOT_GIVEN = "not_given"
    CURRENT = "current"
    """At or after the version the local rows were measured on: the local defaults hold."""
    PUBLISHED = "published"
    """Before it: the published runs' software, whose defaults differ."""
    UNPLACED = "unplaced"
    """A release string that cannot be placed in time."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalDefaults:
    """A stack whose default kernel and band rest on rows measured on this project's GPUs."""

    since: tuple[int, int]
    """(year, month) from which the stack's software behaves as in the local rows."""
    torch_since: tuple[int, int]
    """The same boundary as a PyTorch (major, minor) release."""
    note: str


LOCAL_DEFAULTS: Mapping[Framework, LocalDefaults] = MappingProxyType({
    Framework.TORCHTITAN: LocalDefaults(
        since=(2026, 1), torch_since=(2, 10),
        note=("31 of the 39 torchtitan rows are single-GPU steps measured here with PyTorch "
              "2.11 (benchmarks/device, 2026-11), whose SDPA prefers cuDNN attention on "
              "Hopper and Blackwell: the stack's default kernel there (attention.STACK_KERNEL) "
              "and its narrow band come from them. PyTorch prefers cuDNN again only from 2.10 "
              "(check_prefer_cudnn_attention, aten/src/ATen/native/transformers/cuda/"
              "sdp_utils.cpp; cuDNN was opt-in from 2.5.1, pytorch/pytorch#138522), released "
              "in January 2026; earlier runs, such as torchtitan's published 2024 tables, ran "
              "SDPA's flash backend (FlashAttention-2)")),
})
"""Stacks whose defaults come from local measurements (issue 37, cause 1)."""

_DATE = re.compile(r"^(\d{4})-(\d{2})(?:-\d{2})?$")
_TORCH = re.compile(r"^(?:py)?torch[ _-]?v?(\d+)\.(\d+)", re.IGNORECASE)


def version_era(framework: Framework, version: str | None) -> VersionEra:
    """``training.framework_version`` against the stack's local rows: a date ``YYYY-MM`` (or
    ``YYYY-MM-DD``) or a PyTorch release (``torch 2.4``, ``pytorch-2.11``) is placed before or
    after ``LocalDefaults.since``; any other release string is ``UNPLACED``. Stacks without
    local rows are ``CURRENT`` for any version (the version is only echoed)."""
    if version is None:
        return VersionEra.NOT_GIVEN
    local = LOCAL_DEFAULTS.get(framework)
    if local is None:
        return VersionEra.CURRENT
    text = version.strip()
    if (date := _DATE.match(text)) is not None:
        placed = (int(date.group(1)), int(date.group(2)))
        return VersionEra.CURRENT if placed >= local.since else VersionEra.PUBLISHED
    if (torch := _TORCH.match(text)) is not None:
        release = (int(torch.group(1)), int(torch.group(2)))
        return VersionEra.CURRENT if release >= local.torch_since else VersionEra.PUBLISHED
    return VersionEra.UNPLACED


def uses_local_defaults(framework: Framework, version: str | None) -> bool:
    """Whether the stack's locally measured defaults (kernel, band) apply to the request:
    always for a stack without local rows; for one with them, unless the version names the
    published runs' software or cannot be placed."""
    if framework not in LOCAL_DEFAULTS:
        return True
    return version_era(framework, version) in (VersionEra.NOT_GIVEN, VersionEra.CURRENT)
