"""Server CPU per request without the network: ``python -m benchmarks.asgi_cpu``.

Drives the real application (every middleware, routing, dependencies, the model, the
serialisation) through its ASGI interface in one event loop, and beside it the bare FastAPI
app of ``benchmarks/load/bare_app.py``, the same number of times in the same run. What uvicorn
adds (HTTP parsing, the socket) is the same for both and is left out, so the figures isolate
what this service adds to each request. ``--profile PATH`` writes a cProfile of the service
requests (read it with ``python -m pstats PATH``; ``benchmarks/profile.md`` summarises one).

Scenarios: ``estimates`` (the documented example body, sent again and again: after the first
it is answered from the estimate memo), ``estimates-varied`` (the same body with a random
``training.tokens`` per request, so the memo never hits), ``serving-varied`` (the documented
serving estimate at a random ``traffic.requests_per_s``), ``offers`` (the load benchmark's
filtered page, warm page cache), ``offers-cold`` (the same page built every time),
``quotes`` (the load benchmark's quote, unique Idempotency-Keys), ``quotes-varied`` (the
same quote with a different ``gpu_hours`` on every request, so that no line's figures repeat
and the caches of repeated work miss), and ``quotes-whole`` and ``quotes-whole-varied`` (the
same two over the whole catalogue: no provider or term filter). All run on a fresh SQLite
database, or on PostgreSQL with ``--database-url`` (an empty database).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from benchmarks.load.run import OFFERS_PATH, QUOTE_BODY
from service.api.schemas.estimate import ESTIMATE_EXAMPLE
from service.api.schemas.serving import SERVING_EXAMPLE

Asgi = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


async def call(app: Asgi, method: str, path: str, body: bytes = b"",
               headers: tuple[tuple[bytes, bytes], ...] = ()) -> tuple[int, bytes]:
    """One request through ``app``; returns the status and the body."""
    raw_path, _, query = path.partition("?")
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1", "method": method, "scheme": "http", "path": raw_path,
        "raw_path": raw_path.encode(), "query_string": query.encode(), "root_path": "",
        "headers": [(b"host", b"bench"), (b"content-length", str(len(body)).encode()),
                    (b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000), "state": {},
    }
    sent = False
    status = 0
    chunks: list[bytes] = []
    disconnected = asyncio.Event()

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await disconnected.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    disconnected.set()
    return status, b"".join(chunks)


async def measure(app: Asgi, method: str, path: str, body: bytes | Callable[[], bytes],
                  count: int, headers: tuple[tuple[bytes, bytes], ...] = (),
                  fresh_key: bool = False, before: Callable[[], None] | None = None,
                  ) -> tuple[list[float], int, int]:
    """Process CPU seconds per request for ``count`` sequential requests, in batches
    (``before`` runs ahead of each request, inside the measurement; a callable ``body``
    makes each request's body, outside it)."""
    per_request: list[float] = []
    status = 0
    size = 0
    batch = max(1, count // 20)
    for _ in range(0, count, batch):
        bodies = [body() if callable(body) else body for _ in range(batch)]
        started = time.process_time()
        for content in bodies:
            extra = headers
            if before is not None:
                before()
            if fresh_key:
                extra = (*headers, (b"idempotency-key", uuid.uuid4().hex.encode()))
            status, answer = await call(app, method, path, content, extra)
            size = len(answer)
        per_request.append((time.process_time() - started) / batch)
    return per_request, status, size


def service_app(database_url: str) -> tuple[Asgi, str]:
    """The real app on a migrated, seeded database, with an API key for the catalogue."""
    os.environ.update({"CQ_DATABASE_URL": database_url, "CQ_SEARCH_WORKERS": "0",
                       "CQ_LOG_LEVEL": "warning"})
    from service.main import create_app
    from service.settings import Settings
    from tests.factories import seeded_database_with_key

    key = seeded_database_with_key(database_url, name=f"asgi-cpu-{uuid.uuid4().hex[:8]}",
                                   scopes=["quotes:write", "quotes:read", "catalog:read"])
    return create_app(Settings()), key


def database_pids(url: str) -> list[int] | None:
    """The PostgreSQL server processes serving ``url``'s database (the service's pooled
    connections and its change listener), if their ``/proc`` entries can be read here."""
    if not url.startswith("postgresql"):
        return None
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            pids = list(conn.execute(text(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()")).scalars())
    finally:
        engine.dispose()
    return pids if pids and all(Path(f"/proc/{pid}/stat").exists() for pid in pids) else None


def processes_cpu_s(pids: list[int]) -> float:
    """utime + stime of ``pids`` in seconds (processes gone since count nothing)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


WHOLE_CATALOGUE_QUOTE: dict[str, Any] = {
    key: value for key, value in QUOTE_BODY.items() if key not in ("providers", "terms")}
"""The load benchmark's quote over the whole catalogue: every provider and every term (issue
16's quote target is "over the whole catalogue"; the seed gives 274 lines, against
``QUOTE_BODY``'s 197)."""


def varied_quote(base: dict[str, Any] | None = None) -> bytes:
    """The load benchmark's quote (or ``base``) with a random workload size: every line's
    figures new."""
    body = json.loads(json.dumps(QUOTE_BODY if base is None else base))
    body["workload"]["gpu_hours"]["gpu_hours"] = random.randint(10_000, 2_000_000)
    return json.dumps(body).encode()


def varied_whole_quote() -> bytes:
    return varied_quote(WHOLE_CATALOGUE_QUOTE)


def varied_estimate() -> bytes:
    """The documented estimate with a random token count: a body the estimate memo has not
    seen, so the request is parsed, validated, modelled and serialised."""
    body = json.loads(json.dumps(ESTIMATE_EXAMPLE))
    body["training"]["tokens"] = random.randint(10**9, 10**13)
    return json.dumps(body).encode()


def varied_serving() -> bytes:
    """The documented serving estimate at a random request rate: every answer new."""
    body = json.loads(json.dumps(SERVING_EXAMPLE))
    body["traffic"]["requests_per_s"] = round(random.uniform(0.5, 40.0), 3)
    return json.dumps(body).encode()


def run_thread_work_inline() -> None:
    """Run what FastAPI hands to the thread pool in the calling thread, so that a cProfile
    of the event loop's thread sees it (the CPU figures are then single-threaded too)."""
    import anyio.to_thread

    async def inline(func: Callable[..., Any], *args: Any, **_: Any) -> Any:
        return func(*args)

    anyio.to_thread.run_sync = inline  # type: ignore[assignment]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.load.bare_app import app as bare

    if args.profile:
        run_thread_work_inline()

    url = args.database_url or f"sqlite:///{tempfile.mkdtemp()}/asgi_cpu.sqlite"
    app, key = service_app(url)
    auth = ((b"authorization", f"Bearer {key}".encode()),)
    scenarios: dict[str, tuple[Any, ...]] = {
        "estimates": ("POST", "/v1/estimates", json.dumps(ESTIMATE_EXAMPLE).encode(), (), False,
                      "POST", "/bare-async", b'{"a": 1}'),
        "estimates-varied": ("POST", "/v1/estimates", varied_estimate, (), False,
                             "POST", "/bare-async", b'{"a": 1}'),
        "serving-varied": ("POST", "/v1/serving-estimates", varied_serving, (), False,
                           "POST", "/bare-async", b'{"a": 1}'),
        "offers": ("GET", OFFERS_PATH, b"", auth, False, "GET", "/bare-async", b""),
        "offers-cold": ("GET", OFFERS_PATH, b"", auth, False, "GET", "/bare-async", b""),
        "quotes": ("POST", "/v1/quotes", json.dumps(QUOTE_BODY).encode(), auth, True,
                   "POST", "/bare-async", b'{"a": 1}'),
        "quotes-varied": ("POST", "/v1/quotes", varied_quote, auth, True,
                          "POST", "/bare-async", b'{"a": 1}'),
        "quotes-whole": ("POST", "/v1/quotes", json.dumps(WHOLE_CATALOGUE_QUOTE).encode(), auth,
                         True, "POST", "/bare-async", b'{"a": 1}'),
        "quotes-whole-varied": ("POST", "/v1/quotes", varied_whole_quote, auth, True,
                                "POST", "/bare-async", b'{"a": 1}'),
    }
    report: dict[str, Any] = {"database": url.split(":")[0]}
    async with app.router.lifespan_context(app):
        for name in args.scenarios:
            method, path, body, headers, fresh, bare_method, bare_path, bare_body = \
                scenarios[name]
            count = (args.count if name in ("estimates", "estimates-varied", "serving-varied",
                                            "offers")
                     else max(20, args.count // 20))
            # offers-cold: every request builds its page (the page cache is emptied first).
            before = app.state.offer_pages._pages.clear if name == "offers-cold" else None
            await measure(app, method, path, body, max(5, count // 10), headers, fresh, before)
            await measure(bare, bare_method, bare_path, bare_body, count // 10)
            profiler = cProfile.Profile() if args.profile else None
            if profiler:
                profiler.enable()
            pids = database_pids(url)
            database_before = processes_cpu_s(pids) if pids else 0.0
            service, status, size = await measure(app, method, path, body, count, headers,
                                                  fresh, before)
            database_ms = ((processes_cpu_s(pids) - database_before) / count * 1e3
                           if pids else None)
            if profiler:
                profiler.disable()
                profiler.dump_stats(f"{args.profile}.{name}")
            baseline, _, _ = await measure(bare, bare_method, bare_path, bare_body, count)
            service_ms = statistics.median(service) * 1e3
            bare_ms = statistics.median(baseline) * 1e3
            report[name] = {"status": status, "response_bytes": size,
                            "service_cpu_ms": round(service_ms, 3),
                            "bare_async_cpu_ms": round(bare_ms, 3),
                            "ratio_bare_over_service": round(bare_ms / service_ms, 3),
                            "database_cpu_ms": (None if database_ms is None
                                                else round(database_ms, 3))}
            database = "" if database_ms is None else f"  database {database_ms:6.3f} ms CPU"
            print(f"{name:19s} status {status}  {size:>7d} B  service {service_ms:7.3f} ms CPU"
                  f"  bare async {bare_ms:6.3f} ms  bare/service {bare_ms / service_ms:5.3f}"
                  f"{database}")
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO",
                        help="estimates, estimates-varied, serving-varied, offers, "
                             "offers-cold, quotes, "
                             "quotes-varied, quotes-whole, quotes-whole-varied (default: "
                             "estimates, offers, offers-cold, quotes)")
    parser.add_argument("--count", type=int, default=2000, help="requests per scenario")
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--profile", type=Path, default=None,
                        help="write cProfile stats to PATH.<scenario>")
    args = parser.parse_args(argv)
    unknown = set(args.scenarios) - {"estimates", "estimates-varied", "serving-varied",
                                     "offers", "offers-cold",
                                     "quotes", "quotes-varied", "quotes-whole",
                                     "quotes-whole-varied"}
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    args.scenarios = args.scenarios or ["estimates", "offers", "offers-cold", "quotes"]
    print(json.dumps(asyncio.run(run(args))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
