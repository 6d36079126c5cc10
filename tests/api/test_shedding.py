"""Load shedding: past CQ_MAX_IN_FLIGHT requests a replica answers 503 at once; probes pass."""

from __future__ import annotations

import asyncio

import httpx
from starlette.types import Receive, Scope, Send

from service.api.problems import PROBLEM_MEDIA_TYPE
from service.api.shedding import GRACE_S, LoadSheddingMiddleware


class _SlowApp:
    """Holds every request until released; counts how many it saw."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.served = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] != "/livez":
            await self.release.wait()
        self.served += 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


def test_the_excess_is_shed_at_once_and_probes_pass() -> None:
    async def scenario() -> None:
        inner = _SlowApp()
        shed: list[int] = []
        app = LoadSheddingMiddleware(inner, max_in_flight=3, on_shed=lambda: shed.append(1))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            held = [asyncio.create_task(client.post("/v1/estimates")) for _ in range(3)]
            await asyncio.sleep(0.05)
            assert app.in_flight == 3
            # Replica full: these are answered without waiting for the held ones.
            excess = await asyncio.wait_for(
                asyncio.gather(*[client.post("/v1/estimates") for _ in range(5)]), timeout=2)
            assert [r.status_code for r in excess] == [503] * 5
            assert excess[0].headers["content-type"] == PROBLEM_MEDIA_TYPE
            assert excess[0].headers["retry-after"] == "1"
            assert "CQ_MAX_IN_FLIGHT" in excess[0].json()["detail"]
            assert len(shed) == 5
            probe = await client.get("/livez")
            assert probe.status_code == 200
            inner.release.set()
            assert [r.status_code for r in await asyncio.gather(*held)] == [200] * 3
            assert app.in_flight == 0
            again = await client.post("/v1/estimates")
            assert again.status_code == 200
            assert inner.served == 5  # 3 held, the probe, and the one after

    asyncio.run(scenario())


def test_a_slot_freed_within_the_grace_is_taken_not_shed() -> None:
    async def scenario() -> None:
        inner = _SlowApp()
        app = LoadSheddingMiddleware(inner, max_in_flight=1)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            first = asyncio.create_task(client.post("/v1/estimates"))
            await asyncio.sleep(0.01)
            second = asyncio.create_task(client.post("/v1/estimates"))
            await asyncio.sleep(GRACE_S / 4)
            inner.release.set()  # the first leaves while the second waits in its grace
            assert (await first).status_code == 200
            assert (await second).status_code == 200
            assert app.in_flight == 0

    asyncio.run(scenario())


def test_an_in_process_inner_call_does_not_take_a_second_slot() -> None:
    """The portal calls the API through the same middleware (httpx's ASGITransport, in the
    same task). With one slot, the outer request holds it; its inner call must not be shed
    (issue 14: each portal request held two slots, so 16 portal users filled 32)."""

    async def scenario() -> None:
        middleware: LoadSheddingMiddleware

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            status = 200
            if scope["path"] == "/ui":
                async with httpx.AsyncClient(transport=httpx.ASGITransport(app=middleware),
                                             base_url="http://t") as inner:
                    status = (await inner.post("/v1/estimates")).status_code
                    assert middleware.in_flight == 1  # still only the outer request's slot
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        middleware = LoadSheddingMiddleware(app, max_in_flight=1)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=middleware),
                                     base_url="http://t") as client:
            assert (await client.post("/ui")).status_code == 200
            assert middleware.in_flight == 0
            # Separate clients still count: the slot is free again for the next request.
            assert (await client.post("/v1/estimates")).status_code == 200

    asyncio.run(scenario())
