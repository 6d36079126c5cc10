"""A small asyncio HTTP/1.1 load generator for what wrk cannot do.

wrk (Debian's 4.1) is closed-loop only and reports one latency distribution for every status;
wrk2's fixed-rate mode is not packaged. Two figures need more:

- open loop at a fixed rate (quotes): requests are sent on a schedule whatever the server does,
  and latency runs from the scheduled time, so a slow server cannot hide its queue
  ("coordinated omission", Tene 2015);
- latency by status under overload: accepted (2xx) and shed (503) requests separately.

Raw streams rather than an HTTP library keep the generator's own CPU cost low.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass
class Sample:
    status: int  # 0: connection error
    latency_s: float
    body: bytes = b""


@dataclass
class Recorder:
    samples: list[Sample] = field(default_factory=list)

    def by_status(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for s in self.samples:
            counts[s.status] = counts.get(s.status, 0) + 1
        return dict(sorted(counts.items()))

    def latencies(self, accept: Callable[[int], bool]) -> list[float]:
        return sorted(s.latency_s for s in self.samples if accept(s.status))


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


class Connection:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes | None = None,
                      headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        for name, value in (headers or {}).items():
            lines.append(f"{name}: {value}")
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        close = False
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        payload = await self.reader.readexactly(length) if length else b""
        if close:
            await self.close()
        return status, payload

    async def status_of(self, method: str, path: str, body: bytes | None) -> int:
        """The answer's status, or 0 when the connection failed (it is then closed)."""
        try:
            status, _ = await self.request(method, path, body)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            await self.close()
            return 0
        return status

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None


async def closed_loop(base_url: str, method: str, path: str, body: bytes | None,
                      connections: int, duration_s: float) -> Recorder:
    """``connections`` clients, each sending its next request when the last one answers."""
    recorder = Recorder()
    stop_at = time.perf_counter() + duration_s

    async def client() -> None:
        conn = Connection(base_url)
        while time.perf_counter() < stop_at:
            start = time.perf_counter()
            status = await conn.status_of(method, path, body)
            recorder.samples.append(Sample(status, time.perf_counter() - start))
        await conn.close()

    await asyncio.gather(*(client() for _ in range(connections)))
    return recorder


async def open_loop(base_url: str, rate_per_s: float, duration_s: float,
                    make_request: Callable[[int], tuple[str, str, bytes, dict[str, str]]],
                    timeout_s: float = 30.0) -> Recorder:
    """Request ``i`` is sent at ``start + i / rate`` on its own connection, whatever the server
    is doing; its latency counts from that scheduled time."""
    recorder = Recorder()
    start = time.perf_counter()
    total = int(rate_per_s * duration_s)

    async def one(i: int, scheduled: float) -> None:
        method, path, body, headers = make_request(i)
        conn = Connection(base_url)
        try:
            status, payload = await asyncio.wait_for(
                conn.request(method, path, body, {**headers, "Connection": "close"}), timeout_s)
        except (OSError, asyncio.IncompleteReadError, ValueError, TimeoutError):
            status, payload = 0, b""
        finally:
            await conn.close()
        recorder.samples.append(Sample(status, time.perf_counter() - scheduled, payload))

    tasks = []
    for i in range(total):
        scheduled = start + i / rate_per_s
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, scheduled)))
    await asyncio.gather(*tasks)
    return recorder


async def probe_until_recovered(base_url: str, method: str, path: str, body: bytes | None,
                                baseline_p50_s: float, *, factor: float = 2.0,
                                window: int = 10, limit_s: float = 30.0) -> float:
    """Seconds until ``window`` consecutive sequential requests all answer 2xx with a median
    within ``factor`` x the pre-load median."""
    conn = Connection(base_url)
    start = time.perf_counter()
    recent: list[float] = []
    try:
        while time.perf_counter() - start < limit_s:
            t0 = time.perf_counter()
            status = await conn.status_of(method, path, body)
            took = time.perf_counter() - t0
            recent = [*recent, took][-window:] if 200 <= status < 300 else []
            if len(recent) == window and sorted(recent)[window // 2] <= factor * baseline_p50_s:
                return time.perf_counter() - start
            await asyncio.sleep(0.02)
    finally:
        await conn.close()
    return float("inf")


def dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
