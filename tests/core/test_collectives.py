"""NCCL's collective cost model (``service.core.collectives``) against hand computations from
the latency and bandwidth tables of NVIDIA/nccl src/graph/tuning.cc."""

from __future__ import annotations

import numpy as np
import pytest

from service.core.collectives import (
    TREE_CORRECTION_FACTOR,
    Algorithm,
    Protocol,
    collective_s,
    tree_correction,
)
from service.core.ops import SCALAR

BUS = 200e9
"""An achieved bus bandwidth, bytes/s."""
US = 1e-6


def test_an_8_way_nvlink_all_reduce_of_4_mib_runs_ring_ll128() -> None:
    """14 ring steps. Ring LL128: 10 + 14 x 1.9 = 36.6 us + 14/8 x S/B / 0.92. Every other pair
    is slower: tree LL128 21.2 us + 2S / (B x 0.9 x 7/9) (81 us), ring Simple 56 us +
    14/8 x S/B (93 us), ring LL 10.18 us + 4 x 14/8 x S/B (157 us)."""
    size = 4 * 2**20
    wire = 14 / 8 * size / BUS
    ll128 = (10.0 + 14 * 1.9) * US + wire / 0.92
    assert collective_s(size, 8, 8, BUS, True) == pytest.approx(ll128)
    simple = (8.4 + 14 * 3.4) * US + wire
    tree_ll128 = (4.4 + 2 * 7 * 1.2) * US + 2 * size / (BUS * 0.9 * 7 / 9)
    assert ll128 < tree_ll128 < simple


def test_a_small_all_reduce_runs_ring_ll() -> None:
    """64 KiB over 8 ranks: ring LL, 3.6 + 14 x 0.47 us + 4 x 14/8 x S/B."""
    size = 65536
    expected = (3.6 + 14 * 0.47) * US + 4 * 14 / 8 * size / BUS
    assert collective_s(size, 8, 8, BUS, True) == pytest.approx(expected)


def test_reduce_scatter_takes_half_the_steps() -> None:
    """n-1 steps, and LL at 1/3 of the bus bandwidth inside one node."""
    size = 65536
    expected = (3.6 + 7 * 0.47) * US + 3 * 7 / 8 * size / BUS
    assert collective_s(size, 8, 8, BUS, False) == pytest.approx(expected)


def test_latency_grows_with_the_ring() -> None:
    """The fixed latency the model had (20 us for any group) undercounts big rings: a tiny
    all-reduce costs more at 8 ranks than at 2, and more across nodes than inside one."""
    tiny = 1024.0
    times = [collective_s(tiny, n, min(n, 8), BUS, True) for n in (2, 4, 8)]
    assert times == sorted(times)
    assert times[0] < times[-1]
    assert collective_s(tiny, 16, 8, BUS, True) > collective_s(tiny, 8, 8, BUS, True)


def test_across_many_nodes_the_tree_bounds_the_latency() -> None:
    """1,024 nodes, one rank each: a ring's LL latency is 3.6 + 2046 x 2.7 us (5.5 ms); the
    tree's is 4.4 + 2 x 10 x 5.0 us = 104.4 us, which NCCL takes. 1 KiB is 16 x 64 bytes,
    entry 4 of LL's ``treeCorrectionFactor`` (0.9)."""
    tiny = 1024.0
    tree = (4.4 + 2 * 10 * 5.0) * US + 2 * tiny / (BUS * 0.9 * 0.9 / 3.8)
    assert collective_s(tiny, 1024, 1, BUS, True) == pytest.approx(tree)


def test_a_multi_node_ring_all_reduce_pays_the_plateau() -> None:
    """16 ranks on 2 nodes, 1 GB: ring Simple, (8.4 + 28 x 3.4 + 2 x 9.6) x 1.9 us. Of its 30
    steps 2 cross the network; 8 ranks a node."""
    size = 1e9
    latency = (8.4 + 28 * 3.4 + 2 * 9.6) * 1.9 * US
    assert collective_s(size, 16, 8, BUS, True) == pytest.approx(latency + 30 / 16 * size / BUS)


def test_nothing_to_do_costs_nothing() -> None:
    assert collective_s(1e6, 1, 1, BUS, True) == 0.0
    assert collective_s(0.0, 8, 8, BUS, True) == 0.0


def test_arrays_agree_with_scalars() -> None:
    """The plan search evaluates many candidates at once with numpy (``ops``)."""
    sizes = np.array([1e3, 6e4, 4e6, 1e9])
    groups = np.array([2.0, 8.0, 16.0, 512.0])
    per_node = np.array([2.0, 8.0, 8.0, 8.0])
    for all_reduce in (True, False):
        vector = collective_s(sizes, groups, per_node, BUS, all_reduce, np)
        scalar = [collective_s(float(s), float(g), float(p), BUS, all_reduce, SCALAR)
                  for s, g, p in zip(sizes, groups, per_node, strict=True)]
        assert vector == pytest.approx(scalar, rel=1e-12)


SCALEUP = 360e9
"""An achieved scale-up bandwidth below twice ``BUS``: it caps the two-node tree (twice it
does not)."""
GIB8 = 8 * 2**30


