"""Latency of NCCL collectives by algorithm, protocol and ring size (issue 37, item 7).

A fixed latency per collective (the earlier ``Calibration.collective_latency_s``, 20 us)
undercounts small collectives over many ranks: a ring all-reduce makes 2(n-1) steps and each
step pays a hop latency, so an 8-way tensor-parallel all-reduce of a few MB costs about three
times the fixed figure, and the error grows with the TP degree at small hidden sizes, where
the message is small and the bandwidth term does not dominate.

This module is NCCL's own cost model (NVIDIA/nccl ``src/graph/tuning.cc``, ``ncclTopoTuneModel``
and ``ncclTopoGetAlgoTime``, release tag v2.7.5-1, commit 01afd20 of github.com/NVIDIA/nccl;
the file is unchanged through v2.7.8-1). Line numbers below are that file's at that tag:

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
  effect of ring");
- on one or two nodes the bandwidth of every algorithm is the graph's intra-node speed
  (line 108: ``speed = nNodes <= 2 || COLLNET ? speedIntra : speedInter``), and the tree's
  graph search raises the intra-node speed while it is below twice the network's
  (``src/graph/search.cc`` at the same tag, lines 752-758: "See if we can increase
  speedIntra for trees (2 nodes or collnet)", ``speedIntra < speedInter*2``): on two nodes
  the tree's bus bandwidth is up to twice the network's, capped by the scale-up link. This is
  the "trick" NVIDIA's maintainers describe (nccl issue #307, sjeaugey: "on 2 nodes, we use
  trees which due to some trick can reach up to 2x the network bandwidth"; nccl issue #330,
  sjeaugey: on two nodes the tree "can balance traffic unevenly between NVLink and the
  network, so that there is more traffic on NVLink"). The ring's bus bandwidth is
  the network's on two nodes as on more (its graph's two speeds are kept equal, lines
  746-747 and 754 of search.cc);
- trees do not follow that model at medium sizes, and NCCL scales a tree's bandwidth by a
  static correction per protocol and power-of-two size, 64 B to 128 MiB
  (``treeCorrectionFactor``, lines 245-251, applied at lines 259-260 on
  ``log2i(nBytes >> 6) < 22``).

NCCL runs the fastest enabled (algorithm, protocol) pair (``algorithms`` stands for
``NCCL_ALGO``, lines 166-170 and 181: a disabled algorithm's bandwidth is 0, never chosen).

The bus bandwidth itself is the caller's (``timing.ring_bandwidth``: datasheet link rates
times fitted achieved fractions; the two-node tree's cap, the scale-up link, is the caller's
too). Three simplifications, all documented in docs/model.md: the tree's bandwidth is not
capped at NCCL's per-tree maxima (``maxTreeBw``, lines 115-118: 80-130 GB/s, figures that
predate NVLink 4 and that later releases replace with per-channel maxima), because the
model's bus bandwidth is already an achieved figure; LL128 is always a candidate (line 176
enables it by default only for some GPU and NIC paths); and every scale-up link takes
NCCL's NVLink hop latencies (TPU ICI and AMD Infinity Fabric have no published equivalent;
the PCIe figures apply only to PCIe-only parts, which the catalogue marks by their scale-up
bandwidth). CollNet (SHARP) and the later releases' NVLS algorithms are not modelled.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum
from types import MappingProxyType

from service.core.ops import SCALAR, Num

US_S = 1e-6
"""Seconds per microsecond: NCCL's tables are in microseconds."""


class Protocol(IntEnum):
    """NCCL's three wire protocols (``NCCL_PROTO``)."""

    LL = 0
    LL128 = 1
    SIMPLE = 2


class Algorithm(StrEnum):
    """NCCL's all-reduce algorithms the model has (``NCCL_ALGO``; CollNet is not modelled)."""

    RING = "ring"
    TREE = "tree"


ALL_ALGORITHMS: frozenset[Algorithm] = frozenset(Algorithm)
"""NCCL's default: every algorithm enabled, the fastest run (tuning.cc lines 159, 181)."""


