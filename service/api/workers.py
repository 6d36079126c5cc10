"""CPU-heavy work (the plan search) runs in worker processes, so it never holds the API
process's GIL: ``/livez`` and cheap requests keep answering while searches run.

One process-wide pool, started on first use with the ``spawn`` method (forking a threaded
server is unsafe) and shut down at exit. ``CQ_SEARCH_WORKERS=0`` runs searches in the calling
thread instead.

The app's lifespan ends the pool (``stop_with_app``): after a SIGTERM, uvicorn runs the
lifespan's shutdown and then re-raises the signal, so the process dies without running
``atexit`` handlers. ``shutdown`` therefore ends every worker and the multiprocessing resource
tracker (the helper process) itself, within ``2 * WORKER_STOP_S``, before the server exits
(issue 18: both kept running after a SIGTERM).

Workers also die with their parent: each watches its parent process id and exits within
``PARENT_POLL_S`` of the parent going away, for a SIGKILL, which runs no shutdown (issue 14:
they were orphaned and kept running). The resource tracker then sees its last holder go and
exits too.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import os
import resource
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import resource_tracker
from typing import Any, TypeVar

from service.api.work import ClientGoneError, SearchQueueTimeoutError

T = TypeVar("T")
logger = logging.getLogger("service.api")
_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_size = 0
_slots = threading.BoundedSemaphore(1)
"""One per worker of the current pool: a call waits here, in this process, until a worker is
free, and only then goes to the pool (whose own call queue would otherwise hold calls that
can no longer be cancelled, and whose wait nobody could bound)."""
_memory_limit_bytes = 0
PARENT_POLL_S = 0.5
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
STOP_POLL_S = 0.05
"""How often a waiting request checks whether its client has gone."""
WORKER_STOP_S = 2.0
"""How long an ending pool waits for its workers to leave on their own, then for them to
obey SIGTERM, before it kills them: ending takes at most twice this, well inside the pod's
grace period after uvicorn's graceful shutdown (``tests/deploy`` checks the sum)."""
_end_with_app = True
_closed = False
"""Set when the app's lifespan has ended the pool (``stop_with_app``): no search may start a
new pool, or run inline, while the server is exiting."""


class WorkersClosedError(SearchQueueTimeoutError):
    """A search asked for a worker after the server began shutting down (HTTP 503 with
    ``Retry-After``, like a queue timeout: another replica can take it)."""

    def __init__(self) -> None:
        Exception.__init__(self, "the server is shutting down and starts no more searches; "
                                 "nothing was stored: retry after Retry-After seconds")
        self.waited_s = 0.0


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(PARENT_POLL_S)
        if os.getppid() != parent:
            os._exit(0)


def _start_worker(parent: int, memory_limit_bytes: int) -> None:
    """Worker initializer: exit as soon as the parent process is gone (a thread, so it works
    whichever thread spawned the worker, unlike PR_SET_PDEATHSIG), and cap the worker's
    address space at ``memory_limit_bytes`` (``CQ_SEARCH_MEMORY_BYTES``; 0: no cap), so a
    search that would grow past it gets ``MemoryError`` instead of the node's OOM killer
    taking the replica (issue 14)."""
    if memory_limit_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit_bytes, memory_limit_bytes))
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True,
                     name="parent-watch").start()


def set_memory_limit(memory_limit_bytes: int) -> None:
    """The address-space cap for worker processes started from now on (a running pool with
    another cap is replaced)."""
    global _memory_limit_bytes, _pool
    with _lock:
        if memory_limit_bytes == _memory_limit_bytes:
            return
        _memory_limit_bytes = memory_limit_bytes
        if _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=True)
            _pool = None


def _executor(workers: int) -> ProcessPoolExecutor:
    return _executor_and_slots(workers)[0]


def _executor_and_slots(workers: int) -> tuple[ProcessPoolExecutor, threading.BoundedSemaphore]:
    global _pool, _size, _slots
    with _lock:
        if _closed:
            # A sweep's later phase (its shares after the count) must not spawn a new pool,
            # nor fall back inline, once the lifespan ended the pool: the server would then
            # search for up to the deadline before it could exit (issue 38's spread sweeps).
            raise WorkersClosedError
        if _pool is None or _size != workers:
            if _pool is not None:
                _pool.shutdown(wait=False, cancel_futures=True)
            # The search is elementwise numpy: one BLAS thread per worker, so a worker's
            # address space does not grow with the node's core count (its cap is fixed).
            for name in BLAS_THREAD_VARIABLES:
                os.environ.setdefault(name, "1")
            _pool = ProcessPoolExecutor(max_workers=workers,
                                        mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_start_worker,
                                        initargs=(os.getpid(), _memory_limit_bytes))
            _size = workers
            _slots = threading.BoundedSemaphore(workers)
        return _pool, _slots


