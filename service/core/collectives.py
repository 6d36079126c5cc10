"""Latency of NCCL collectives by algorithm, protocol and ring size (issue 37, item 7).

A fixed latency per collective (the earlier ``Calibration.collective_latency_s``, 20 us)
undercounts small collectives over many ranks: a ring all-reduce makes 2(n-1) steps and each
step pays a hop latency, so an 8-way tensor-parallel all-reduce of a few MB costs about three
times the fixed figure, and the error grows with the TP degree at small hidden sizes, where
the message is small and the bandwidth term does not dominate.

This module is NCCL's own cost model (NVIDIA/nccl ``src/graph/tuning.cc``, ``ncclTopoTuneModel``
and ``ncclTopoGetAlgoTime``, the 2.8 series; commit 01afd20 of github.com/NVIDIA/nccl):

- a collective's time is ``latency + bytes / algorithm bandwidth`` for each (algorithm,
  protocol) pair, and NCCL runs the fastest pair;
- ring latency: ``base[protocol] + (steps - inter_steps) x intra_hop + inter_steps x
  inter_hop``, with 2(n-1) steps for an all-reduce and n-1 for a reduce-scatter or an
  all-gather, of which 2(nodes-1) or nodes-1 cross the network;
- tree latency (all-reduce only): ``base + 2 x ((ranks per node - 1) x intra_hop
  + log2(nodes) x inter_hop)``;
- the protocols trade latency for bandwidth: LL reaches 1/4 of the bus bandwidth for an
  all-reduce or across nodes (1/3 otherwise), LL128 0.92 of it, Simple all of it; a tree
  reaches 0.9 of it (LL a further 1/3.8, LL128 a further 0.915 across nodes, 7/9 inside one);
- a multi-node ring all-reduce with Simple pays 1.9x its latency on large messages ("plateau
  effect of ring").

The bus bandwidth itself is the caller's (``timing.ring_bandwidth``: datasheet link rates
times fitted achieved fractions). Two simplifications, both documented in docs/model.md: the
tree's bandwidth is not capped at NCCL's per-tree maxima (80-130 GB/s), because the model's
bus bandwidth is already an achieved figure, and every scale-up link takes NCCL's NVLink hop
latencies (TPU ICI and AMD Infinity Fabric have no published equivalent; the PCIe figures
apply only to PCIe-only parts, which the catalogue marks by their scale-up bandwidth).
"""

from __future__ import annotations

from enum import IntEnum
from types import MappingProxyType

from service.core.ops import SCALAR, Num

US_S = 1e-6
"""Seconds per microsecond: NCCL's tables are in microseconds."""


class Protocol(IntEnum):
    """NCCL's three wire protocols (``NCCL_PROTO``)."""

    LL = 0
    LL128 = 1
    SIMPLE = 2


RING_BASE_LATENCY_S = MappingProxyType({
    Protocol.LL: 3.6 * US_S, Protocol.LL128: 10.0 * US_S, Protocol.SIMPLE: 8.4 * US_S,
})
"""``baseLat[NCCL_ALGO_RING]`` (tuning.cc): fixed cost of a ring collective by protocol."""
TREE_BASE_LATENCY_S = MappingProxyType({
    Protocol.LL: 4.4 * US_S, Protocol.LL128: 4.4 * US_S, Protocol.SIMPLE: 0.0,
})
"""``baseLat[NCCL_ALGO_TREE]`` (tuning.cc)."""
RING_NVLINK_HOP_S = MappingProxyType({
    Protocol.LL: 0.47 * US_S, Protocol.LL128: 1.9 * US_S, Protocol.SIMPLE: 3.4 * US_S,
})
"""``hwLat[NCCL_HW_NVLINK][NCCL_ALGO_RING]`` (tuning.cc): one ring step over NVLink."""
RING_NET_HOP_S = MappingProxyType({
    Protocol.LL: 2.7 * US_S, Protocol.LL128: 4.0 * US_S, Protocol.SIMPLE: 9.6 * US_S,
})
"""``hwLat[NCCL_HW_NET][NCCL_ALGO_RING]`` (tuning.cc): one ring step across the network."""
TREE_NVLINK_HOP_S = MappingProxyType({
    Protocol.LL: 0.52 * US_S, Protocol.LL128: 1.2 * US_S, Protocol.SIMPLE: 28.0 * US_S,
})
"""``hwLat[NCCL_HW_NVLINK][NCCL_ALGO_TREE]`` (tuning.cc; Simple is a 256 kB chunk's time)."""
TREE_NET_HOP_S = MappingProxyType({
    Protocol.LL: 5.0 * US_S, Protocol.LL128: 8.5 * US_S, Protocol.SIMPLE: 50.0 * US_S,
})
"""``hwLat[NCCL_HW_NET][NCCL_ALGO_TREE]`` (tuning.cc)."""
LL_MULTI_NODE_INTRA_MULTIPLIER = 1.8
"""LL's intra-node hop latency across more than one node (tuning.cc: ``intraLat *= 1.8``)."""
RING_PLATEAU_MULTIPLIER = 1.9
"""A multi-node ring all-reduce with Simple on a message of at least ranks/16 x 64 KiB pays
1.9x its latency (``ncclTopoGetAlgoTime``: "Plateau effect of ring")."""
PLATEAU_BYTES_PER_RANK = 65536.0 / 16.0
"""The plateau threshold per rank: ranks/16 x 65,536 bytes (``ncclTopoGetAlgoTime``)."""
LL_ALL_REDUCE_BANDWIDTH_FRACTION = 1.0 / 4.0
"""LL's bus bandwidth for an all-reduce, or any collective across nodes (tuning.cc)."""
LL_SINGLE_NODE_BANDWIDTH_FRACTION = 1.0 / 3.0
"""LL's bus bandwidth for a reduce-scatter or all-gather inside one node (tuning.cc)."""
LL128_BANDWIDTH_FRACTION = 0.92
"""LL128's bus bandwidth, 120 of every 128 bytes carrying data (tuning.cc: 0.92)."""
TREE_BANDWIDTH_FRACTION = 0.9
"""A tree all-reduce's bus bandwidth (tuning.cc: ``busBw * .9``)."""
TREE_LL_BANDWIDTH_FRACTION = 1.0 / 3.8
"""LL on a tree, on top of ``TREE_BANDWIDTH_FRACTION`` (tuning.cc)."""
TREE_LL128_BANDWIDTH_FRACTION = 0.915
"""LL128 on a tree across nodes, on top of ``TREE_BANDWIDTH_FRACTION`` (tuning.cc)."""
TREE_LL128_SINGLE_NODE_FRACTION = 7.0 / 9.0
"""LL128 on a tree inside one node (tuning.cc)."""


