"""NCCL's collective cost model (``service.core.collectives``) against hand computations from
the latency and bandwidth tables of NVIDIA/nccl src/graph/tuning.cc."""

from __future__ import annotations

import numpy as np
import pytest

from service.core.collectives import collective_s
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
    tree's is 4.4 + 2 x 10 x 5.0 us = 104.4 us, which NCCL takes."""
    tiny = 1024.0
    tree = (4.4 + 2 * 10 * 5.0) * US + 2 * tiny / (BUS * 0.9 / 3.8)
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
