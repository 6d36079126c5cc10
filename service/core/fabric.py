"""The scale-out fabric as a planner sees it: protocol, latency, loss, oversubscription and
rails, and data-parallel gradient compression (issue 42; docs/model.md, "Fabric").

Without ``ClusterSpec.fabric`` nothing here runs and every answer is what it was: the fitted
scale-out efficiency (``Calibration.scaleout_efficiency_fraction``) and NCCL's hop latencies
(``collectives``), both tuned on InfiniBand-class fabrics, stand for the network. With a
fabric (``fabric_terms``):

- **latency**: every network hop of a collective pays NCCL's hop latency plus the fabric's
  one-way latency minus ``REFERENCE_LATENCY_S``, the InfiniBand latency NCCL's tables carry;
  the all-to-all, point-to-point and context-parallel sends that cross nodes pay the
  difference once per send;
- **bandwidth**: the network share of every collective runs at the fitted figure times the
  protocol's achievable bus-bandwidth fraction (``ProtocolFacts.bandwidth_fraction``,
  relative to InfiniBand) times the goodput left by packet loss (``loss_goodput_fraction``):
  link-level retry and selective repeat resend only the lost packet, go-back-N RoCE resends
  the window in flight (Mittal et al., SIGCOMM 2018), TCP follows Mathis et al. 1997;
- **oversubscription**: a collective whose group spans more nodes than one leaf switch
  reaches (``nodes_per_leaf``) crosses the spine and gets its network bandwidth divided by the
  oversubscription ratio (``spine_factor``); rail-optimised nodes spread their NICs over
  ``rails`` leaves, so rail-aligned traffic stays on a leaf over ``rails`` times more nodes.

Gradient compression (``gradient_bytes_fraction``, ``powersgd_s``): PowerSGD (Vogels,
Karimireddy and Jaggi, NeurIPS 2019) sends r(n+m) numbers for an n x m gradient matrix
instead of nm, at the cost of three thin matmuls and an error-feedback pass over the
gradient; bf16 and fp8 cast the reduced gradients to 2 and 1 bytes. The steps to a given loss
can change, which is not modelled: ``compression_details`` says so with a coded warning.

The core stays pure: these are functions of frozen specs, elementwise over numpy arrays where
a search passes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from service.core.ops import SCALAR, Num
from service.core.plausibility import OUTSIDE_VALIDATED_RANGE, WarningDetail
from service.core.specs import (
    ClusterSpec,
    CompressionMethod,
    FabricProtocol,
    FabricSpec,
    MlpKind,
    ModelSpec,
    TrainingSpec,
)

US_S = 1e-6
"""Seconds per microsecond."""


class Recovery(StrEnum):
    """How a transport recovers a lost packet."""

    LINK_RETRY = "link_retry"
    """The link resends the corrupted packet (InfiniBand's lossless, credit-based links with
    FEC and link-level retransmission; TPU ICI): one packet resent per loss."""
    SELECTIVE_REPEAT = "selective_repeat"
    """Only the lost packet is resent (AWS SRD, Shalev et al. 2020, IEEE Micro 40(6); IRN,
    Mittal et al. 2018)."""
    GO_BACK_N = "go_back_n"
    """The receiver drops every packet after a gap and the sender resends from the lost one
    (RoCE v2's InfiniBand RC transport; Mittal et al. 2018, section 2)."""
    TCP = "tcp"
    """TCP congestion avoidance: the window halves per loss (Mathis et al. 1997)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolFacts:
    """One protocol's defaults."""

    latency_s: float
    """One-way small-message latency NIC to NIC across a few switch hops."""
    bandwidth_fraction: float
    """Achievable bus bandwidth relative to InfiniBand at the same line rate."""
    mtu_bytes: float
    """Payload per packet (sets the go-back-N window in packets and TCP's MSS)."""
    recovery: Recovery


PROTOCOL_DEFAULTS = MappingProxyType({
    # InfiniBand NDR/HDR: perftest ib_send_lat reaches about 1 us NIC to NIC; with a leaf and
    # a spine hop (Quantum-2 port-to-port latency is in the low hundreds of ns) about 1.5 us.
    # NCCL's hop latencies (collectives.RING_NET_HOP_S) are tuned on such fabrics, so this is
    # REFERENCE_LATENCY_S and the reference bandwidth (1.0). MTU 4096 (IBTA maximum).
    FabricProtocol.INFINIBAND: ProtocolFacts(
        latency_s=1.5 * US_S, bandwidth_fraction=1.0, mtu_bytes=4096.0,
        recovery=Recovery.LINK_RETRY),
    # RoCE v2 on a lossless (PFC) Ethernet fabric: the same verbs and NICs, Ethernet switch
    # hops of about 0.5-1 us each through a 3-tier Clos: about 3 us. Bandwidth as InfiniBand's:
    # Meta tuned its 24k-GPU RoCE and InfiniBand clusters to equivalent performance for GenAI
    # training (Meta Engineering, "Building Meta's GenAI Infrastructure", 2024-03-12; Gangidi
    # et al., "RDMA over Ethernet for Distributed AI Training at Meta Scale", SIGCOMM 2024).
    FabricProtocol.ROCE: ProtocolFacts(
        latency_s=3.0 * US_S, bandwidth_fraction=1.0, mtu_bytes=4096.0,
        recovery=Recovery.GO_BACK_N),
    # AWS EFA (SRD through libfabric and aws-ofi-nccl): end-to-end latency of about 10-15 us
    # (Shalev et al. 2020, IEEE Micro, "A Cloud-Optimized Transport Protocol for Elastic and
    # Scalable HPC"; AWS HPC blog "Second generation EFA", 2022); 12 us taken. The bus
    # bandwidth fraction 0.9 is a judgement (the plugin's proxy and multi-path spraying reach
    # most but not all of the line rate), to be replaced by nccl-tests on p5 (docs/model.md).
    FabricProtocol.EFA: ProtocolFacts(
        latency_s=12.0 * US_S, bandwidth_fraction=0.9, mtu_bytes=8192.0,
        recovery=Recovery.SELECTIVE_REPEAT),
    # Google GPUDirect-TCPX (a3-high): TCP with header/data split into GPU memory; tens of us
    # (a judgement: 25 us), 0.8 of the line rate (a judgement: TCP's per-flow software path).
    FabricProtocol.TCPX: ProtocolFacts(
        latency_s=25.0 * US_S, bandwidth_fraction=0.8, mtu_bytes=8948.0,
        recovery=Recovery.TCP),
    # Plain Ethernet through NCCL's socket transport: host-staged copies and the kernel's
    # TCP stack: about 40 us (a judgement within the tens of us socket round trips measure)
    # and half the line rate (a judgement: each byte is copied through host memory).
    # MSS 8948 with the 9000-byte jumbo MTU TCP needs at these rates (issue 42).
    FabricProtocol.ETHERNET_TCP: ProtocolFacts(
        latency_s=40.0 * US_S, bandwidth_fraction=0.5, mtu_bytes=8948.0,
        recovery=Recovery.TCP),
    # TPU ICI: direct chip-to-chip links with link-level retry; about 1 us (a judgement; no
    # published per-hop figure), full bandwidth.
    FabricProtocol.ICI: ProtocolFacts(
        latency_s=1.0 * US_S, bandwidth_fraction=1.0, mtu_bytes=4096.0,
        recovery=Recovery.LINK_RETRY),
})
"""Per-protocol defaults (``FabricSpec`` fields left out take these)."""

REFERENCE_LATENCY_S = PROTOCOL_DEFAULTS[FabricProtocol.INFINIBAND].latency_s
"""The network latency NCCL's hop latencies include (they are tuned on InfiniBand): a fabric
adds ``latency_s - REFERENCE_LATENCY_S`` to every network hop."""
TCP_FLOWS_PER_NIC = 16
"""TCP connections NCCL's socket transport opens per NIC: NCCL_SOCKET_NTHREADS x
NCCL_NSOCKS_PERTHREAD, 4 x 4 on Google Cloud and 2 x 8 on AWS by NCCL's defaults (NCCL
environment variables documentation; the product is capped at 64)."""
MATHIS_CONSTANT = math.sqrt(1.5)
"""C in Mathis, Semke, Mahdavi and Ott 1997 ("The Macroscopic Behavior of the TCP Congestion
Avoidance Algorithm", CCR 27(3), eq. 3): throughput = MSS/RTT x C/sqrt(p), C = sqrt(3/2)
for periodic loss with delayed ACKs off."""
LEAF_DOWNLINKS = 32
"""Nodes' NIC ports one leaf switch serves: half of a 64-port switch (NVIDIA Quantum-2
QM9700, 64 x 400 Gb/s; 51.2 Tb/s Ethernet switches at 64 x 800 Gb/s), the other half up to
the spine in a non-blocking tree. A DGX H100 SuperPOD scalable unit is 32 nodes with one
leaf per rail (NVIDIA DGX SuperPOD reference architecture)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FabricTerms:
    """A fabric resolved against its cluster: the terms ``timing`` applies."""

    protocol: FabricProtocol
    latency_s: float
    packet_loss_fraction: float
    oversubscription: float
    rails: int
    protocol_fraction: float
    """The protocol's bus bandwidth relative to InfiniBand."""
    goodput_fraction: float
    """The link's useful share under loss (``loss_goodput_fraction``)."""
    nodes_per_leaf: float
    """Nodes whose rail-aligned traffic stays under one leaf."""

    @property
    def bandwidth_fraction(self) -> float:
        """Network bandwidth multiplier before oversubscription."""
        return self.protocol_fraction * self.goodput_fraction

    @property
    def hop_extra_s(self) -> float:
        """Latency added to each network hop over NCCL's InfiniBand-tuned figure."""
        return self.latency_s - REFERENCE_LATENCY_S

    def spine_factor(self, nodes: Num, xp: Num = SCALAR) -> Num:
        """The bandwidth divisor of a group spanning ``nodes`` nodes: the oversubscription
        ratio once it spans more than one leaf, else 1."""
        if self.oversubscription == 1.0:
            return 1.0
        return xp.where(nodes > self.nodes_per_leaf, self.oversubscription, 1.0)

    def off_leaf_share(self, nodes: Num, xp: Num = SCALAR) -> Num:
        """The share of an all-to-all's cross-node peers under other leaves (uniform routing):
        1 - nodes_per_leaf/nodes once the group spans more than a leaf."""
        return xp.maximum(0.0, 1.0 - self.nodes_per_leaf / xp.maximum(nodes, 1.0))


def go_back_n_window_packets(nic_bytes_per_s: float, latency_s: float, mtu_bytes: float) -> float:
    """Packets in flight when a loss is detected: the bandwidth-delay product over a round trip
    of twice the one-way latency, in packets (at least one). Go-back-N resends all of them."""
    return max(1.0, nic_bytes_per_s * 2.0 * latency_s / mtu_bytes)


def loss_goodput_fraction(recovery: Recovery, loss: float, nic_bytes_per_s: float,
                          latency_s: float, mtu_bytes: float) -> float:
    """The share of a link's rate that carries new data at packet loss ``loss``:

    - link retry and selective repeat: 1 - p (each lost packet is sent again, once);
    - go-back-N: (1 - p) / (1 + (W - 1) p) with W the window in flight
      (``go_back_n_window_packets``): each loss resends W packets, the textbook go-back-n
      efficiency (Bertsekas and Gallager, Data Networks, 2nd ed. 1992, section 2.4; Guo et
      al., "RDMA over Commodity Ethernet at Scale", SIGCOMM 2016, section 4.1: "up to RTT x C
      bytes can be wasted for a single packet drop"); this
      omits the retransmission timeouts of tail losses, so it is the least a go-back-N NIC
      loses (Wang et al., ICCCN 2019, "Error Recovery of RDMA Packets in Data Center
      Networks", measure plain go-back-N RoCE near zero throughput at 1% loss);
    - TCP: min(1, flows x MSS/RTT x C/sqrt(p) / rate) x (1 - p) (Mathis et al. 1997), with
      ``TCP_FLOWS_PER_NIC`` flows and RTT twice the one-way latency.
    """
    if loss == 0.0:
        return 1.0
    if recovery in (Recovery.LINK_RETRY, Recovery.SELECTIVE_REPEAT):
        return 1.0 - loss
    if recovery == Recovery.GO_BACK_N:
        window = go_back_n_window_packets(nic_bytes_per_s, latency_s, mtu_bytes)
        return (1.0 - loss) / (1.0 + (window - 1.0) * loss)
    flow_bytes_per_s = mathis_flow_bytes_per_s(mtu_bytes, latency_s, loss)
    return min(1.0, TCP_FLOWS_PER_NIC * flow_bytes_per_s / nic_bytes_per_s) * (1.0 - loss)


def mathis_flow_bytes_per_s(mss_bytes: float, latency_s: float, loss: float) -> float:
    """One TCP flow's throughput under random loss ``loss`` (> 0): MSS/RTT x C/sqrt(p), RTT
    twice the one-way ``latency_s`` (Mathis et al. 1997, eq. 3; ``MATHIS_CONSTANT``)."""
    return mss_bytes / (2.0 * latency_s) * MATHIS_CONSTANT / math.sqrt(loss)


def nodes_per_leaf(rails: int, gpus_per_node: int) -> float:
    """Nodes whose rail-aligned traffic one leaf carries: ``LEAF_DOWNLINKS`` ports, a node's
    NICs (one per GPU) spread over ``rails`` leaves, so a leaf takes rails/NICs of a node's
    ports: LEAF_DOWNLINKS x rails / NICs per node, at least 1. Rail-optimised 8-GPU nodes
    (8 rails) give 32 nodes; one top-of-rack switch per node group (1 rail) gives 4."""
    nics = max(1, gpus_per_node)
    return max(1.0, LEAF_DOWNLINKS * min(rails, nics) / nics)


def fabric_terms(fabric: FabricSpec, cluster: ClusterSpec) -> FabricTerms:
    """``fabric`` with its protocol's defaults filled in, resolved on ``cluster``'s NICs."""
    facts = PROTOCOL_DEFAULTS[fabric.protocol]
    latency = facts.latency_s if fabric.latency_s is None else fabric.latency_s
    rails = cluster.gpus_per_node if fabric.rails is None else fabric.rails
    nic = cluster.accelerator.scaleout_bytes_per_s
    return FabricTerms(
        protocol=fabric.protocol, latency_s=latency,
        packet_loss_fraction=fabric.packet_loss_fraction,
        oversubscription=fabric.oversubscription, rails=rails,
        protocol_fraction=facts.bandwidth_fraction,
        goodput_fraction=loss_goodput_fraction(facts.recovery, fabric.packet_loss_fraction,
                                               nic, latency, facts.mtu_bytes),
        nodes_per_leaf=nodes_per_leaf(rails, cluster.gpus_per_node),
    )


def terms_of(cluster: ClusterSpec) -> FabricTerms | None:
    """The cluster's fabric terms, or None without a fabric (today's model, unchanged)."""
    return None if cluster.fabric is None else fabric_terms(cluster.fabric, cluster)


# --- Gradient compression ---------------------------------------------------------------

POWERSGD_FLOPS_PER_ELEMENT_RANK = 6.0
"""PowerSGD's matmuls per n x m gradient at rank r (Vogels et al. 2019, Algorithm 1): P = MQ
(2nmr FLOPs), Q = M^T P (2nmr) and the decompression P Q^T (2nmr): 6nmr, plus the
orthogonalisation of P (Gram-Schmidt, about 2nr^2, left out: r is small)."""
POWERSGD_HBM_BYTES_PER_ELEMENT = 32.0
"""HBM bytes per fp32 gradient element of one PowerSGD step (Algorithm 1 with error
feedback): M + e (read 4 + 4, write 4), P = MQ (read 4), Q = M^T P (read 4), the
decompressed gradient written (4) and the new error e = M - PQ^T (read 4, write 4). At
r <= 16 the thin matmuls are memory-bound (intensity r/2 FLOP per byte), so this sets the
time."""
POWERSGD_BYTES_PER_NUMBER = 4.0
"""P and Q travel in fp32 (Vogels et al. 2019, section 4; PyTorch's powerSGD_hook)."""
CAST_BYTES = MappingProxyType({CompressionMethod.BF16: 2.0, CompressionMethod.FP8: 1.0})
"""Bytes per gradient element sent by the casting methods."""


def matrix_shapes(model: ModelSpec, tp: Num) -> tuple[tuple[Num, Num, float], ...]:
    """The weight matrices of one GPU's shard as (rows, columns, count per model): attention
    Q, K, V (column-parallel: h x width/t), O (row-parallel), the MLP's up (and gate) and down
    projections, the routed and shared experts' alike, and the embedding and output head
    (h x V/t). Norms and biases are vectors, which PowerSGD sends uncompressed (and which
    are too small to count here)."""
    h = model.hidden_size
    q = model.num_heads * model.attention_head_dim
    kv = model.num_kv_heads * (model.attention_head_dim + model.value_head_dim)
    dense = model.num_layers - model.num_moe_layers
    moe = model.num_moe_layers
    up = 2.0 if model.mlp == MlpKind.SWIGLU else 1.0
    shapes: list[tuple[Num, Num, float]] = [
        (h, q / tp, model.num_layers), (h, kv / tp, model.num_layers),
        (q / tp, h, model.num_layers),
        (h, model.ffn_hidden_size / tp, up * dense), (model.ffn_hidden_size / tp, h, dense),
        (h, model.vocab_size / tp, 1.0 if model.tied_embeddings else 2.0),
    ]
    if moe:
        experts = model.num_experts + model.num_shared_experts
        width = model.expert_ffn_hidden_size / tp
        shapes += [(h, width, up * experts * moe), (width, h, experts * moe)]
    return tuple(s for s in shapes if s[2] > 0)


def powersgd_fraction(shapes: tuple[tuple[Num, Num, float], ...], rank: int,
                      xp: Num = SCALAR) -> Num:
    """Numbers PowerSGD sends over the numbers of the gradient, over ``shapes`` (rows,
    columns, count): sum of r(n + m) over sum of nm (Vogels et al. 2019, section 3: a rank-r
    approximation P Q^T of an n x m matrix sends P, n x r, and Q, m x r), each matrix capped
    at its uncompressed size (a rank above min(n, m) saves nothing)."""
    sent: Num = 0.0
    total: Num = 0.0
    for n, m, count in shapes:
        sent = sent + count * xp.minimum(rank * (n + m), n * m)
        total = total + count * n * m
    return sent / total


def gradient_bytes_fraction(training: TrainingSpec, model: ModelSpec, tp: Num,
                            grad_bytes_per_param: float, xp: Num = SCALAR) -> Num:
    """The data-parallel gradient bytes under ``training.gradient_compression``, as a fraction
    of what the stack sends (``grad_bytes_per_param`` per element): PowerSGD sends
    ``powersgd_fraction`` of the numbers in fp32; bf16 and fp8 send 2 and 1 bytes per element
    where the stack sends more (bf16 halves fp32 gradients, fp8 quarters them); none, 1."""
    compression = training.gradient_compression
    if compression is None or compression.method == CompressionMethod.NONE:
        return 1.0
    if compression.method == CompressionMethod.POWERSGD:
        return (powersgd_fraction(matrix_shapes(model, tp), compression.rank, xp)
                * POWERSGD_BYTES_PER_NUMBER / grad_bytes_per_param)
    return min(1.0, CAST_BYTES[compression.method] / grad_bytes_per_param)


def compresses(training: TrainingSpec) -> bool:
    compression = training.gradient_compression
    return compression is not None and compression.method != CompressionMethod.NONE


def powersgd_s(training: TrainingSpec, local_params: Num, peak_flops_per_s: float,
               hbm_bytes_per_s: float, xp: Num = SCALAR) -> Num:
    """Seconds per step of PowerSGD's own work on one GPU's ``local_params`` gradient
    elements: the larger of its matmuls at peak and its HBM passes (a roofline, Williams
    et al. 2009), exposed (it runs between the backward and the reduction of each bucket);
    0 for other methods."""
    compression = training.gradient_compression
    if compression is None or compression.method != CompressionMethod.POWERSGD:
        return 0.0
    flops_s = (POWERSGD_FLOPS_PER_ELEMENT_RANK * compression.rank * local_params
               / peak_flops_per_s)
    bytes_s = POWERSGD_HBM_BYTES_PER_ELEMENT * local_params / hbm_bytes_per_s
    return xp.maximum(flops_s, bytes_s)


# --- What the answer says -----------------------------------------------------------------

def fabric_notes(cluster: ClusterSpec, spans: dict[str, float]) -> tuple[str, ...]:
    """The assumptions a fabric adds, one sentence per term that moves the answer, each naming
    the term: ``spans`` maps each parallel dimension whose group crosses nodes ("tp", "cp",
    "dp", "ep", "pp") to the nodes it spans."""
    terms = terms_of(cluster)
    if terms is None:
        return ()
    name = terms.protocol.value
    notes = [
        f"fabric latency: {name} at {terms.latency_s * 1e6:.1f} us one-way; each network hop "
        f"of a collective pays NCCL's InfiniBand-tuned hop latency "
        f"{terms.hop_extra_s * 1e6:+.1f} us (fabric.REFERENCE_LATENCY_S)",
        f"fabric protocol bandwidth: {name} reaches {terms.protocol_fraction:.0%} of "
        "InfiniBand's bus bandwidth at the same line rate (fabric.PROTOCOL_DEFAULTS)",
    ]
    if terms.packet_loss_fraction > 0:
        recovery = PROTOCOL_DEFAULTS[terms.protocol].recovery
        how = {Recovery.GO_BACK_N: "go-back-N resends the window in flight (Mittal et al. "
                                   "2018), a lower bound on the damage: timeouts are not "
                                   "modelled",
               Recovery.LINK_RETRY: "link-level retry resends only the lost packet",
               Recovery.SELECTIVE_REPEAT: "selective repeat resends only the lost packet",
               Recovery.TCP: "TCP's window follows Mathis et al. 1997 over "
                             f"{TCP_FLOWS_PER_NIC} flows per NIC"}[recovery]
        notes.append(
            f"fabric packet loss {terms.packet_loss_fraction:.4%}: {how}; the network runs at "
            f"{terms.goodput_fraction:.1%} goodput")
    if terms.oversubscription > 1.0:
        crossing = sorted(d for d, nodes in spans.items() if nodes > terms.nodes_per_leaf)
        which = (", ".join(crossing) if crossing
                 else "none of this layout's groups")
        notes.append(
            f"fabric oversubscription {terms.oversubscription:g}:1: collectives whose group "
            f"spans more than {terms.nodes_per_leaf:g} nodes (one leaf, {terms.rails} rails) "
            f"cross the spine at 1/{terms.oversubscription:g} of the bandwidth: {which}")
    return tuple(notes)


def compression_notes(model: ModelSpec, training: TrainingSpec, tp: int,
                      grad_bytes_per_param: float) -> tuple[str, ...]:
    """The assumption gradient compression adds, with the byte fraction it applies."""
    compression = training.gradient_compression
    if compression is None or compression.method == CompressionMethod.NONE:
        return ()
    fraction = gradient_bytes_fraction(training, model, tp, grad_bytes_per_param)
    method = compression.method.value
    extra = (f" rank {compression.rank}, plus its matmuls and error feedback per step in "
             "the optimizer time (Vogels et al. 2019, Algorithm 1)"
             if compression.method == CompressionMethod.POWERSGD else "")
    return (f"gradient compression {method}{extra}: data-parallel gradient bytes are "
            f"{fraction:.2%} of the uncompressed ones",)


JUDGED_PROTOCOLS = frozenset({FabricProtocol.EFA, FabricProtocol.TCPX,
                              FabricProtocol.ETHERNET_TCP, FabricProtocol.ICI})
"""Protocols whose bandwidth fraction is a judgement, not a measurement (``PROTOCOL_DEFAULTS``)."""


def fabric_details(cluster: ClusterSpec) -> tuple[WarningDetail, ...]:
    """``outside_validated_range`` on ``cluster.fabric`` when a stated fabric moves the
    figures by terms no measurement has checked: a protocol whose bandwidth fraction is a
    judgement, packet loss, oversubscription above 1, or a latency other than the reference's
    (the calibration's runs are on non-blocking InfiniBand-class fabrics; docs/model.md,
    "Fabric"). InfiniBand and RoCE at their defaults, loss-free and non-blocking, are the
    calibration's own network and carry nothing."""
    fabric = cluster.fabric
    if fabric is None:
        return ()
    unchecked = []
    if fabric.protocol in JUDGED_PROTOCOLS:
        unchecked.append(f"{fabric.protocol.value}'s bandwidth fraction (a judgement)")
    if fabric.packet_loss_fraction > 0:
        unchecked.append(f"packet loss {fabric.packet_loss_fraction:g} (the "
                         f"{PROTOCOL_DEFAULTS[fabric.protocol].recovery.value} loss model)")
    if fabric.oversubscription > 1:
        unchecked.append(f"{fabric.oversubscription:g}:1 oversubscription (the spine rule)")
    if fabric.latency_s is not None and fabric.latency_s != PROTOCOL_DEFAULTS[
            fabric.protocol].latency_s:
        unchecked.append(f"latency {fabric.latency_s:g} s")
    if not unchecked:
        return ()
    return (WarningDetail(
        OUTSIDE_VALIDATED_RANGE, "cluster.fabric",
        "cluster.fabric: " + "; ".join(unchecked) + " enter the figures but are not yet "
        "checked against a measurement (nccl-tests per fabric, loss sweeps); the calibration's "
        "runs are on non-blocking InfiniBand-class networks"),)


def compression_details(training: TrainingSpec) -> tuple[WarningDetail, ...]:
    """``outside_validated_range`` on ``training.gradient_compression``: no published run
    of the calibration compresses its gradients, and compression can change the steps needed
    to reach a loss, which the service does not model."""
    compression = training.gradient_compression
    if compression is None or compression.method == CompressionMethod.NONE:
        return ()
    return (WarningDetail(
        OUTSIDE_VALIDATED_RANGE, "training.gradient_compression",
        f"training.gradient_compression {compression.method.value}: the time per step is "
        "estimated, not the time to the same loss; compression can change the steps needed "
        "to converge (Vogels et al. 2019 match the uncompressed accuracy at rank 2-4 on their "
        "benchmarks only), which is not modelled, and no published run of the calibration "
        "compresses its gradients"),)