RING_BASE_LATENCY_S = MappingProxyType({
    Protocol.LL: 3.6 * US_S, Protocol.LL128: 10.0 * US_S, Protocol.SIMPLE: 8.4 * US_S,
})
"""``baseLat[NCCL_ALGO_RING]`` (tuning.cc line 56): fixed cost of a ring collective by protocol."""
TREE_BASE_LATENCY_S = MappingProxyType({
    Protocol.LL: 4.4 * US_S, Protocol.LL128: 4.4 * US_S, Protocol.SIMPLE: 0.0,
})
"""``baseLat[NCCL_ALGO_TREE]`` (tuning.cc line 56)."""
RING_NVLINK_HOP_S = MappingProxyType({
    Protocol.LL: 0.47 * US_S, Protocol.LL128: 1.9 * US_S, Protocol.SIMPLE: 3.4 * US_S,
})
"""``hwLat[NCCL_HW_NVLINK][NCCL_ALGO_RING]`` (tuning.cc line 65): one ring step over NVLink."""
RING_NET_HOP_S = MappingProxyType({
    Protocol.LL: 2.7 * US_S, Protocol.LL128: 4.0 * US_S, Protocol.SIMPLE: 9.6 * US_S,
})
"""``hwLat[NCCL_HW_NET][NCCL_ALGO_RING]`` (tuning.cc line 69): one ring step across the network."""
TREE_NVLINK_HOP_S = MappingProxyType({
    Protocol.LL: 0.52 * US_S, Protocol.LL128: 1.2 * US_S, Protocol.SIMPLE: 28.0 * US_S,
})
"""``hwLat[NCCL_HW_NVLINK][NCCL_ALGO_TREE]`` (tuning.cc line 65; Simple is a 256 kB chunk's
time, line 62)."""
TREE_NET_HOP_S = MappingProxyType({
    Protocol.LL: 5.0 * US_S, Protocol.LL128: 8.5 * US_S, Protocol.SIMPLE: 50.0 * US_S,
})
"""``hwLat[NCCL_HW_NET][NCCL_ALGO_TREE]`` (tuning.cc line 69)."""
LL_MULTI_NODE_INTRA_MULTIPLIER = 1.8
"""LL's intra-node hop latency across more than one node (tuning.cc line 132:
``intraLat *= 1.8``)."""
RING_PLATEAU_MULTIPLIER = 1.9
"""A multi-node ring all-reduce with Simple on a message of at least ranks/16 x 64 KiB pays
1.9x its latency (``ncclTopoGetAlgoTime``, tuning.cc lines 261-262: "Plateau effect of ring")."""
PLATEAU_BYTES_PER_RANK = 65536.0 / 16.0
"""The plateau threshold per rank: ranks/16 x 65,536 bytes (tuning.cc line 262)."""
LL_ALL_REDUCE_BANDWIDTH_FRACTION = 1.0 / 4.0
"""LL's bus bandwidth for an all-reduce, or any collective across nodes (tuning.cc line 113)."""
LL_SINGLE_NODE_BANDWIDTH_FRACTION = 1.0 / 3.0
"""LL's bus bandwidth for a reduce-scatter or all-gather inside one node (tuning.cc line 113)."""
LL128_BANDWIDTH_FRACTION = 0.92
"""LL128's bus bandwidth, 120 of every 128 bytes carrying data (tuning.cc line 114: 0.92)."""
TREE_BANDWIDTH_FRACTION = 0.9
"""A tree all-reduce's bus bandwidth (tuning.cc line 118: ``busBw*.9``)."""
TREE_LL_BANDWIDTH_FRACTION = 1.0 / 3.8
"""LL on a tree, on top of ``TREE_BANDWIDTH_FRACTION`` (tuning.cc line 119)."""
TREE_LL128_BANDWIDTH_FRACTION = 0.915
"""LL128 on a tree across nodes, on top of ``TREE_BANDWIDTH_FRACTION`` (tuning.cc line 120)."""
TREE_LL128_SINGLE_NODE_FRACTION = 7.0 / 9.0
"""LL128 on a tree inside one node (tuning.cc line 120)."""
TWO_NODE_TREE_NETWORK_MULTIPLE = 2.0
"""On at most two nodes a tree's bus bandwidth is its graph's intra-node speed (tuning.cc
line 108), which the graph search raises while it is below twice the network speed
(search.cc lines 752-758, ``speedIntra < speedInter*2``): up to 2x the network's."""
TREE_CORRECTION_FACTOR = MappingProxyType({
    Protocol.LL: (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9,
                  1.0, 1.0, 1.0),
    Protocol.LL128: (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .5, .6, .6, .7, .7,
                     .8, .9, .9, 1.0),
    Protocol.SIMPLE: (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .5, .5, .6, .6,
                      .7, .8, .9),
})
"""``treeCorrectionFactor`` (tuning.cc lines 245-251): "Trees are not perfectly sticking to the
model for medium sizes. Applying a static correction factor is not ideal but works quite
well. Powers of two, 64 B to 128MB." Entry k scales a tree's bandwidth for a message of
64 x 2^k to 64 x 2^(k+1) bytes (``log2i(nBytes >> 6)``, lines 259-260); 1 from 256 MiB."""
TREE_CORRECTION_SMALLEST_BYTES = 64.0
"""The first entry's size (``nBytes >> 6``: 64-byte units)."""


