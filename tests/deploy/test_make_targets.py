"""``make run`` installs the service without the test tools; ``make test`` adds them (issue
41: a fresh ``make run`` installed 667 MB, the dev group included, against about 164 MB for
the service). Read from ``make -n -B`` (every recipe make would run from scratch, none run)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def recipe(target: str) -> list[str]:
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make here")
    out = subprocess.run([make, "-n", "-B", target], cwd=ROOT, capture_output=True,  # noqa: S603
                         text=True, check=True, timeout=60).stdout
    return [line for line in out.splitlines() if "uv sync" in line]


@pytest.mark.parametrize("target", ["run", "migrate"])
def test_the_service_targets_install_no_dev_group(target: str) -> None:
    syncs = recipe(target)
    assert syncs, f"make {target} installs nothing?"
    assert all("--no-dev" in line for line in syncs), syncs


def test_the_test_targets_install_the_dev_group() -> None:
    syncs = recipe("pytest")
    assert any("--no-dev" not in line for line in syncs), syncs
