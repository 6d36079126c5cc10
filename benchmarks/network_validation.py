"""The network terms against published measurements (issue 42, "Validation").

``benchmarks/data/network-measurements.csv`` holds one published figure a row, with its
document, address, table or line and the exact figure; this module runs the core's own terms
on each row's setup and prints the error (predicted / measured - 1):

- ``allreduce_busbw``: nccl-tests ``all_reduce_perf`` bus bandwidth at one message size: the
  core's collective time (``collectives.collective_s``: NCCL's fastest ring or tree, LL /
  LL128 / Simple) at the ring bandwidth ``timing.ring_bandwidth`` gives, on the row's
  protocol (``fabric.fabric_terms``), turned into nccl-tests' busbw = S / t x 2(n - 1) / n;
- ``allreduce_time``: the same collective's time in microseconds at a latency-bound size;
- ``loss_goodput``: a transport's throughput under random loss relative to none, against
  ``fabric.loss_goodput_fraction`` at the row's link rate, latency and MTU;
- ``tcp_flow``: one TCP flow's throughput under loss, against the core's per-flow Mathis term
  (``fabric.mathis_flow_bytes_per_s``), capped at the line rate;
- ``mfu``: a large-scale run's MFU, against ``estimate`` on the stated layout;
- ``powersgd_numbers``: the numbers PowerSGD sends over the uncompressed gradient's, against
  the core's ``fabric.powersgd_fraction`` over ``fabric.matrix_shapes`` of the row's
  transformer, sharded over the row's ``gpus_per_node`` GPUs, at its per-GPU rank
  (``POWERSGD_SETUPS``).

Each row states a tolerance and whether the model is expected ``within`` it or has a
``known_gap`` (a mechanism the model leaves out, named in the row's notes and in
docs/model.md, "Fabric validation"); ``tests/core/test_network_validation.py`` holds both.
Nothing here is fitted: every figure is computed from the constants as they are.

``python -m benchmarks.network_validation`` prints the rows; ``--fabric-table`` prints the
fabric table of docs/model.md (protocol defaults) and ``--what-if-table`` the 70B variants
table, both from the code.
"""

from __future__ import annotations

import copy
import csv
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from benchmarks.accuracy import seed_accelerators
from service.core import collectives
from service.core.calibration import DEFAULT_CALIBRATION
from service.core.estimate import Estimate, estimate
from service.core.fabric import (
    JUDGED_PROTOCOLS,
    PROTOCOL_DEFAULTS,
    fabric_terms,
    loss_goodput_fraction,
    mathis_flow_bytes_per_s,
    matrix_shapes,
    powersgd_fraction,
)
from service.core.specs import (
    ClusterSpec,
    FabricProtocol,
    FabricSpec,
    Framework,
    MlpKind,
    ModelSpec,
    ParallelismPlan,
    Precision,
    RecomputeMode,
    TrainingSpec,
)
from service.core.timing import ring_bandwidth, scaleup_bandwidth

DATA = Path(__file__).parent / "data" / "network-measurements.csv"
GB = 1e9
"""nccl-tests prints GB/s in 10^9 bytes per second."""
GBIT = 1e9 / 8.0
"""Bytes per second in one Gbit/s."""
US = 1e-6

GPT3_175B = ModelSpec(name="gpt3-175b", num_layers=96, hidden_size=12288, num_heads=96,
                      num_kv_heads=96, ffn_hidden_size=4 * 12288, vocab_size=51200,
                      mlp=MlpKind.GELU, linear_bias=True, learned_position_embeddings=2048)
"""GPT-3 175B (Brown et al. 2020, Table 2.1: 96 layers, d_model 12288, 96 heads; a GELU MLP
of 4 d_model; the GPT-2 vocabulary padded to 51,200 as Megatron-LM pads it)."""


DALLE_TEXT_VOCAB = 16384
DALLE_IMAGE_VOCAB = 8192
"""DALL-E's BPE text vocabulary and dVAE image codebook (Ramesh et al. 2021, section 2)."""
DALLE_12B = ModelSpec(name="dall-e-12b", num_layers=64, hidden_size=3968, num_heads=62,
                      num_kv_heads=62, ffn_hidden_size=4 * 3968,
                      vocab_size=DALLE_TEXT_VOCAB + DALLE_IMAGE_VOCAB, mlp=MlpKind.GELU)
