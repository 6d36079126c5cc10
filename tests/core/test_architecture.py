"""The core stays pure (standard library only) and dependencies point api -> catalog -> core."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SERVICE = Path(__file__).resolve().parents[2] / "service"
ALLOWED_THIRD_PARTY_IN_CORE: dict[str, set[str]] = {"numpy": {"search.py", "portfolio.py",
                                                               "serving_search.py",
                                                               "user_calibration.py"}}
"""numpy earns its place in the plan searches (training and serving) and in the fit of a user
calibration (Gauss-Newton and leave-one-out over up to 10,000 runs); the formulas run on
Python numbers too."""
FORBIDDEN_IN_CORE = {"os", "time", "datetime", "random", "socket", "subprocess", "pathlib",
                     "io", "logging", "sqlite3", "urllib", "http"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(package: str) -> list[Path]:
    return sorted((SERVICE / package).rglob("*.py"))


@pytest.mark.parametrize("path", _modules("core"), ids=lambda p: p.name)
def test_core_imports_only_the_standard_library_and_itself(path: Path) -> None:
    for name in _imports(path):
        top = name.split(".")[0]
        if name.startswith("service."):
            assert name.startswith("service.core"), f"{path.name} imports {name}"
            continue
        allowed = path.name in ALLOWED_THIRD_PARTY_IN_CORE.get(top, set())
        assert top in sys.stdlib_module_names or allowed, f"{path.name} imports {name}"
        assert top not in FORBIDDEN_IN_CORE, f"{path.name} imports {name} (I/O, clock or env)"


@pytest.mark.parametrize("path", _modules("catalog"), ids=lambda p: p.name)
def test_catalog_never_imports_the_api(path: Path) -> None:
    assert not any(n.startswith("service.api") for n in _imports(path)), path.name
