"""A search worker keeps the C allocator's freed memory (issue 38, ``api.allocator``); the
server process keeps glibc's defaults."""

from __future__ import annotations

import ctypes.util
import multiprocessing
import resource
import sys

import pytest

from service.api.allocator import keep_freed_memory

GLIBC = sys.platform == "linux" and ctypes.util.find_library("c") is not None


def _faults_of_fresh_arrays(tuned: bool) -> int:
    """Minor page faults of allocating and freeing 3 MB arrays, after ``keep_freed_memory``
    when ``tuned`` (run in a child process)."""
    import numpy as np

    if tuned:
        assert keep_freed_memory()
    for _ in range(5):  # warm up: the heap has grown once
        held = [np.ones(400_000) for _ in range(20)]
        del held
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        held = [np.ones(400_000) for _ in range(20)]
        del held
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_the_server_process_keeps_the_defaults() -> None:
    assert multiprocessing.parent_process() is None
    assert keep_freed_memory() is False


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_a_worker_stops_faulting_its_temporaries_in_again() -> None:
    spawn = multiprocessing.get_context("spawn")
    with spawn.Pool(1) as pool:
        default = pool.apply(_faults_of_fresh_arrays, (False,))
    with spawn.Pool(1) as pool:
        tuned = pool.apply(_faults_of_fresh_arrays, (True,))
    assert default > 10_000  # 20 rounds of 20 x 3.2 MB: fresh pages every round
    assert tuned < default / 20
