"""Once the lifespan has ended the search pool, no search starts in the exiting server: not in
a new pool, not inline (a sweep's later phase used to spawn a fresh pool during shutdown and
search until its deadline, so the server outlived the pod's grace period)."""

from __future__ import annotations

import pytest

from service.api import workers


def test_no_search_starts_after_the_lifespan_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[int] = []
    monkeypatch.setattr(workers, "_end_with_app", True)
    monkeypatch.setattr(workers, "_closed", False)
    monkeypatch.setattr(workers, "shutdown", lambda *args, **kwargs: None)  # keep the pool
    workers.stop_with_app()
    with pytest.raises(workers.WorkersClosedError):
        workers.run_cpu_bound(2, ran.append, 1)
    with pytest.raises(workers.WorkersClosedError):
        workers.run_each_cpu_bound(2, ran.append, [(1,), (2,)])
    assert ran == []
    assert workers.WorkersClosedError().waited_s == 0.0
