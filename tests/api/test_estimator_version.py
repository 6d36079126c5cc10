"""The estimator version fingerprints every core module's constants (issue 38: it named six
modules and missed the serving model's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.api import quoting
from service.core import serving

CORE = Path(quoting.__file__).resolve().parents[1] / "core"


def test_every_core_module_is_hashed() -> None:
    files = {p.stem for p in CORE.glob("*.py") if p.stem != "__init__"}
    assert {m.__name__.rsplit(".", 1)[1] for m in quoting.core_modules()} == files


def test_a_serving_constant_moves_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    name = next(k for k, v in vars(serving).items()
                if k.isupper() and isinstance(v, float))
    before = quoting.estimator_version(quoting.core_modules())
    assert before == quoting.ESTIMATOR_VERSION
    monkeypatch.setattr(serving, name, getattr(serving, name) * 1.5)
    assert quoting.estimator_version(quoting.core_modules()) != before
