"""The committed OpenAPI document is the product: it must match the app."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.api.contract import breaking_changes
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


def test_no_breaking_change_since_the_last_release(repo_root: Path) -> None:
    released = json.loads((repo_root / "openapi" / "released" / "v1.json").read_text())
    current = json.loads((repo_root / "openapi" / "openapi.json").read_text())
    assert breaking_changes(released, current) == []


def _tiny(**changes: object) -> dict[str, Any]:
    """A small spec; keys are slash paths from the root, ``OP`` standing for the operation."""
    spec: dict[str, Any] = {
        "paths": {"/v1/things": {"post": {
            "operationId": "create_thing",
            "parameters": [{"in": "query", "name": "mode", "required": False,
                            "schema": {"enum": ["a", "b"]}}],
            "requestBody": {"required": True, "content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/ThingIn"}}}},
            "responses": {"201": {"content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/ThingOut"}}}}},
        }}},
        "components": {"schemas": {
            "ThingIn": {"type": "object", "required": ["name"],
                        "properties": {"name": {"type": "string"},
                                       "size": {"type": "integer"},
                                       "kind": {"enum": ["x", "y"]}}},
            "ThingOut": {"type": "object", "properties": {
                "id": {"type": "string"},
                "parts": {"type": "array", "items": {"$ref": "#/components/schemas/Part"}}}},
            "Part": {"type": "object", "properties": {"weight": {"type": "number"}}},
        }},
    }
    for path, value in changes.items():
        *parents, leaf = path.split("/")
        node: Any = spec
        for part in parents:
            node = node["paths"]["/v1/things"]["post"] if part == "OP" else node[part]
        node[leaf] = value
    return spec


@pytest.mark.parametrize(("changes", "expected"), [
    ({"OP/operationId": "make_thing"}, "operationId changed"),
    ({"components/schemas/ThingIn/required": ["name", "size"]},
     "size: new required request field"),
    ({"components/schemas/Part/properties": {}}, "parts[].weight: response field removed"),
    ({"components/schemas/ThingIn/properties/kind": {"enum": ["x"]}}, "enum narrowed"),
    ({"OP/parameters": [{"in": "query", "name": "mode", "required": False,
                         "schema": {"enum": ["a"]}}]}, "enum narrowed"),
    ({"OP/parameters": [{"in": "query", "name": "q", "required": True,
                         "schema": {"type": "string"}}]}, "new required query parameter q"),
    ({"OP/responses": {}}, "response 201 removed"),
])
def test_each_breaking_rule_is_caught(changes: dict[str, object], expected: str) -> None:
    found = breaking_changes(_tiny(), _tiny(**changes))
    assert any(expected in line for line in found), found


def test_removed_paths_and_operations_are_caught() -> None:
    assert breaking_changes(_tiny(), {"paths": {}}) == ["/v1/things: path removed"]
    assert breaking_changes(_tiny(), {"paths": {"/v1/things": {}}}) == [
        "POST /v1/things: operation removed"]


def test_additions_are_not_breaking() -> None:
    new = _tiny()
    schemas = new["components"]["schemas"]
    schemas["ThingIn"]["properties"]["colour"] = {"type": "string"}
    schemas["ThingOut"]["properties"]["extra"] = {"type": "string"}
    schemas["ThingIn"]["properties"]["kind"] = {"enum": ["x", "y", "z"]}
    assert breaking_changes(_tiny(), new) == []


def test_docs_pages_use_only_assets_the_app_serves(client: TestClient) -> None:
    for page in ("/docs", "/redoc"):
        html = client.get(page).text
        assets = re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(
            r"url: '([^']+)'", html)
        assert assets
        for url in assets:
            assert url.startswith("/"), f"{page} loads {url} from elsewhere"
            if url.startswith("/static/"):
                response = client.get(url)
                assert response.status_code == 200, url
                assert len(response.content) > 100, url
        assert "fonts.googleapis" not in html
        assert "cdn.jsdelivr" not in html


def test_readme_documents_every_setting(repo_root: Path) -> None:
    readme = (repo_root / "README.md").read_text()
    for name in Settings.model_fields:
        assert f"CQ_{name.upper()}" in readme, f"README lacks CQ_{name.upper()}"