def _ring_s(volume_bytes: Num, group: Num, nodes: Num, bus_bytes_per_s: Num,
            all_reduce: bool, xp: Num, hop_extra_s: float = 0.0) -> Num:
    """The fastest protocol's ring time; ``hop_extra_s`` is added to each network hop."""
    passes = 2.0 if all_reduce else 1.0
    steps = passes * (group - 1)
    inter_steps = passes * (nodes - 1)
    multi_node = nodes > 1
    # bytes / algorithm bandwidth = steps / n x bytes / bus bandwidth (tuning.cc ``ratio``).
    wire_s = steps / group * volume_bytes / bus_bytes_per_s
    best: Num = None
    for protocol in Protocol:
        intra_hop = RING_NVLINK_HOP_S[protocol] * (
            xp.where(multi_node, LL_MULTI_NODE_INTRA_MULTIPLIER, 1.0)
            if protocol == Protocol.LL else 1.0)
        latency = (RING_BASE_LATENCY_S[protocol] + (steps - inter_steps) * intra_hop
                   + inter_steps * (RING_NET_HOP_S[protocol] + hop_extra_s))
        if protocol == Protocol.LL:
            fraction = (LL_ALL_REDUCE_BANDWIDTH_FRACTION if all_reduce else xp.where(
                multi_node, LL_ALL_REDUCE_BANDWIDTH_FRACTION, LL_SINGLE_NODE_BANDWIDTH_FRACTION))
        elif protocol == Protocol.LL128:
            fraction = LL128_BANDWIDTH_FRACTION
        else:
            fraction = 1.0
            if all_reduce:
                plateau = multi_node & (volume_bytes >= group * PLATEAU_BYTES_PER_RANK)
                latency = latency * xp.where(plateau, RING_PLATEAU_MULTIPLIER, 1.0)
        seconds = latency + wire_s / fraction
        best = seconds if best is None else xp.minimum(best, seconds)
    return best


def _tree_all_reduce_s(volume_bytes: Num, group: Num, nodes: Num, bus_bytes_per_s: Num,
                       xp: Num, hop_extra_s: float = 0.0) -> Num:
    """The fastest protocol's tree all-reduce time: algorithm bandwidth is half the bus
    bandwidth (tuning.cc ``ratio = .5``)."""
    per_node = group / nodes
    depth = xp.log2(xp.maximum(nodes, 1.0))
    multi_node = nodes > 1
    best: Num = None
    for protocol in Protocol:
        intra_hop = TREE_NVLINK_HOP_S[protocol] * (
            xp.where(multi_node, LL_MULTI_NODE_INTRA_MULTIPLIER, 1.0)
            if protocol == Protocol.LL else 1.0)
        latency = TREE_BASE_LATENCY_S[protocol] + 2.0 * (
            (per_node - 1) * intra_hop + depth * (TREE_NET_HOP_S[protocol] + hop_extra_s))
        fraction = TREE_BANDWIDTH_FRACTION
        if protocol == Protocol.LL:
            fraction = fraction * TREE_LL_BANDWIDTH_FRACTION
        elif protocol == Protocol.LL128:
            fraction = fraction * xp.where(multi_node, TREE_LL128_BANDWIDTH_FRACTION,
                                           TREE_LL128_SINGLE_NODE_FRACTION)
        seconds = latency + 2.0 * volume_bytes / (bus_bytes_per_s * fraction)
        best = seconds if best is None else xp.minimum(best, seconds)
    return best


def collective_s(volume_bytes: Num, group: Num, per_node: Num, bus_bytes_per_s: Num,
                 all_reduce: bool, xp: Num = SCALAR, hop_extra_s: float = 0.0) -> Num:
    """Seconds of an all-reduce (``all_reduce``) or of a reduce-scatter / all-gather of
    ``volume_bytes`` per rank over ``group`` ranks, ``per_node`` of them on each node, at the
    ring's achieved bus bandwidth: NCCL's fastest (algorithm, protocol) pair. Zero for a group
    of one or nothing to send. ``hop_extra_s``: the fabric's latency over NCCL's
    InfiniBand-tuned network hop (``fabric.FabricTerms.hop_extra_s``; 0 without a fabric,
    which leaves every figure as it was: x + 0.0 is x)."""
    nodes = xp.maximum(group / xp.maximum(per_node, 1.0), 1.0)
    seconds = _ring_s(volume_bytes, group, nodes, bus_bytes_per_s, all_reduce, xp,
                      hop_extra_s)
    if all_reduce:
        seconds = xp.minimum(seconds, _tree_all_reduce_s(
            volume_bytes, group, nodes, bus_bytes_per_s, xp, hop_extra_s))
    return xp.where((group > 1) & (volume_bytes > 0), seconds, 0.0)
