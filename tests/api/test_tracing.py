"""OpenTelemetry tracing: off by default, switched on by the standard OTEL_* variables; when on,
FastAPI, SQLAlchemy and httpx spans and ours (estimate, search, quote pricing) in one trace,
with the trace id in the log lines. Spans go to an in-memory exporter."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from service.api.deps import get_session
from service.api.observability import span
from service.api.schemas.estimate import ESTIMATE_EXAMPLE
from service.main import create_app, dispose
from service.settings import Settings
from tests.api.test_ui import FORM
from tests.json_logs import json_lines

Traced = tuple[TestClient, InMemorySpanExporter]


def _traced(engine: Engine, session: Session | None) -> Iterator[Traced]:
    exporter = InMemorySpanExporter()
    app = create_app(Settings(database_url=engine.url.render_as_string(hide_password=False)),
                     span_exporter=exporter)
    if session is not None:
        def session_override() -> Iterator[Session]:
            yield session
            session.flush()

        app.dependency_overrides[get_session] = session_override
    try:
        with TestClient(app, raise_server_exceptions=False) as client:
            yield client, exporter
    finally:
        dispose(app)  # flushes and uninstalls the process-wide instrumentation


@pytest.fixture
def reading(migrated_engine: Engine) -> Iterator[Traced]:
    """A traced app on its own engines (reads only: nothing is rolled back)."""
    yield from _traced(migrated_engine, None)


@pytest.fixture
def writing(migrated_engine: Engine, db_session: Session) -> Iterator[Traced]:
    """A traced app whose requests join the test's rolled-back transaction."""
    yield from _traced(migrated_engine, db_session)


def _named(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def _scope(span_: ReadableSpan) -> str:
    return span_.instrumentation_scope.name if span_.instrumentation_scope else ""


def _server_span(spans: tuple[ReadableSpan, ...], route: str) -> ReadableSpan:
    return _named(spans, route)


class TestTracingOn:
    def test_an_estimate_is_one_trace_from_the_client_to_its_span(
        self, reading: Traced
    ) -> None:
        client, exporter = reading
        with json_lines(logging.getLogger("service.access")) as lines:
            answer = client.post("/v1/estimates", json=ESTIMATE_EXAMPLE,
                                 headers={"X-Request-ID": "traced-1"})
        assert answer.status_code == 200, answer.text
        spans = exporter.get_finished_spans()
        server = _server_span(spans, "POST /v1/estimates")
        assert server.kind == SpanKind.SERVER
        assert server.attributes is not None
        assert server.attributes.get("http.route") == "/v1/estimates"
        estimate = _named(spans, "computequote.estimate")
        assert estimate.context is not None
        assert server.context is not None
        assert estimate.context.trace_id == server.context.trace_id
        assert estimate.parent is not None
        assert estimate.parent.span_id == server.context.span_id
        attributes = dict(estimate.attributes or {})
        assert attributes["computequote.accelerator"] == "h100-sxm5-80gb"
        assert attributes["computequote.num_gpus"] == 64
        assert attributes["computequote.plan"].startswith("tp4 pp4 dp2 cp2 ")  # type: ignore[union-attr]
        body = answer.json()
        assert attributes["computequote.estimate.fits"] is body["memory"]["fits"]
        assert attributes["computequote.estimate.train_s"] == pytest.approx(
            body["time"]["train_s"])
        # The access-log line names the trace.
        line = next(entry for entry in lines if entry["request_id"] == "traced-1")
        assert line["trace_id"] == f"{server.context.trace_id:032x}"
        assert len(line["span_id"]) == 16

    def test_the_portal_calls_the_api_in_the_same_trace(self, reading: Traced) -> None:
        """The portal's in-process httpx call is a client span; the API's server span, and the
        estimate's, are its children (the traceparent header went with the call)."""
        client, exporter = reading
        answer = client.post("/ui", data={**FORM, "action": "estimate"})
        assert answer.status_code == 200, answer.text[:500]
        spans = exporter.get_finished_spans()
        page = _server_span(spans, "POST /ui")
        outgoing = [s for s in spans if _scope(s).endswith(".httpx")]
        assert outgoing, [(s.name, _scope(s)) for s in spans]
        call = outgoing[0]
        assert call.kind == SpanKind.CLIENT
        assert call.parent is not None
        assert page.context is not None
        assert call.parent.span_id == page.context.span_id
        api = _server_span(spans, "POST /v1/estimates")
        assert api.parent is not None
        assert call.context is not None
        assert api.parent.span_id == call.context.span_id
        estimate = _named(spans, "computequote.estimate")
        assert estimate.context is not None
        assert estimate.context.trace_id == page.context.trace_id

    def test_sql_statements_of_a_request_are_its_children(self, reading: Traced) -> None:
        client, exporter = reading
        assert client.get("/v1/catalog/versions").status_code == 200
        spans = exporter.get_finished_spans()
        server = _server_span(spans, "GET /v1/catalog/versions")
        assert server.context is not None
        sql = [s for s in spans if _scope(s).endswith(".sqlalchemy")
               and s.context is not None and s.context.trace_id == server.context.trace_id]
        assert sql, [(s.name, _scope(s)) for s in spans]
        assert any("catalog" in str((s.attributes or {}).get("db.statement", "")).lower()
                   or "catalog" in str((s.attributes or {}).get("db.query.text", "")).lower()
                   for s in sql)

    def test_a_plan_search_span_carries_its_figures(self, reading: Traced) -> None:
        client, exporter = reading
        answer = client.post("/v1/parallelism-plans", json={
            "model": {"preset": "llama3.1-8b"},
            "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 8},
            "training": {"seq_len": 4096, "global_batch_seqs": 64, "tokens": 1e11}})
        assert answer.status_code == 200, answer.text
        spans = exporter.get_finished_spans()
        search = _named(spans, "computequote.search")
        server = _server_span(spans, "POST /v1/parallelism-plans")
        assert search.parent is not None
        assert server.context is not None
        assert search.parent.span_id == server.context.span_id
        attributes = dict(search.attributes or {})
        stats = answer.json()["search"]
        assert attributes["computequote.search.purpose"] == "plans"
        assert attributes["computequote.search.clusters"] == 1
        assert attributes["computequote.search.candidates_evaluated"] == \
            stats["candidates_evaluated"]
        assert attributes["computequote.search.truncated"] is False
        assert attributes["computequote.search.plans"] == len(answer.json()["plans"])

    def test_quote_pricing_has_its_span(
        self, writing: Traced, api_key: Callable[..., dict[str, str]]
    ) -> None:
        client, exporter = writing
        body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb",
                                           "gpu_hours": 1000, "num_gpus": 64}},
                "providers": ["lambda"], "deadline_s": 60.0}
        headers = {**api_key("quotes:write"), "Idempotency-Key": uuid.uuid4().hex}
        answer = client.post("/v1/quotes", json=body, headers=headers)
        assert answer.status_code == 201, answer.text
        quote = answer.json()
        pricing = _named(exporter.get_finished_spans(), "computequote.quote.price")
        attributes = dict(pricing.attributes or {})
        assert attributes["computequote.catalog_version"] == quote["catalog_version"]
        assert attributes["computequote.quote.offers"] >= 1  # type: ignore[operator]
        assert attributes["computequote.quote.verdict"] == quote["verdict"]


