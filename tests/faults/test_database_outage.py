"""PostgreSQL stops under a running service and comes back (a private cluster, so the shared
server is never touched): readiness drops within 2 s, estimates keep answering from the cache,
quotes answer 503 problem+json with Retry-After, and everything recovers within 5 s."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session

from service.api.schemas.estimate import ESTIMATE_EXAMPLE
from service.catalog.db import make_engine
from service.catalog.keys import create_key
from service.catalog.migrate import upgrade
from service.catalog.seed import seed_catalog
from service.settings import Settings
from tests.live_server import live_server

BIN = Path("/usr/lib/postgresql/15/bin")


def _as_postgres(*args: str) -> list[str]:
    """Commands run as the postgres user when we are root (initdb refuses root)."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return list(args)


class Cluster:
    def __init__(self, folder: Path, port: int) -> None:
        self.folder, self.port = folder, port
        self.data = folder / "data"

    def ctl(self, *args: str) -> None:
        subprocess.run(_as_postgres(str(BIN / "pg_ctl"), "-D", str(self.data), "-w", *args),  # noqa: S603
                       check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        self.ctl("-o", f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1",
                 "-l", str(self.folder / "log"), "start")

    def stop_immediately(self) -> None:
        self.ctl("-m", "immediate", "stop")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    if not (BIN / "initdb").exists():
        pytest.fail("PostgreSQL 15 server binaries are needed (Debian postgresql-15)")
    folder = Path(tempfile.mkdtemp(prefix="cq-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    subprocess.run(_as_postgres(str(BIN / "initdb"), "-D", str(folder / "data"), "-A", "trust",  # noqa: S603
                                "-U", "postgres"), check=True, capture_output=True, timeout=120)
    result = Cluster(folder, port)
    result.start()
    try:
        yield result
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            result.stop_immediately()
        shutil.rmtree(folder, ignore_errors=True)


def _until(check: object, limit_s: float) -> float:
    """Seconds until ``check()`` is true; fails after ``limit_s``."""
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        try:
            if check():  # type: ignore[operator]
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    pytest.fail(f"not within {limit_s} s")


@pytest.mark.postgres
def test_outage_and_recovery(cluster: Cluster) -> None:
    upgrade(cluster.url)
    engine = make_engine(cluster.url)
    settings = Settings(database_url=cluster.url)
    with Session(engine) as session:
        seed_catalog(session)
        _, key = create_key(session, name="ops", scopes=["quotes:write"],
                            pepper=settings.api_key_pepper.get_secret_value())
        session.commit()
    engine.dispose()
    quote = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 100,
                                        "num_gpus": 8}}, "providers": ["lambda"]}

    def post_quote(client: httpx.Client) -> httpx.Response:
        return client.post("/v1/quotes", json=quote, headers={
            "Authorization": f"Bearer {key}", "Idempotency-Key": uuid.uuid4().hex})

    with live_server(settings) as base, httpx.Client(base_url=base, timeout=10) as client:
        assert client.get("/readyz").status_code == 200
        assert client.post("/v1/estimates", json=ESTIMATE_EXAMPLE).status_code == 200
        assert post_quote(client).status_code == 201

        cluster.stop_immediately()
        took = _until(lambda: client.get("/readyz").status_code == 503, 2.0)
        assert took < 2.0
        estimate = client.post("/v1/estimates", json=ESTIMATE_EXAMPLE)
        assert estimate.status_code == 200  # accelerator specs come from the cache
        failed = post_quote(client)
        assert failed.status_code == 503, failed.text
        assert failed.headers["content-type"] == "application/problem+json"
        assert int(failed.headers["retry-after"]) >= 1

        cluster.start()
        recovered = _until(lambda: client.get("/readyz").status_code == 200
                           and post_quote(client).status_code == 201, 5.0)
        assert recovered < 5.0
