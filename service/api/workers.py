"""CPU-heavy work (the plan search) runs in worker processes, so it never holds the API
process's GIL: ``/livez`` and cheap requests keep answering while searches run.

One process-wide pool, started on first use with the ``spawn`` method (forking a threaded
server is unsafe) and shut down at exit. ``CQ_SEARCH_WORKERS=0`` runs searches in the calling
thread instead.

Workers die with their parent: each watches its parent process id and exits within
``PARENT_POLL_S`` of the parent going away, after a SIGTERM as after a SIGKILL (issue 14: they
were orphaned and kept running). The multiprocessing resource tracker then sees its last
holder go and exits too.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

T = TypeVar("T")
logger = logging.getLogger("service.api")
_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_size = 0
PARENT_POLL_S = 0.5


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(PARENT_POLL_S)
        if os.getppid() != parent:
            os._exit(0)


def _die_with_parent(parent: int) -> None:
    """Worker initializer: exit as soon as the parent process is gone (a thread, so it works
    whichever thread spawned the worker, unlike PR_SET_PDEATHSIG)."""
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True,
                     name="parent-watch").start()


def _executor(workers: int) -> ProcessPoolExecutor:
    global _pool, _size
    with _lock:
        if _pool is None or _size != workers:
            if _pool is not None:
                _pool.shutdown(wait=False, cancel_futures=True)
            _pool = ProcessPoolExecutor(max_workers=workers,
                                        mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_die_with_parent,
                                        initargs=(os.getpid(),))
            _size = workers
        return _pool


def run_cpu_bound(workers: int, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)`` in a worker process (or inline when ``workers`` is 0).
    Arguments and results must pickle."""
    if workers <= 0:
        return function(*args, **kwargs)
    try:
        future = _executor(workers).submit(function, *args, **kwargs)
    except (RuntimeError, BrokenProcessPool) as exc:
        # No worker could start (for example a script without a __main__ guard): run inline.
        logger.warning("worker processes unavailable (%s); running in the request thread",
                       type(exc).__name__)
        return function(*args, **kwargs)
    return future.result()


def _shutdown() -> None:
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)


atexit.register(_shutdown)
