"""Scale-out on one machine: two uvicorn processes share one PostgreSQL database. Migrations
run once; quotes made through one process are read back through the other."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest
from sqlalchemy.orm import Session

from service.catalog.db import make_engine
from service.catalog.keys import create_key
from service.catalog.migrate import main as migrate_main
from service.settings import Settings
from tests.live_server import STARTUP_WAIT_S


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def replica(url: str) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "CQ_DATABASE_URL": url, "CQ_LOG_LEVEL": "warning"}
    process = subprocess.Popen(  # noqa: S603 - fixed arguments
        [sys.executable, "-m", "uvicorn", "--factory", "service.main:create_app",
         "--host", "127.0.0.1", "--port", str(port), "--no-access-log"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_WAIT_S
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError(f"replica on {port} did not become ready")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.mark.postgres
def test_two_processes_share_quotes(
    database_url_factory: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url = database_url_factory("postgres")
    monkeypatch.setenv("CQ_DATABASE_URL", url)
    assert migrate_main([]) == 0  # once, before any replica starts
    engine = make_engine(url)
    with Session(engine) as session:
        _, key = create_key(session, name="scale", scopes=["quotes:write"],
                            pepper=Settings().api_key_pepper.get_secret_value())
        session.commit()
    engine.dispose()
    body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 5000,
                                       "num_gpus": 64}}, "providers": ["lambda", "nebius"]}
    with replica(url) as first, replica(url) as second:
        made: dict[str, tuple[str, bytes]] = {}
        for i in range(6):
            base = (first, second)[i % 2]
            response = httpx.post(f"{base}/v1/quotes", json=body, timeout=30, headers={
                "Authorization": f"Bearer {key}", "Idempotency-Key": uuid.uuid4().hex})
            assert response.status_code == 201, response.text
            made[response.json()["id"]] = (base, response.content)
        for quote_id, (maker, content) in made.items():
            other = second if maker == first else first
            fetched = httpx.get(f"{other}/v1/quotes/{quote_id}", timeout=30,
                                headers={"Authorization": f"Bearer {key}"})
            assert fetched.status_code == 200
            assert fetched.content == content
        # The same key through the other replica replays, never a second quote.
        headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": "shared-key"}
        a = httpx.post(f"{first}/v1/quotes", json=body, headers=headers, timeout=30)
        b = httpx.post(f"{second}/v1/quotes", json=body, headers=headers, timeout=30)
        assert a.status_code == b.status_code == 201
        assert b.headers["idempotent-replayed"] == "true"
        assert a.content == b.content
