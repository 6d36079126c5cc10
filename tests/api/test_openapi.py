"""The committed OpenAPI document is the product: it must match the app."""

from __future__ import annotations

import json
from pathlib import Path

from service.api.openapi import build_openapi
from service.main import create_app, dispose
from service.settings import Settings


def _spec(tmp_path: Path) -> dict[str, object]:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/x.sqlite3"))
    spec = json.loads(json.dumps(build_openapi(app)))
    dispose(app)
    return spec


def test_committed_openapi_matches_the_app(tmp_path: Path, repo_root: Path) -> None:
    committed = json.loads((repo_root / "openapi" / "openapi.json").read_text())
    assert committed == _spec(tmp_path), "run `make openapi` and commit openapi/openapi.json"


def test_operations_have_one_tag_a_snake_case_id_and_problem_errors(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    ids = []
    for path_item in spec["paths"].values():  # type: ignore[attr-defined]
        for operation in path_item.values():
            ids.append(operation["operationId"])
            assert len(operation["tags"]) == 1
            assert operation["summary"]
            assert operation["operationId"].islower()
            assert " " not in operation["operationId"]
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert list(response["content"]) == ["application/problem+json"]
    assert len(ids) == len(set(ids))
    assert {"create_estimate", "list_accelerators", "get_accelerator", "list_models"} <= set(ids)