def _ring_s(volume_bytes: Num, group: Num, nodes: Num, bus_bytes_per_s: Num,
            all_reduce: bool, xp: Num, hop_extra_s: float = 0.0) -> Num:
    """The fastest protocol's ring time; ``hop_extra_s`` is added to each network hop."""
    passes = 2.0 if all_reduce else 1.0
    steps = passes * (group - 1)
    inter_steps = passes * (nodes - 1)
    multi_node = nodes > 1
    # bytes / algorithm bandwidth = steps / n x bytes / bus bandwidth (tuning.cc line 126,
    # ``ratio``).
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


def tree_correction(volume_bytes: Num, protocol: Protocol, xp: Num = SCALAR) -> Num:
    """``treeCorrectionFactor[protocol][log2i(nBytes >> 6)]``, 1 from 64 x 2^22 bytes (tuning.cc
    lines 259-260): the entry for ``floor(log2(floor(S / 64)))`` is the count of the sizes
    64 x 2^k, k = 1 .. 22, that the message reaches (the same thing for whole bytes), so a
    numpy array of sizes takes it too."""
    return _correction(protocol, _size_index(volume_bytes, xp), xp)


_CORRECTION_STEPS_BYTES = tuple(TREE_CORRECTION_SMALLEST_BYTES * 2.0 ** k for k in range(
    1, len(TREE_CORRECTION_FACTOR[Protocol.LL]) + 1))
"""64 x 2^k bytes for k = 1 .. 22: where ``log2i(nBytes >> 6)`` reaches k."""
_CORRECTION_WITH_ONE = MappingProxyType({
    protocol: (*table, 1.0) for protocol, table in TREE_CORRECTION_FACTOR.items()})
"""Each protocol's table and the 1 that applies from 64 x 2^22 bytes (no entry, no scaling)."""


def _size_index(volume_bytes: Num, xp: Num) -> Num:
    return xp.searchsorted(_CORRECTION_STEPS_BYTES, volume_bytes, side="right")


def _correction(protocol: Protocol, size_index: Num, xp: Num) -> Num:
    """``protocol``'s correction at ``_size_index`` (``tree_correction``; the tree all-reduce
    looks the index up once for its three protocols)."""
    return xp.take(_CORRECTION_WITH_ONE[protocol], size_index)