"""DALL-E's 12B transformer (Ramesh et al. 2021, "Zero-Shot Text-to-Image Generation",
arXiv 2102.12092, appendix B.1: 64 attention layers, 62 heads of 64, d_model 3968; an MLP of
4 d_model, Table 2)."""
DALLE_2_8B = ModelSpec(name="dall-e-2.8b", num_layers=64, hidden_size=1920, num_heads=30,
                       num_kv_heads=30, ffn_hidden_size=4 * 1920,
                       vocab_size=DALLE_TEXT_VOCAB + DALLE_IMAGE_VOCAB, mlp=MlpKind.GELU)
"""DALL-E's 2.8B model (Table 1: d_model 1920; the depth is not stated and does not enter
the fraction, every layer having the same matrices; 64 taken, as the 12B's)."""
DALLE_5_6B = ModelSpec(name="dall-e-5.6b", num_layers=64, hidden_size=2688, num_heads=42,
                       num_kv_heads=42, ffn_hidden_size=4 * 2688,
                       vocab_size=DALLE_TEXT_VOCAB + DALLE_IMAGE_VOCAB, mlp=MlpKind.GELU)
"""DALL-E's 5.6B model (Table 1: d_model 2688 in the arXiv text read here; another copy prints
2880, but only 2688 gives Table 1's ~85% by appendix E.1's 1 - 5r/(8 d_model); depth as the
2.8B's)."""
POWERSGD_SETUPS: dict[str, tuple[ModelSpec, int]] = {
    "dalle-12b-r896": (DALLE_12B, 896),
    "dalle-5.6b-r640": (DALLE_5_6B, 640),
    "dalle-2.8b-r512": (DALLE_2_8B, 512),
}
"""Each ``powersgd_numbers`` row's model and total compression rank (Ramesh et al. 2021,
Table 1); each of a machine's GPUs compresses its parameter shard at the total over the
GPUs per machine (appendix B.2: "total compression rank 896 (so that each GPU uses a
compression rank of 112 for its parameter shards)")."""


@dataclass(frozen=True, slots=True)
class Checked:
    """One measurement against the core."""

    row: dict[str, str]
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0

    @property
    def tolerance(self) -> float:
        return float(self.row["tolerance_fraction"])

    @property
    def within(self) -> bool:
        return abs(self.error) <= self.tolerance


def load_rows(path: Path = DATA) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _cluster(row: dict[str, str]) -> ClusterSpec:
    """The row's nodes of ``gpus_per_node`` GPUs, each GPU with its share of the NICs
    (``nic_gbps_per_gpu``), on the row's protocol at its defaults."""
    acc = seed_accelerators()[row["accelerator"]]
    acc = replace(acc, scaleout_bytes_per_s=float(row["nic_gbps_per_gpu"]) * GBIT)
    per_node = int(row["gpus_per_node"])
    return ClusterSpec(accelerator=acc, num_gpus=int(row["nodes"]) * per_node,
                       gpus_per_node=per_node,
                       fabric=FabricSpec(protocol=FabricProtocol(row["protocol"])))


def all_reduce_s(row: dict[str, str]) -> float:
    """The core's all-reduce of ``size_bytes`` over the row's cluster, as the step times it."""
    cluster = _cluster(row)
    assert cluster.fabric is not None
    terms = fabric_terms(cluster.fabric, cluster)
    group, per_node = cluster.num_gpus, cluster.gpus_per_node
    bus = ring_bandwidth(cluster.accelerator, group, per_node, DEFAULT_CALIBRATION, net=terms)
    return float(collectives.collective_s(
        float(row["size_bytes"]), group, per_node, bus, all_reduce=True,
        hop_extra_s=terms.hop_extra_s,
        scaleup_bytes_per_s=scaleup_bandwidth(cluster.accelerator, DEFAULT_CALIBRATION),
        algorithms=row_algorithms(row)))


def row_algorithms(row: dict[str, str]) -> frozenset[collectives.Algorithm]:
    """The algorithms the row's run let NCCL choose from: its ``nccl_algo`` (``NCCL_ALGO``,
    as the document states it), or all of the model's (NCCL's default) where it is empty."""
    stated = row.get("nccl_algo", "")
    if not stated:
        return collectives.ALL_ALGORITHMS
    return frozenset(collectives.Algorithm(name) for name in stated.split(";"))


def bus_bandwidth_gb_per_s(row: dict[str, str]) -> float:
    """nccl-tests' busbw of the core's all-reduce: algbw = S / t times 2(n - 1) / n
    (nccl-tests doc/PERFORMANCE.md, "AllReduce")."""
    ranks = int(row["nodes"]) * int(row["gpus_per_node"])
    return float(row["size_bytes"]) / all_reduce_s(row) * 2.0 * (ranks - 1) / ranks / GB


