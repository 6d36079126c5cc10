"""Every numeric field of every documented request body, given NaN, ±Infinity, 1e400, -1, 0,
10**18, a numeric string or a boolean: the answer is a 4xx problem naming the field (or, for
0 and 10**18 where the field allows them, a success), never a 500."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.schemas.estimate import ESTIMATE_EXAMPLE
from service.api.schemas.plans import PLAN_SEARCH_EXAMPLE, SWEEP_EXAMPLE
from service.api.schemas.quotes import BUDGET_PLAN_EXAMPLE, QUOTE_EXAMPLE

MARK = "__BAD__"
ALWAYS_BAD = ["NaN", "Infinity", "-Infinity", "1e400", '"8"', "true", "-1"]
MAYBE_FINE = ["0", str(10**18)]
GPU_HOURS_QUOTE = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb",
                                              "gpu_hours": 1000, "num_gpus": 64,
                                              "checkpoint_bytes": 1e11}},
                   "providers": ["lambda"], "deadline_s": 86400.0,
                   "reliability": {"restart_s": 600.0, "failure_rate_per_gpu_hour": 2e-5,
                                   "checkpoint_bytes_per_s": 1e10}}
OPTIMISE_EXTRAS = {"constraints": {"max_tp": 8, "memory_headroom_fraction": 0.1,
                                   "max_train_s": 1e8}, "top_k": 3,
                   "energy": {"pue": 1.2, "grid_gco2e_per_kwh": 400.0,
                              "gpu_power_fraction": 0.8, "host_power_fraction": 0.4}}
BODIES: dict[str, list[dict[str, Any]]] = {
    "/v1/estimates": [ESTIMATE_EXAMPLE],
    "/v1/parallelism-plans": [{**PLAN_SEARCH_EXAMPLE, **OPTIMISE_EXTRAS}, SWEEP_EXAMPLE],
    "/v1/quotes": [QUOTE_EXAMPLE, GPU_HOURS_QUOTE],
    "/v1/budget-plans": [BUDGET_PLAN_EXAMPLE],
}


def numeric_paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(node, bool):
        return
    if isinstance(node, int | float):
        yield prefix
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from numeric_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from numeric_paths(value, (*prefix, index))


def cases() -> Iterator[tuple[str, int, tuple[Any, ...]]]:
    for path, bodies in BODIES.items():
        for index, body in enumerate(bodies):
            for field in numeric_paths(body):
                yield path, index, field


def with_bad(body: dict[str, Any], field: tuple[Any, ...], raw: str) -> str:
    bad = copy.deepcopy(body)
    node: Any = bad
    for part in field[:-1]:
        node = node[part]
    node[field[-1]] = MARK
    return json.dumps(bad).replace(f'"{MARK}"', raw)


@pytest.fixture
def post(client: TestClient, api_key: Callable[..., dict[str, str]]) -> Callable[..., Any]:
    headers = {**api_key("quotes:write"), "Content-Type": "application/json"}

    def send(path: str, content: str) -> Any:
        return client.post(path, content=content,
                           headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
    return send


@pytest.mark.parametrize(("path", "index", "field"), list(cases()),
                         ids=lambda v: ".".join(map(str, v)) if isinstance(v, tuple) else str(v))
def test_bad_numbers_are_named_4xx_problems(
    post: Callable[..., Any], path: str, index: int, field: tuple[Any, ...]
) -> None:
    body = BODIES[path][index]
    name = ".".join(str(p) for p in field)
    for raw in ALWAYS_BAD + MAYBE_FINE:
        response = post(path, with_bad(body, field, raw))
        assert response.status_code < 500, (raw, name, response.text[:300])
        if raw in MAYBE_FINE and response.status_code < 400:
            continue
        assert 400 <= response.status_code < 500, (raw, name, response.status_code)
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        named = [e["field"] for e in problem.get("errors", [])] + [problem.get("field")]
        if response.status_code == 422 and raw in ALWAYS_BAD:
            assert any(n and (n == name or n.startswith(name + ".")) for n in named), (
                raw, name, named)