class TestTracingOff:
    def test_by_default_no_sdk_is_imported_nor_installed(self) -> None:
        """Off costs nothing: building the app imports no SDK, no instrumentation."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        code = ("import sys; from service.main import create_app, dispose; app = create_app(); "
                "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', "
                "'opentelemetry.instrumentation')))); "
                "print(getattr(app.state, 'tracer_provider', None)); dispose(app)")
        done = subprocess.run([sys.executable, "-c", code],  # noqa: S603 - our own code
                              env={**env, "CQ_WARM_UP": "0"},
                              capture_output=True, text=True, timeout=120, check=True)
        assert done.stdout.splitlines() == ["[]", "None"], done.stderr

    def test_a_global_provider_does_not_switch_fastapis_own_tracing_on(self) -> None:
        """One switch: FastAPI's native telemetry (which traces when a process-global provider
        is set, by someone's auto-instrumentation say) stays off."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        code = (
            "from opentelemetry import trace\n"
            "from opentelemetry.sdk.trace import TracerProvider\n"
            "from opentelemetry.sdk.trace.export import SimpleSpanProcessor\n"
            "from opentelemetry.sdk.trace.export.in_memory_span_exporter import "
            "InMemorySpanExporter\n"
            "exporter = InMemorySpanExporter(); provider = TracerProvider()\n"
            "provider.add_span_processor(SimpleSpanProcessor(exporter))\n"
            "trace.set_tracer_provider(provider)\n"
            "from fastapi.testclient import TestClient\n"
            "from service.main import create_app, dispose\n"
            "app = create_app()\n"
            "assert TestClient(app).get('/livez').status_code == 200\n"
            "print(len(exporter.get_finished_spans())); dispose(app)\n")
        done = subprocess.run([sys.executable, "-c", code],  # noqa: S603 - our own code
                              env={**env, "CQ_WARM_UP": "0"},
                              capture_output=True, text=True, timeout=120, check=True)
        assert done.stdout.splitlines()[-1] == "0", done.stderr

    def test_our_spans_are_a_shared_no_op_outside_a_traced_request(self) -> None:
        with span("computequote.estimate") as current:
            assert current is None
        assert span("a") is span("b")

    def test_an_untraced_app_answers_without_spans(self, client: TestClient) -> None:
        assert client.post("/v1/estimates", json=ESTIMATE_EXAMPLE).status_code == 200
        assert getattr(client.app.state, "tracer_provider", None) is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(("env", "exporter"), [
    ({}, None),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, "otlp"),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, "otlp"),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),
    ({"OTEL_TRACES_EXPORTER": "Console"}, "console"),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, None),
    ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None),
    # The specification: any value but "true" is false.
    ({"OTEL_SDK_DISABLED": "1", "OTEL_TRACES_EXPORTER": "otlp"}, "otlp"),
    ({"OTEL_TRACES_EXPORTER": "", "OTEL_EXPORTER_OTLP_ENDPOINT": ""}, None),
])
def test_the_switch_follows_the_otel_variables(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], exporter: str | None
) -> None:
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert Settings().traces_exporter == exporter


@pytest.mark.parametrize(("name", "value", "says"), [
    ("OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "only http/protobuf"),
])
def test_an_exporter_the_service_does_not_ship_fails_at_start_up(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=says):
        Settings()
