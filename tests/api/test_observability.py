"""Request ids, JSON access logs and Prometheus metrics."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.observability import JsonFormatter, Metrics, RequestContextMiddleware
from tests.api.test_estimates import assert_problem
from tests.json_logs import json_lines


def test_a_well_formed_request_id_is_echoed_in_the_header_and_problem(
    client: TestClient,
) -> None:
    response = client.get("/v1/offers/off_000000000000000000000000",
                          headers={"X-Request-ID": "trace-123.abc"})
    problem = assert_problem(response, 404)
    assert response.headers["x-request-id"] == "trace-123.abc"
    assert problem["request_id"] == "trace-123.abc"


@pytest.mark.parametrize("given", ["", "has space", "x" * 65, "ünïcode", "a;DROP"])
def test_a_malformed_request_id_is_replaced(client: TestClient, given: str) -> None:
    response = client.get("/livez", headers={"X-Request-ID": given.encode("utf-8")})  # type: ignore[dict-item]
    made = response.headers["x-request-id"]
    assert made != given
    assert len(made) == 32
    int(made, 16)


def test_one_json_log_line_per_request_with_the_route_template(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="service.access"):
        client.get("/v1/accelerators/h100-sxm5-80gb", headers={
            "X-Request-ID": "req-1", "Authorization": "Bearer cq_secret_should_not_appear"})
    records = [r for r in caplog.records if r.name == "service.access"]
    assert len(records) == 1
    line = json.loads(JsonFormatter().format(records[0]))
    assert line["request_id"] == "req-1"
    assert line["route"] == "/v1/accelerators/{accelerator_id}"
    assert line["status"] == 200
    assert line["duration_ms"] >= 0
    assert "cq_secret" not in json.dumps(line)


def test_metrics_count_requests_by_route_and_status(client: TestClient) -> None:
    client.get("/v1/accelerators/h100-sxm5-80gb")
    client.get("/v1/accelerators/nope")
    text = client.get("/metrics").text
    assert ('computequote_http_requests_total{method="GET",'
            'route="/v1/accelerators/{accelerator_id}",status="200"} 1.0') in text
    assert ('computequote_http_requests_total{method="GET",'
            'route="/v1/accelerators/{accelerator_id}",status="404"} 1.0') in text
    assert "computequote_http_request_duration_seconds_bucket" in text


def test_metrics_count_quotes_rejections_and_candidates(
    client: TestClient, api_key: Callable[..., dict[str, str]]
) -> None:
    body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 1000,
                                       "num_gpus": 64}},
            "providers": ["lambda"], "deadline_s": 60.0}
    headers = {**api_key("quotes:write"), "Idempotency-Key": uuid.uuid4().hex}
    assert client.post("/v1/quotes", json=body, headers=headers).status_code == 201
    assert client.post("/v1/quotes", json=body, headers=headers).status_code == 201  # replay
    client.post("/v1/parallelism-plans", json={
        "model": {"preset": "llama3.1-8b"}, "cluster": {"accelerator": "h100-sxm5-80gb",
                                                        "num_gpus": 8},
        "training": {"seq_len": 4096, "global_batch_seqs": 64, "tokens": 1e11}})
    text = client.get("/metrics").text
    assert "computequote_quotes_created_total 1.0" in text
    assert "computequote_budget_rejections_total 1.0" in text
    evaluated = next(line for line in text.splitlines()
                     if line.startswith("computequote_optimiser_candidates_evaluated_total "))
    assert float(evaluated.split()[1]) > 100


def _samples(text: str, name: str) -> dict[str, float]:
    """Label set (as written) -> value, for the samples named ``name``."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")):
            labels, _, value = line[len(name):].rpartition(" ")
            found[labels] = float(value)
    return found


class TestMetricNames:
    def test_ours_are_prefixed_with_units_and_the_standard_collectors_are_there(
        self, client: TestClient
    ) -> None:
        client.get("/livez")
        text = client.get("/metrics").text
        families = dict(line.split()[2:4] for line in text.splitlines()
                        if line.startswith("# TYPE "))
        ours = {name: kind for name, kind in families.items()
                if not name.startswith(("process_", "python_"))}
        assert ours
        for name, kind in ours.items():
            assert name.startswith("computequote_"), name
            assert kind in ("counter", "histogram"), name  # no _created gauges
            if kind == "counter":
                assert name.endswith("_total"), name
            if kind == "histogram":
                assert name.endswith("_seconds"), name
        for standard in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                         "python_gc_collections_total", "python_gc_objects_collected_total",
                         "python_info"):
            assert any(line.startswith(standard) for line in text.splitlines()), standard


