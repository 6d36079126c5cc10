"""Every scale-up figure is per direction (decision 6; issue 42, "Catalogue"): the A100 was stored
as its bidirectional 600 GB/s while the H100 was stored as 450 per direction, so A100 TP
communication came out faster than H100's for the same bytes."""

from __future__ import annotations

import pytest

from service.core.estimate import estimate
from service.core.specs import ParallelismPlan, Precision, TrainingSpec
from tests.factories import accelerator, cluster, model

GB = 1e9

# Each accelerator's scale-up link as its datasheet states it, bidirectional per GPU, in GB/s,
# and the source. Stored per direction: half of it.
BIDIRECTIONAL_GBYTES_PER_S = {
    "v100-sxm2-32gb": (300, "NVIDIA V100 datasheet: NVLink 300 GB/s"),
    "a100-sxm4-40gb": (600, "NVIDIA A100 datasheet: NVLink 600 GB/s (12 links x 50 GB/s)"),
    "a100-sxm4-80gb": (600, "NVIDIA A100 datasheet: NVLink 600 GB/s"),
    "h100-sxm5-80gb": (900, "NVIDIA H100 datasheet: NVLink 900 GB/s"),
    "h100-96gb-500w": (900, "H100 SXM5 links (Grand Teton)"),
    "h100-pcie-80gb": (600, "NVIDIA H100 datasheet, PCIe: NVLink bridge 600 GB/s"),
    "h100-nvl-94gb": (600, "NVIDIA H100 datasheet, NVL: NVLink bridge 600 GB/s"),
    "h800-sxm5-80gb": (400, "NVIDIA H800: NVLink 400 GB/s (DeepSeek-V3 report, section 3.1)"),
    "h200-sxm-141gb": (900, "NVIDIA H200 datasheet: NVLink 900 GB/s"),
    "b200-sxm-180gb": (1800, "NVIDIA DGX B200 datasheet: NVLink 5, 1.8 TB/s per GPU"),
    "gb200-nvl72": (1800, "NVIDIA GB200 NVL72 datasheet: 130 TB/s over 72 GPUs"),
    "l40s-48gb": (64, "PCIe Gen4 x16, 32 GB/s each way (no NVLink)"),
    "l4-24gb": (64, "PCIe Gen4 x16, 32 GB/s each way (no NVLink)"),
    "mi250x-128gb": (800, "AMD MI250X datasheet: 8 Infinity Fabric links x 100 GB/s"),
    "mi300x-192gb": (896, "AMD MI300X datasheet: 896 GB/s peak aggregate Infinity Fabric"),
    "mi325x-256gb": (896, "AMD MI325X datasheet: as the MI300X"),
    "tpu-v5e": (400, "Cloud TPU v5e page: 400 GBps bidirectional ICI"),
    "tpu-v5p": (600, "Cloud TPU v5p page: ICI 4,800 Gbps per chip"),
    "tpu-v6e": (800, "Cloud TPU v6e page: 800 GBps bidirectional ICI"),
    "tpu-v4": (600, "not published per chip; 300 GB/s a direction assumed (the catalogue note)"),
    "gaudi2-96gb": (525, "21 x 100 GbE RoCE ports for scale-up, full duplex"),
    "gaudi3-128gb": (1050, "21 x 200 GbE RoCE ports for scale-up, full duplex"),
}


@pytest.mark.parametrize("accelerator_id", sorted(BIDIRECTIONAL_GBYTES_PER_S))
def test_every_scale_up_figure_is_stored_per_direction(accelerator_id: str) -> None:
    bidirectional, _source = BIDIRECTIONAL_GBYTES_PER_S[accelerator_id]
    stored = accelerator(accelerator_id).scaleup_bytes_per_s
    assert stored == pytest.approx(bidirectional / 2 * GB, rel=1e-9)


def _tp_comm_s(accelerator_id: str) -> float:
    training = TrainingSpec(seq_len=4096, global_batch_seqs=64, tokens=1e9,
                            precision=Precision.BF16)
    plan = ParallelismPlan(tp=8, pp=1, dp=1, micro_batch=1, zero_stage=1)
    found = estimate(model("llama3.1-70b"), cluster(8, accelerator_id), plan, training)
    return float(found.throughput.step.tp_comm_s)


def test_a100_tp_communication_is_slower_than_h100_for_the_same_bytes() -> None:
    # The same model, layout and tokens: the same TP bytes. NVLink 3 (300 GB/s a direction)
    # against NVLink 4 (450): the bandwidth part is 1.5x longer, the latency part the same.
    a100, h100 = _tp_comm_s("a100-sxm4-80gb"), _tp_comm_s("h100-sxm5-80gb")
    assert a100 > h100
    assert 1.2 < a100 / h100 <= 1.5