def _warm() -> None:
    """What a worker's first search would otherwise pay: importing numpy and the model, and
    the first run of every formula (a small search on a made-up 8-GPU cluster)."""
    from service.core.presets import get_preset
    from service.core.search import SearchRequest, frozen_clock, search
    from service.core.specs import AcceleratorSpec, ClusterSpec, Precision, TrainingSpec

    accelerator = AcceleratorSpec(
        id="warm-up", memory_bytes=80e9, hbm_bytes_per_s=3e12,
        peak_flops_per_s={Precision.BF16: 1e15}, tdp_w=700.0, scaleup_domain_size=8,
        scaleup_bytes_per_s=4.5e11, scaleout_bytes_per_s=5e10)
    search(SearchRequest(
        model=get_preset("llama3.1-8b").model,
        clusters=(ClusterSpec(accelerator=accelerator, num_gpus=8, gpus_per_node=8),),
        training=TrainingSpec(seq_len=4096, global_batch_seqs=64, tokens=1e9)), frozen_clock)


def prestart(workers: int) -> list[Future[None]]:
    """Start the worker processes now, each importing the search, so that the first search
    after start-up does not wait for them (issue 16: it took 4.3 x a warm one). Returns at
    once, with a future per worker's warm-up; the workers come up in the background."""
    if workers <= 0:
        return []
    executor = _executor(workers)
    return [executor.submit(_warm) for _ in range(workers)]


def run_cpu_bound(workers: int, function: Callable[..., T], *args: Any,
                  timeout_s: float | None = None, start_by: float | None = None,
                  stop: Callable[[], bool] | None = None, **kwargs: Any) -> T:
    """``function(*args, **kwargs)`` in a worker process (or inline when ``workers`` is 0).
    Arguments and results must pickle.

    A call waits in this process until a worker is free (``_slots``), and only then goes to
    the pool. ``start_by`` (a ``time.monotonic()`` instant; default ``timeout_s`` from now)
    bounds that wait: a call for which no worker was free by then is dropped and
    ``SearchQueueTimeoutError`` raised (issue 36: the 12th of 12 concurrent searches waited
    62 s). A pool still starting up is not a busy one: a call handed to it waits for its
    worker to come up. ``timeout_s`` bounds the whole call, the wait included
    (``TimeoutError`` once handed on). ``stop`` is polled while waiting and, once true,
    abandons the call (``ClientGoneError``). A call handed on finishes on its own deadline in
    the worker, whose result is then dropped; its worker counts as busy until it has."""
    if workers <= 0:
        return function(*args, **kwargs)
    submitted = time.monotonic()
    if start_by is None and timeout_s is not None:
        start_by = submitted + timeout_s
    try:
        executor, slots = _executor_and_slots(workers)
    except (RuntimeError, BrokenProcessPool) as exc:
        return _inline(exc, function, args, kwargs)
    _take_slot(slots, start_by, stop, submitted)
    try:
        future: Future[T] = executor.submit(function, *args, **kwargs)
    except (RuntimeError, BrokenProcessPool) as exc:
        slots.release()
        return _inline(exc, function, args, kwargs)
    future.add_done_callback(lambda _: slots.release())
    ends_at = None if timeout_s is None else submitted + timeout_s
    try:
        result = _wait(future, ends_at, stop)
    except MemoryError:
        raise MemoryError(
            "the search needed more memory than a worker may use "
            f"({_memory_limit_bytes:,} bytes, CQ_SEARCH_MEMORY_BYTES): fix some dimensions, "
            "or narrow the GPU counts or batches") from None
    return result


def run_each_cpu_bound(workers: int, function: Callable[..., T],
                       calls: Sequence[tuple[Any, ...]], *, start_by: float | None = None,
                       ends_at: float | None = None,
                       stop: Callable[[], bool] | None = None) -> list[T]:
    """``function(*args)`` for each ``args`` of ``calls``, spread across the workers (as many
    at once as there are free workers; inline, one after the other, when ``workers`` is 0);
    the results in the order of ``calls``. Each call waits for a free worker as
    ``run_cpu_bound``'s does, until ``start_by`` (``SearchQueueTimeoutError``); ``ends_at``
    (a ``time.monotonic()`` instant) bounds the whole (``TimeoutError``); ``stop`` abandons
    it (``ClientGoneError``). The first error cancels the calls not yet started and is
    raised. Issue 38: the groups of a sweep are independent, so one request uses every
    worker instead of one."""
    if workers <= 0:
        return [function(*args) for args in calls]
    submitted = time.monotonic()
    try:
        executor, slots = _executor_and_slots(workers)
    except (RuntimeError, BrokenProcessPool) as exc:
        return [_inline(exc, function, args, {}) for args in calls]
    futures: list[Future[T]] = []
    try:
        for args in calls:
            if any(f.done() and not f.cancelled() and f.exception() is not None
                   for f in futures):
                break  # waiting on them below raises the first error
            _take_slot(slots, start_by, stop, submitted)
            try:
                future: Future[T] = executor.submit(function, *args)
            except BaseException:
                slots.release()
                raise
            future.add_done_callback(lambda _: slots.release())
            futures.append(future)
        return [_wait(future, ends_at, stop) for future in futures]
    except MemoryError:
        raise MemoryError(
            "the search needed more memory than a worker may use "
            f"({_memory_limit_bytes:,} bytes, CQ_SEARCH_MEMORY_BYTES): fix some dimensions, "
            "or narrow the GPU counts or batches") from None
    finally:
        for future in futures:
            future.cancel()  # no-op for those done; frees the slots of those not started


