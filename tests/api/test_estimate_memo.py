"""The estimate memo (service/api/fast.py, decision 148): a body answered before is answered
again with the same bytes, and never once anything it reads has changed."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from service.api.fast import EstimateMemo
from service.api.schemas.estimate import ESTIMATE_EXAMPLE
from tests.api.test_fast_path import _app

BODY = json.dumps(ESTIMATE_EXAMPLE).encode()
JSON = {"content-type": "application/json"}


@pytest.fixture
def client(migrated_engine: Engine) -> Iterator[TestClient]:
    yield from _app(migrated_engine)


@pytest.fixture
def slow(migrated_engine: Engine) -> Iterator[TestClient]:
    """Every request through routing: no fast layer, no memo."""
    yield from _app(migrated_engine, fast_paths=False)


def _memo(client: TestClient) -> EstimateMemo:
    memo: EstimateMemo = client.app.state.estimate_memo  # type: ignore[attr-defined]
    return memo


def _post(client: TestClient, body: bytes) -> Any:
    return client.post("/v1/estimates", content=body, headers=JSON)


def _warm(client: TestClient) -> None:
    """The first request reads the accelerator cache in the pool (the route answers it)."""
    assert _post(client, BODY).status_code == 200


def test_a_repeated_body_is_answered_from_the_memo_with_the_same_bytes(
    client: TestClient, slow: TestClient
) -> None:
    _warm(client)
    memo = _memo(client)
    first = _post(client, BODY)
    hits = memo.hits
    again = [_post(client, BODY) for _ in range(3)]
    assert memo.hits == hits + 3
    assert len(memo) == 1
    expected = _post(slow, BODY)
    for answer in (first, *again):
        assert answer.status_code == 200
        assert answer.content == expected.content
        assert answer.headers["content-type"] == expected.headers["content-type"]


def test_a_body_that_differs_by_one_byte_is_a_new_body(client: TestClient) -> None:
    _warm(client)
    memo = _memo(client)
    _post(client, BODY)
    spaced = BODY.replace(b'"tp": 4', b'"tp":  4')
    assert spaced != BODY
    misses = memo.misses
    same_request = _post(client, spaced)
    assert memo.misses == misses + 1
    assert same_request.content == _post(client, BODY).content
    other = copy.deepcopy(ESTIMATE_EXAMPLE)
    other["training"]["tokens"] = 1e12
    changed = _post(client, json.dumps(other).encode())
    assert changed.status_code == 200
    assert changed.json()["time"] != same_request.json()["time"]
    assert len(memo) == 3


def test_an_invalid_body_is_never_kept_and_always_refused(client: TestClient) -> None:
    _warm(client)
    memo = _memo(client)
    bad = copy.deepcopy(ESTIMATE_EXAMPLE)
    bad["parallelism"]["dp"] = 3
    raw = json.dumps(bad).encode()
    for _ in range(2):
        answer = _post(client, raw)
        assert answer.status_code == 422
        assert answer.headers["content-type"] == "application/problem+json"
    assert not memo.known(raw)


def test_a_repeated_key_is_refused_though_the_same_object_without_it_was_answered(
    client: TestClient,
) -> None:
    """The body-limit layer skips its duplicate-key check only for bytes the memo holds; a
    body that repeats a key is other bytes, so it is still checked and refused."""
    _warm(client)
    assert _post(client, BODY).status_code == 200
    assert _memo(client).known(BODY)
    repeated = BODY.replace(b'"tp": 4,', b'"tp": 4, "tp": 8,')
    answer = _post(client, repeated)
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["code"] == "duplicate_key"


def test_new_accelerator_specs_are_never_answered_from_the_memo(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worst honest case: the specs an answer read change under a warm memo. The next
    answer is computed from the new specs, not replayed."""
    _warm(client)
    before = _post(client, BODY)
    accelerators = client.app.state.accelerators  # type: ignore[attr-defined]
    generation = accelerators.generation
    original = accelerators._load

    def faster() -> dict[str, Any]:
        specs = original()
        spec = specs["h100-sxm5-80gb"]
        specs["h100-sxm5-80gb"] = dataclasses.replace(
            spec, peak_flops_per_s={k: v * 2 for k, v in spec.peak_flops_per_s.items()})
        return specs

    monkeypatch.setattr(accelerators, "_load", faster)
    accelerators._expire()
    _post(client, BODY)  # a stale cache goes to the route, which reloads the specs
    assert accelerators.generation == generation + 1
    after = _post(client, BODY)
    assert after.status_code == 200
    assert after.json()["time"]["step_s"] < before.json()["time"]["step_s"]


def test_reloading_the_same_specs_keeps_the_memo(client: TestClient) -> None:
    _warm(client)
    accelerators = client.app.state.accelerators  # type: ignore[attr-defined]
    generation = accelerators.generation
    accelerators._expire()
    accelerators.all()
    assert accelerators.generation == generation
    _post(client, BODY)
    hits = _memo(client).hits
    _post(client, BODY)
    assert _memo(client).hits == hits + 1


def test_no_entries_are_kept_when_the_memo_is_off(migrated_engine: Engine) -> None:
    for client in _app(migrated_engine, estimate_memo_entries=0):
        _warm(client)
        for _ in range(3):
            assert _post(client, BODY).status_code == 200
        assert len(_memo(client)) == 0
        assert _memo(client).hits == 0


def test_the_memo_is_bounded_in_entries_and_bytes() -> None:
    memo = EstimateMemo(max_entries=3, max_bytes=100, max_body_bytes=20)
    for i in range(5):
        memo.put(b"body-%d" % i, 1, 10.0, b"x" * 10)
    assert len(memo) == 3
    assert not memo.known(b"body-0")
    assert not memo.known(b"body-1")
    assert memo.get(b"body-4", 1, 10.0) == b"x" * 10
    assert memo.size_bytes == 3 * (6 + 10)
    memo.put(b"big", 1, 10.0, b"y" * 90)  # 93 bytes: the three others go
    assert len(memo) == 1
    assert memo.size_bytes == 93
    memo.put(b"b" * 21, 1, 10.0, b"z")  # a body over max_body_bytes is not kept
    assert not memo.known(b"b" * 21)
    memo.put(b"huge", 1, 10.0, b"w" * 200)  # an entry over max_bytes is not kept
    assert not memo.known(b"huge")
    assert memo.known(b"big")


def test_an_entry_is_used_only_with_the_generation_and_horizon_it_was_computed_with() -> None:
    memo = EstimateMemo()
    memo.put(b"body", 7, 3.0e7, b"answer")
    assert memo.get(b"body", 7, 3.0e7) == b"answer"
    assert memo.get(b"body", 8, 3.0e7) is None
    assert memo.get(b"body", 7, 6.0e7) is None
    assert (memo.hits, memo.misses) == (1, 2)
    memo.put(b"body", 8, 3.0e7, b"new answer")
    assert memo.get(b"body", 8, 3.0e7) == b"new answer"
    assert len(memo) == 1
    assert memo.size_bytes == len(b"body") + len(b"new answer")