class TestHistogramsAndCaches:
    def test_a_plan_search_is_timed_with_its_outcome(self, client: TestClient) -> None:
        ok = client.post("/v1/parallelism-plans", json={
            "model": {"preset": "llama3.1-8b"},
            "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 8},
            "training": {"seq_len": 4096, "global_batch_seqs": 64, "tokens": 1e11}})
        assert ok.status_code == 200, ok.text
        nothing_fits = client.post("/v1/parallelism-plans", json={
            "model": {"preset": "llama3.1-405b"},
            "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 8},
            "training": {"seq_len": 8192, "global_batch_seqs": 64, "tokens": 1e11}})
        assert nothing_fits.status_code == 422, nothing_fits.text
        counts = _samples(client.get("/metrics").text,
                          "computequote_search_duration_seconds_count")
        assert counts['{outcome="ok",purpose="plans"}'] == 1
        assert counts['{outcome="no_plan",purpose="plans"}'] == 1
        sums = _samples(client.get("/metrics").text, "computequote_search_duration_seconds_sum")
        assert sums['{outcome="ok",purpose="plans"}'] > 0

    def test_quote_pricing_and_its_sizing_searches_are_timed(
        self, client: TestClient, api_key: Callable[..., dict[str, str]]
    ) -> None:
        body = {"workload": {"optimise": {
                    "model": {"preset": "llama3.1-8b"},
                    "training": {"seq_len": 4096, "global_batch_seqs": 64, "tokens": 1e11},
                    "clusters": [{"accelerator": "h100-sxm5-80gb", "num_gpus": 8}]}},
                "providers": ["lambda"]}
        headers = {**api_key("quotes:write"), "Idempotency-Key": uuid.uuid4().hex}
        answer = client.post("/v1/quotes", json=body, headers=headers)
        assert answer.status_code == 201, answer.text
        text = client.get("/metrics").text
        assert _samples(text, "computequote_quote_pricing_duration_seconds_count") == {"": 1}
        assert _samples(text, "computequote_quote_pricing_duration_seconds_sum")[""] > 0
        sizing = _samples(text, "computequote_search_duration_seconds_count")
        assert sizing['{outcome="ok",purpose="sizing"}'] == 1

    def test_cache_hits_and_misses_are_counted_per_cache(self, client: TestClient) -> None:
        def counts() -> tuple[dict[str, float], dict[str, float]]:
            text = client.get("/metrics").text
            return (_samples(text, "computequote_cache_hits_total"),
                    _samples(text, "computequote_cache_misses_total"))

        client.get("/v1/accelerators/h100-sxm5-80gb")
        hits, misses = counts()
        for cache in ("accelerators", "offer_pages", "quote_offers", "catalog_state"):
            assert f'{{cache="{cache}"}}' in hits
            assert f'{{cache="{cache}"}}' in misses
        assert misses['{cache="accelerators"}'] >= 1  # the first read went to the database
        for _ in range(3):
            client.post("/v1/estimates", json={
                "model": {"preset": "llama3.1-8b"},
                "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 8},
                "training": {"seq_len": 4096, "global_batch_seqs": 64, "tokens": 1e11}})
        after_hits, after_misses = counts()
        assert after_hits['{cache="accelerators"}'] >= hits['{cache="accelerators"}'] + 3
        assert after_misses['{cache="accelerators"}'] == misses['{cache="accelerators"}']


class TestLogContext:
    """Lines written while a request is in flight name it, even the server's own line about
    an exception the app raised (written after the middleware has returned)."""

    @staticmethod
    def _app(log: logging.Logger) -> Any:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            log.warning("inside")
            if scope["path"] == "/boom":
                raise RuntimeError("boom")
            await send({"type": "http.response.start", "status": 204, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        return RequestContextMiddleware(app, metrics=Metrics())

    def test_lines_carry_the_request_id(self) -> None:
        log = logging.getLogger("tests.log_context")
        log.propagate = False
        app = self._app(log)

        async def server(path: str) -> None:
            """What uvicorn does: run the app, log what escapes it."""
            scope = {"type": "http", "method": "GET", "path": path,
                     "headers": [(b"x-request-id", path.strip("/").encode())]}

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": b""}

            async def send(_message: Any) -> None:
                return None

            try:
                await app(scope, receive, send)
            except RuntimeError:
                log.exception("Exception in ASGI application")

        async def both() -> None:
            # Each request in its own task, as servers run them.
            await asyncio.gather(server("/fine"), server("/boom"))

        with json_lines(log) as lines:
            asyncio.run(both())
            log.warning("outside")
        by_message = {(line["message"], line.get("request_id")) for line in lines}
        assert ("inside", "fine") in by_message
        assert ("inside", "boom") in by_message
        assert ("Exception in ASGI application", "boom") in by_message
        outside = next(line for line in lines if line["message"] == "outside")
        assert "request_id" not in outside
        assert "trace_id" not in outside
        failed = next(line for line in lines
                      if line["message"] == "Exception in ASGI application")
        assert "RuntimeError: boom" in failed["exception"]


def test_request_metrics_stay_exact_past_the_label_shortcut_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The middleware keeps a shortcut to each labelled child; when the shortcut table is
    full it starts again, and every request is still counted once, under its own labels."""
    from service.api import observability

    monkeypatch.setattr(observability, "MAX_LABEL_SETS", 4)
    metrics = Metrics()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": int(scope["path"][1:]),
                    "headers": []})
        await send({"type": "http.response.body", "body": b""})

    layer = RequestContextMiddleware(app, metrics=metrics)

    async def call(status: int) -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def send(_message: Any) -> None:
            return None

        await layer({"type": "http", "method": "GET", "path": f"/{status}", "headers": []},
                    receive, send)

    statuses = [200, 201, 204, 400, 404, 409, 422, 200, 404, 200]

    async def run() -> None:
        for status in statuses:
            await call(status)

    asyncio.run(run())
    assert len(layer._children) <= 4
    for status in set(statuses):
        counted = metrics.registry.get_sample_value(
            "computequote_http_requests_total",
            {"method": "GET", "route": "unmatched", "status": str(status)})
        assert counted == statuses.count(status), status
    observed = metrics.registry.get_sample_value(
        "computequote_http_request_duration_seconds_count", {"method": "GET", "route": "unmatched"})
    assert observed == len(statuses)