def _inline(exc: BaseException, function: Callable[..., T], args: tuple[Any, ...],
            kwargs: dict[str, Any]) -> T:
    # No worker could start (for example a script without a __main__ guard): run inline.
    logger.warning("worker processes unavailable (%s); running in the request thread",
                   type(exc).__name__)
    return function(*args, **kwargs)


def _take_slot(slots: threading.BoundedSemaphore, start_by: float | None,
               stop: Callable[[], bool] | None, submitted: float) -> None:
    """Wait for a free worker until ``start_by``, while ``stop`` is false."""
    while True:
        wait_s = STOP_POLL_S if stop is not None else None
        if start_by is not None:
            left = start_by - time.monotonic()
            if left <= 0:
                raise SearchQueueTimeoutError(time.monotonic() - submitted)
            wait_s = left if wait_s is None else min(wait_s, left)
        if slots.acquire(timeout=wait_s) if wait_s is not None else slots.acquire():
            return
        if stop is not None and stop():
            raise ClientGoneError("the client disconnected")


def _wait(future: Future[T], ends_at: float | None, stop: Callable[[], bool] | None) -> T:
    if ends_at is None and stop is None:
        return future.result()
    while True:
        wait_s = STOP_POLL_S if stop is not None else None
        if ends_at is not None:
            left = ends_at - time.monotonic()
            if left <= 0:
                future.cancel()
                raise TimeoutError("the call did not finish within its time")
            wait_s = left if wait_s is None else min(wait_s, left)
        try:
            return future.result(timeout=wait_s)
        except TimeoutError:
            if stop is not None and stop():
                future.cancel()
                raise ClientGoneError("the client disconnected") from None


def shutdown(stop_s: float = WORKER_STOP_S) -> None:
    """End the pool and every process ``multiprocessing`` started for it, and wait for them.

    Queued searches are cancelled; workers are asked to leave and given ``stop_s``; any still
    running (a search nobody waits for any more) get SIGTERM and another ``stop_s``, then
    SIGKILL. Once no child is left, the resource tracker is stopped too (it would otherwise
    outlive the server until the kernel closes its pipe). A later search starts a new pool."""
    global _pool, _size
    with _lock:
        pool, _pool, _size = _pool, None, 0
    if pool is not None:
        pool.shutdown(wait=False, cancel_futures=True)
    children = multiprocessing.active_children()
    for step in (None, "terminate", "kill"):
        if step == "terminate":
            for child in children:
                child.terminate()
        elif step == "kill":
            for child in children:
                child.kill()
        ends_at = time.monotonic() + stop_s
        for child in children:
            child.join(max(0.0, ends_at - time.monotonic()))
        children = [child for child in children if child.is_alive()]
        if not children:
            break
    if children:
        logger.warning("%d worker processes did not end", len(children))
        return
    if pool is not None:
        pool.shutdown(wait=True)  # the pool's manager thread, now that its workers are gone
    # The tracker exits when every holder of its pipe has closed it: the workers (gone) and
    # this process. ResourceTracker._stop() closes ours and reaps it (CPython 3.8 and later).
    # Only the process that started it can reap it: a worker (whose own exit runs this too)
    # inherited the pipe but not the tracker.
    tracker = resource_tracker._resource_tracker
    stop_tracker = getattr(tracker, "_stop", None)
    if stop_tracker is not None and getattr(tracker, "_pid", None) is not None:
        try:
            stop_tracker()
        except Exception as exc:  # a best effort: the kernel closes the pipe at exit anyway
            logger.warning("resource tracker did not stop: %s", type(exc).__name__)


def share_between_apps() -> None:
    """Keep the pool when an app's lifespan ends (``stop_with_app`` does nothing). For the
    test process, which runs hundreds of apps in turn: each would otherwise start and end
    its own workers. The pool still ends at the process's exit."""
    global _end_with_app
    _end_with_app = False


def stop_with_app() -> None:
    """The lifespan's shutdown: end the pool (``shutdown``) unless ``share_between_apps``;
    from then on no search starts in this process (``WorkersClosedError``)."""
    global _closed
    if _end_with_app:
        with _lock:
            _closed = True
        shutdown()


atexit.register(shutdown)
