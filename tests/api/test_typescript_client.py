"""TypeScript types generated from the committed OpenAPI document (openapi-typescript)
type-check a small usage file with tsc, and a wrong usage fails to."""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2] / "openapi" / "typescript"
LOCK = Path(tempfile.gettempdir()) / (
    "cq-typescript-" + hashlib.sha256(str(PROJECT).encode()).hexdigest()[:12] + ".lock")
"""One lock per checkout, shared by the test processes of one run."""


def npm(*args: str) -> subprocess.CompletedProcess[str]:
    executable = shutil.which("npm")
    if executable is None:
        pytest.fail("npm is needed for the TypeScript client check (Node.js from Debian)")
    return subprocess.run(  # noqa: S603 - fixed arguments
        [executable, *args], cwd=PROJECT, capture_output=True, text=True, timeout=300,
        check=False)


@pytest.fixture(scope="module")
def generated() -> Iterator[None]:
    """node_modules and schema.d.ts, made under a lock held while this module's tests run:
    under pytest-xdist (``make pytest``) both workers may run tests of this module at once,
    and two ``npm ci`` in one directory, or a ``generate`` rewriting schema.d.ts under a
    running ``tsc``, would fail."""
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (PROJECT / "node_modules" / ".bin" / "tsc").exists():
            installed = npm("ci", "--no-audit", "--no-fund")
            assert installed.returncode == 0, installed.stderr[-2000:]
        made = npm("run", "generate")
        assert made.returncode == 0, made.stderr[-2000:]
        yield


def test_usage_type_checks(generated: None) -> None:
    result = npm("run", "check")
    assert result.returncode == 0, result.stdout[-2000:]


def test_a_wrong_usage_does_not_type_check(generated: None, tmp_path: Path) -> None:
    wrong = PROJECT / "wrong.ts"
    wrong.write_text(
        'import type { components } from "./schema";\n'
        'const r: components["schemas"]["EstimateRequest"] = '
        '{ model: { preset: "x" }, cluster: { accelerator: "h100", num_gpus: "64" } };\n'
        "export { r };\n")
    try:
        tsc = PROJECT / "node_modules" / ".bin" / "tsc"
        result = subprocess.run(  # noqa: S603 - fixed arguments
            [str(tsc), "--strict", "--noEmit", "--moduleResolution", "node", "wrong.ts"],
            cwd=PROJECT, capture_output=True, text=True, timeout=120, check=False)
    finally:
        wrong.unlink()
    assert result.returncode != 0
    assert "error TS2322" in result.stdout  # num_gpus given as a string