def _tree_all_reduce_s(volume_bytes: Num, group: Num, nodes: Num, bus_bytes_per_s: Num,
                       xp: Num, hop_extra_s: float = 0.0) -> Num:
    """The fastest protocol's tree all-reduce time: algorithm bandwidth is half the bus
    bandwidth (tuning.cc line 126, ``ratio = .5``), times NCCL's correction at medium sizes
    (``tree_correction``)."""
    per_node = group / nodes
    depth = xp.log2(xp.maximum(nodes, 1.0))
    multi_node = nodes > 1
    size_index = _size_index(volume_bytes, xp)
    best: Num = None
    for protocol in Protocol:
        intra_hop = TREE_NVLINK_HOP_S[protocol] * (
            xp.where(multi_node, LL_MULTI_NODE_INTRA_MULTIPLIER, 1.0)
            if protocol == Protocol.LL else 1.0)
        latency = TREE_BASE_LATENCY_S[protocol] + 2.0 * (
            (per_node - 1) * intra_hop + depth * (TREE_NET_HOP_S[protocol] + hop_extra_s))
        fraction = TREE_BANDWIDTH_FRACTION * _correction(protocol, size_index, xp)
        if protocol == Protocol.LL:
            fraction = fraction * TREE_LL_BANDWIDTH_FRACTION
        elif protocol == Protocol.LL128:
            fraction = fraction * xp.where(multi_node, TREE_LL128_BANDWIDTH_FRACTION,
                                           TREE_LL128_SINGLE_NODE_FRACTION)
        seconds = latency + 2.0 * volume_bytes / (bus_bytes_per_s * fraction)
        best = seconds if best is None else xp.minimum(best, seconds)
    return best


def tree_bus_bytes_per_s(bus_bytes_per_s: Num, nodes: Num, scaleup_bytes_per_s: Num,
                         xp: Num = SCALAR) -> Num:
    """A tree's bus bandwidth: on two nodes up to twice the ring's network-bound figure,
    capped by the scale-up link (``TWO_NODE_TREE_NETWORK_MULTIPLE``); else the ring's (one
    node: the scale-up link; more than two: the network, tuning.cc line 108)."""
    two_nodes = (nodes > 1) & (nodes <= 2)
    doubled = xp.minimum(scaleup_bytes_per_s, TWO_NODE_TREE_NETWORK_MULTIPLE * bus_bytes_per_s)
    return xp.where(two_nodes, xp.maximum(bus_bytes_per_s, doubled), bus_bytes_per_s)


def collective_s(volume_bytes: Num, group: Num, per_node: Num, bus_bytes_per_s: Num,
                 all_reduce: bool, xp: Num = SCALAR, hop_extra_s: float = 0.0,
                 scaleup_bytes_per_s: Num = None,
                 algorithms: frozenset[Algorithm] = ALL_ALGORITHMS) -> Num:
    """Seconds of an all-reduce (``all_reduce``) or of a reduce-scatter / all-gather of
    ``volume_bytes`` per rank over ``group`` ranks, ``per_node`` of them on each node, at the
    ring's achieved bus bandwidth: NCCL's fastest (algorithm, protocol) pair. Zero for a group
    of one or nothing to send. ``hop_extra_s``: the fabric's latency over NCCL's
    InfiniBand-tuned network hop (``fabric.FabricTerms.hop_extra_s``; 0 without a fabric,
    which leaves every figure as it was: x + 0.0 is x). ``scaleup_bytes_per_s``: the scale-up
    link's achieved bandwidth, the two-node tree's cap (``tree_bus_bytes_per_s``); without it
    the tree runs at the ring's bus bandwidth on any number of nodes. ``algorithms``: those
    NCCL may run (``NCCL_ALGO``; the tree is an all-reduce's only, tuning.cc line 105)."""
    nodes = xp.maximum(group / xp.maximum(per_node, 1.0), 1.0)
    use_tree = all_reduce and Algorithm.TREE in algorithms
    if Algorithm.RING in algorithms or not use_tree:
        seconds = _ring_s(volume_bytes, group, nodes, bus_bytes_per_s, all_reduce, xp,
                          hop_extra_s)
    else:
        seconds = None
    if use_tree:
        tree_bus = bus_bytes_per_s if scaleup_bytes_per_s is None else tree_bus_bytes_per_s(
            bus_bytes_per_s, nodes, scaleup_bytes_per_s, xp)
        tree = _tree_all_reduce_s(volume_bytes, group, nodes, tree_bus, xp, hop_extra_s)
        seconds = tree if seconds is None else xp.minimum(seconds, tree)
    return xp.where((group > 1) & (volume_bytes > 0), seconds, 0.0)