def loss_goodput(row: dict[str, str]) -> float:
    """``fabric.loss_goodput_fraction`` of the row's protocol at its link rate, one-way
    latency, MTU and loss."""
    facts = PROTOCOL_DEFAULTS[FabricProtocol(row["protocol"])]
    return loss_goodput_fraction(facts.recovery, float(row["loss_fraction"]),
                                 float(row["nic_gbps_per_gpu"]) * GBIT,
                                 float(row["latency_s"]), float(row["mtu_bytes"]))


def tcp_flow_gbit_per_s(row: dict[str, str]) -> float:
    """One flow's Mathis throughput, capped at the line rate, in Gbit/s."""
    flow = mathis_flow_bytes_per_s(float(row["mtu_bytes"]), float(row["latency_s"]),
                                   float(row["loss_fraction"]))
    line = float(row["nic_gbps_per_gpu"]) * GBIT
    return min(flow, line) * (1.0 - float(row["loss_fraction"])) / GBIT


def megascale_estimate(row: dict[str, str]) -> Estimate:
    """GPT-3 175B on the row's cluster: TP 8, PP 8, the rest data-parallel, 6,144 sequences
    of 2,048 a step (the layout the row's notes state as assumed)."""
    cluster = _cluster(row)
    tp, pp = 8, 8
    plan = ParallelismPlan(tp=tp, pp=pp, dp=cluster.num_gpus // (tp * pp), micro_batch=1,
                           sequence_parallel=True, zero_stage=1,
                           recompute=RecomputeMode.SELECTIVE)
    training = TrainingSpec(seq_len=2048, global_batch_seqs=6144, tokens=300e9,
                            precision=Precision.BF16, framework=Framework.MEGATRON)
    return estimate(GPT3_175B, cluster, plan, training)