def test_the_tree_correction_is_nccl_s_table() -> None:
    """``treeCorrectionFactor[p][log2i(S >> 6)]`` (tuning.cc v2.7.5-1 lines 247-260): 64-127 B
    take entry 0, 1 MiB (2^14 x 64 B) entry 14, 128 MiB entry 21, 256 MiB and more 1."""
    for protocol in Protocol:
        table = TREE_CORRECTION_FACTOR[protocol]
        assert len(table) == 22
        assert tree_correction(64.0, protocol) == pytest.approx(table[0])
        assert tree_correction(127.0, protocol) == pytest.approx(table[0])
        assert tree_correction(2.0**20, protocol) == pytest.approx(table[14])
        assert tree_correction(2.0**20 - 1, protocol) == pytest.approx(table[13])
        assert tree_correction(2.0**27, protocol) == pytest.approx(table[21])
        assert tree_correction(2.0**28, protocol) == pytest.approx(1.0)
        assert tree_correction(1e12, protocol) == pytest.approx(1.0)
    sizes = np.array([8.0, 2.0**20, 2.0**27, 2.0**30])
    assert tree_correction(sizes, Protocol.SIMPLE, np) == pytest.approx([0.9, 0.5, 0.9, 1.0])


def test_on_two_nodes_the_tree_runs_at_twice_the_network() -> None:
    """16 ranks on 2 nodes, 8 GiB: the tree's bus bandwidth is twice the ring's network-bound
    figure (tuning.cc line 108, search.cc lines 752-758), so its algorithm bandwidth is
    0.9 x 2B / 2 and nccl-tests' busbw 0.9 x 2B x 15/16 = 1.69 B (less the latency's 1%),
    against the ring's B.
    Tree Simple's latency: 2 x (7 x 28 + 1 x 50) us."""
    tree = 2 * (7 * 28.0 + 50.0) * US + 2 * GIB8 / (2 * BUS * 0.9)
    assert collective_s(GIB8, 16, 8, BUS, True, scaleup_bytes_per_s=SCALEUP * 2) == (
        pytest.approx(tree))
    busbw = GIB8 / tree * 2 * 15 / 16
    assert busbw / BUS == pytest.approx(0.9 * 2 * 15 / 16, rel=0.02)


def test_the_two_node_tree_is_capped_by_the_scale_up_link() -> None:
    """With a scale-up link below twice the network the tree takes the scale-up link."""
    tree = 2 * (7 * 28.0 + 50.0) * US + 2 * GIB8 / (SCALEUP * 0.9)
    assert collective_s(GIB8, 16, 8, BUS, True, scaleup_bytes_per_s=SCALEUP) == (
        pytest.approx(tree))


def test_beyond_two_nodes_or_under_nccl_algo_ring_the_ring_is_as_before() -> None:
    """Three nodes: the tree's bus bandwidth is the network's (tuning.cc line 108,
    ``speedInter``), so NCCL runs the ring on a large message; and with ``NCCL_ALGO=RING``
    on two nodes the ring runs whatever the tree would do."""
    three = collective_s(GIB8, 24, 8, BUS, True, scaleup_bytes_per_s=SCALEUP)
    assert three == pytest.approx(collective_s(GIB8, 24, 8, BUS, True))
    assert three == pytest.approx(collective_s(GIB8, 24, 8, BUS, True,
                                               algorithms=frozenset({Algorithm.RING})))
    ring = collective_s(GIB8, 16, 8, BUS, True, scaleup_bytes_per_s=SCALEUP,
                        algorithms=frozenset({Algorithm.RING}))
    latency = (8.4 + 28 * 3.4 + 2 * 9.6) * 1.9 * US
    assert ring == pytest.approx(latency + 30 / 16 * GIB8 / BUS)
    assert collective_s(GIB8, 16, 8, BUS, True, scaleup_bytes_per_s=SCALEUP) < ring


def test_two_ranks_on_two_nodes_still_run_the_ring_on_large_messages() -> None:
    """One rank a node: the ring's algorithm bandwidth is B x 2/2 = B, the tree's 0.9 x 2B / 2
    = 0.9 B, so the ring wins at 8 GiB (the two-node tree gains only with ranks to spare on
    the scale-up link)."""
    ring = collective_s(GIB8, 2, 1, BUS, True, algorithms=frozenset({Algorithm.RING}))
    assert collective_s(GIB8, 2, 1, BUS, True, scaleup_bytes_per_s=SCALEUP) == (
        pytest.approx(ring))


def test_the_two_node_tree_agrees_on_arrays() -> None:
    sizes = np.array([1e3, 4e6, 2.0**27, GIB8])
    groups = np.array([16.0, 16.0, 2.0, 24.0])
    per_node = np.array([8.0, 8.0, 1.0, 8.0])
    vector = collective_s(sizes, groups, per_node, BUS, True, np, scaleup_bytes_per_s=SCALEUP)
    scalar = [collective_s(float(s), float(g), float(p), BUS, True, SCALAR,
                           scaleup_bytes_per_s=SCALEUP)
              for s, g, p in zip(sizes, groups, per_node, strict=True)]
    assert vector == pytest.approx(scalar, rel=1e-12)
