"""CPU-heavy work (the plan search) runs in worker processes, so it never holds the API
process's GIL: ``/livez`` and cheap requests keep answering while searches run.

One process-wide pool, started on first use with the ``spawn`` method (forking a threaded
server is unsafe) and shut down at exit. ``CQ_SEARCH_WORKERS=0`` runs searches in the calling
thread instead.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

T = TypeVar("T")
logger = logging.getLogger("service.api")
_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_size = 0


def _executor(workers: int) -> ProcessPoolExecutor:
    global _pool, _size
    with _lock:
        if _pool is None or _size != workers:
            if _pool is not None:
                _pool.shutdown(wait=False, cancel_futures=True)
            _pool = ProcessPoolExecutor(max_workers=workers,
                                        mp_context=multiprocessing.get_context("spawn"))
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