def powersgd_numbers(row: dict[str, str], total_rank: int | None = None) -> float:
    """The numbers PowerSGD sends over the gradient's: ``fabric.powersgd_fraction`` over the
    transformer layers' matrices of ``fabric.matrix_shapes`` sharded over the row's GPUs per
    node (the GPUs of a machine each compress their shard: DALL-E's sharding is along the
    same axes as Megatron's column- and row-parallel split), at the per-GPU rank. The
    embedding and output head are left out: DALL-E does not compress them and its figure
    excludes them (appendix E, E.1). ``total_rank`` replaces the row's (a test's)."""
    model, row_rank = POWERSGD_SETUPS[row["id"]]
    total_rank = row_rank if total_rank is None else total_rank
    shards = int(row["gpus_per_node"])
    layers = tuple(shape for shape in matrix_shapes(model, shards)
                   if shape[1] != model.vocab_size / shards)
    return float(powersgd_fraction(layers, total_rank // shards))


def predicted(row: dict[str, str]) -> float:
    """The core's figure for the row, in the row's unit."""
    kind = row["kind"]
    if kind == "allreduce_busbw":
        return bus_bandwidth_gb_per_s(row)
    if kind == "allreduce_time":
        return all_reduce_s(row) / US
    if kind == "loss_goodput":
        return loss_goodput(row)
    if kind == "tcp_flow":
        return tcp_flow_gbit_per_s(row)
    if kind == "mfu":
        return megascale_estimate(row).throughput.mfu_fraction
    if kind == "powersgd_numbers":
        return powersgd_numbers(row)
    raise ValueError(f"unknown kind {kind!r}")


def check(rows: Sequence[dict[str, str]] | None = None) -> list[Checked]:
    return [Checked(row=row, predicted=predicted(row), measured=float(row["measured"]))
            for row in (load_rows() if rows is None else rows)]


# --- The docs' tables, from the code ------------------------------------------------------

def fabric_table() -> str:
    """docs/model.md's protocol table: each protocol's defaults as ``PROTOCOL_DEFAULTS`` has
    them (a test holds the document to this text)."""
    lines = ["| protocol | latency_s (one-way) | bandwidth vs InfiniBand | MTU (B) | loss recovery "
             "| bandwidth figure |",
             "|---|---|---|---|---|---|"]
    for protocol, facts in PROTOCOL_DEFAULTS.items():
        kind = "judgement" if protocol in JUDGED_PROTOCOLS else "sourced"
        lines.append(f"| `{protocol.value}` | {facts.latency_s / US:g} µs | "
                     f"{facts.bandwidth_fraction:g} | {facts.mtu_bytes:g} | "
                     f"{facts.recovery.value} | {kind} |")
    return "\n".join(lines)


SEVENTY_B: dict[str, Any] = {
    "model": {"preset": "llama3.1-70b"},
    "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 1024},
    "parallelism": {"tp": 8, "pp": 4, "dp": 32},
    "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 15e12},
}
"""The issue's what-if job (tests/api/test_fabric_api.py's ``SEVENTY_B_1024``)."""
SLOW_NIC_BYTES_PER_S = 25 * GBIT
"""25 Gb/s per GPU, the table's slow-network column."""
WHAT_IF_VARIANTS: tuple[tuple[str, dict[str, Any] | None, dict[str, Any] | None], ...] = (
    ("no fabric (catalogue)", None, None),
    ("InfiniBand", {"protocol": "infiniband"}, None),
    ("RoCE, no loss", {"protocol": "roce"}, None),
    ("RoCE, 0.01% loss", {"protocol": "roce", "packet_loss_fraction": 0.0001}, None),
    ("RoCE, 0.1% loss", {"protocol": "roce", "packet_loss_fraction": 0.001}, None),
    ("RoCE, 1% loss", {"protocol": "roce", "packet_loss_fraction": 0.01}, None),
    ("InfiniBand, 0.1% loss", {"protocol": "infiniband", "packet_loss_fraction": 0.001}, None),
    ("RoCE 2:1 (8 rails)", {"protocol": "roce", "oversubscription": 2.0}, None),
    ("RoCE 2:1, 1 rail", {"protocol": "roce", "oversubscription": 2.0, "rails": 1}, None),
    ("RoCE + PowerSGD r4", {"protocol": "roce"}, {"method": "powersgd", "rank": 4}),
    ("EFA", {"protocol": "efa"}, None),
    ("sockets (ethernet_tcp), 0.1% loss",
     {"protocol": "ethernet_tcp", "packet_loss_fraction": 0.001}, None),
    # The rank at which this model sends about the share of its gradient's numbers DALL-E
    # needed for an unchanged training loss (about 14%; rows dalle-* of the CSV).
    ("RoCE + PowerSGD r256", {"protocol": "roce"}, {"method": "powersgd", "rank": 256}),
)
COMM_PARTS = ("tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_comm_s", "dp_comm_exposed_s")
"""The step's communication parts (as ``api.schemas.whatifs.COMM_PARTS``)."""


def seventy_b(fabric: dict[str, Any] | None, compression: dict[str, Any] | None,
              scaleout_bytes_per_s: float | None = None) -> Estimate:
    """The 70B job through the estimate request's own defaults (``EstimateRequest``, the
    plan's ``resolve_plan``), on the seed catalogue's H100, as POST /v1/estimates answers it."""
    from service.api.auto import resolve_plan
    from service.api.schemas.estimate import EstimateRequest

    body = copy.deepcopy(SEVENTY_B)
    if fabric is not None:
        body["cluster"]["fabric"] = fabric
    if compression is not None:
        body["training"]["gradient_compression"] = compression
    if scaleout_bytes_per_s is not None:
        body["cluster"]["scaleout_bytes_per_s_per_gpu"] = scaleout_bytes_per_s
    request = EstimateRequest.model_validate(body)
    model = request.model.to_core()
    cluster = request.cluster.to_core(seed_accelerators()[request.cluster.accelerator])
    training = request.training.to_core()
    energy = request.energy.to_core()
    plan, _ = resolve_plan(model, cluster, request.parallelism, training, energy)
    return estimate(model, cluster, plan, training, energy=energy)


def comm_share(result: Estimate) -> float:
    step = result.throughput.step
    return sum(float(getattr(step, part)) for part in COMM_PARTS) / float(step.step_s)


def what_if_rows() -> list[tuple[str, float, float, float, float]]:
    """(variant, step s and comm share at the catalogue's 400 Gb/s per GPU, the same at
    25 Gb/s per GPU) for each of ``WHAT_IF_VARIANTS``."""
    rows = []
    for name, fabric, compression in WHAT_IF_VARIANTS:
        fast = seventy_b(fabric, compression)
        slow = seventy_b(fabric, compression, SLOW_NIC_BYTES_PER_S)
        rows.append((name, float(fast.throughput.step.step_s), comm_share(fast),
                     float(slow.throughput.step.step_s), comm_share(slow)))
    return rows


def what_if_table() -> str:
    """docs/model.md's 70B table: each variant's step and communication share, with the
    step's change against the no-fabric row."""
    rows = what_if_rows()
    _, base_fast, _, base_slow, _ = rows[0]

    def step(value: float, base: float, first: bool) -> str:
        if first:
            return f"{value:.3f} s"
        return f"{value:.3f} s ({value / base - 1:+.1%})".replace("-", "−")

    lines = ["| variant | step at 400 Gb/s/GPU | comm share | step at 25 Gb/s/GPU | comm share |",
             "|---|---|---|---|---|"]
    for index, (name, fast, fast_share, slow, slow_share) in enumerate(rows):
        first = index == 0
        lines.append(f"| {name} | {step(fast, base_fast, first)} | {fast_share:.1%} | "
                     f"{step(slow, base_slow, first)} | {slow_share:.1%} |")
    return "\n".join(lines)


def validation_table(checked: Sequence[Checked] | None = None) -> str:
    """docs/model.md's "Fabric validation" table: each row's measured and predicted figure and
    the error (a test holds the document's errors to these)."""
    lines = ["| row | measurement | measured | predicted | error | tolerance | expect |",
             "|---|---|---|---|---|---|---|"]
    for item in check() if checked is None else checked:
        row = item.row
        setup = [row["protocol"]] if row["protocol"] else []
        if row["kind"] == "powersgd_numbers":
            total_rank = POWERSGD_SETUPS[row["id"]][1]
            shards = int(row["gpus_per_node"])
            setup.append(f"rank {total_rank // shards} per GPU shard of {shards}")
        if row["size_bytes"]:
            setup.append(_size(float(row["size_bytes"])))
        if float(row["loss_fraction"] or 0) > 0:
            setup.append(f"loss {float(row['loss_fraction']) * 100:g}%")
        error = f"{item.error:+.1%}".replace("-", "−")
        what = row["kind"] + (f" ({', '.join(setup)})" if setup else "")
        lines.append(
            f"| `{row['id']}` | {what} | {item.measured:.4g} "
            f"{row['measured_unit']} | {item.predicted:.4g} | {error} | "
            f"±{item.tolerance:.0%} | {row['expect'].replace('_', ' ')} |")
    return "\n".join(lines)


def _size(size_bytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:g} {unit}"
    return f"{size_bytes:g} B"


HALVED_NIC_RATES = (400 * GBIT, 25 * GBIT)
"""The NIC rates at which the claim "0.1% loss costs up to 50% of the compute" is checked."""


def claim_rows() -> list[tuple[float, float, float, float]]:
    """(NIC Gbit/s per GPU, the 70B step on RoCE, the step with the network's goodput halved,
    the exposed communication share): halving the goodput is taken as halving the NIC rate,
    which is what ``FabricTerms.bandwidth_fraction`` does to every network term (latency
    unchanged)."""
    rows = []
    for rate in HALVED_NIC_RATES:
        full = seventy_b({"protocol": "roce"}, None, rate)
        half = seventy_b({"protocol": "roce"}, None, rate / 2.0)
        rows.append((rate / GBIT, float(full.throughput.step.step_s),
                     float(half.throughput.step.step_s), comm_share(full)))
    return rows


def claim_table() -> str:
    lines = ["| NIC per GPU | step (RoCE, no loss) | network goodput halved | step change | "
             "comm share |", "|---|---|---|---|---|"]
    for rate, full, half, share in claim_rows():
        lines.append(f"| {rate:g} Gb/s | {full:.3f} s | {half:.3f} s | {half / full - 1:+.1%} | "
                     f"{share:.1%} |")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    if "--validation-table" in argv:
        print(validation_table())
        return 0
    if "--claim-table" in argv:
        print(claim_table())
        return 0
    if "--fabric-table" in argv:
        print(fabric_table())
        return 0
    if "--what-if-table" in argv:
        print(what_if_table())
        return 0
    print(f"{'id':28} {'kind':16} {'measured':>10} {'predicted':>10} {'error':>8} "
          f"{'tol':>5}  expect     held")
    for checked in check():
        row = checked.row
        held = checked.within == (row["expect"] == "within")
        print(f"{row['id']:28} {row['kind']:16} {checked.measured:10.4g} "
              f"{checked.predicted:10.4g} {checked.error:+8.1%} {checked.tolerance:5.0%}  "
              f"{row['expect']:10} {'yes' if held else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
