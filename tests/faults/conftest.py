"""Fault fixtures: a private PostgreSQL cluster that a test may stop and start at will."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live_server import free_port

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
    port = free_port()
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
