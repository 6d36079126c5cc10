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
    ({"OP/parameters": [{"in": "query", "name": "mode", "required": True,
                         "schema": {"enum": ["a", "b"]}}]}, "parameter mode became required"),
])
def test_each_breaking_rule_is_caught(changes: dict[str, object], expected: str) -> None:
    found = breaking_changes(_tiny(), _tiny(**changes))
    assert any(expected in line for line in found), found


def test_a_header_the_server_already_required_may_be_marked_required() -> None:
    """Issue 18: Idempotency-Key was answered 400 when missing, yet documented optional."""
    header = {"in": "header", "name": "idempotency-key", "schema": {"type": "string"}}
    old = _tiny(**{"OP/parameters": [{**header, "required": False}]})
    assert breaking_changes(old, _tiny(**{"OP/parameters": [{**header, "required": True}]})) == []
    other = {**header, "name": "x-other"}
    assert breaking_changes(_tiny(**{"OP/parameters": [{**other, "required": False}]}),
                            _tiny(**{"OP/parameters": [{**other, "required": True}]})) == [
        "POST /v1/things: header parameter x-other became required"]


def test_each_operation_declares_the_security_the_server_enforces(client: TestClient) -> None:
    """Issue 18: a bearer scheme and per-operation security, so Swagger UI has an Authorize
    button and generated clients send the key; checked against the server, keyless."""
    spec = json.loads(json.dumps(build_openapi(client.app)))  # type: ignore[arg-type]
    scheme = spec["components"]["securitySchemes"]["bearerAuth"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    keyed_operations = 0
    for path, path_item in spec["paths"].items():
        for method, operation in path_item.items():
            security = operation["security"]
            anonymous = security == [] or {} in security
            for requirement in (r for r in security if r):
                (scope,) = requirement["bearerAuth"]
                assert f"scope `{scope}`" in operation["description"]
                assert {"401", "403"} <= set(operation["responses"])
                keyed_operations += 1
            url = re.sub(r"\{[^}]+\}", "x", path)
            status = client.request(method.upper(), url).status_code
            assert (status == 401) == (not anonymous), (method, path, status)
    assert keyed_operations > 20


def test_idempotency_key_is_a_required_header(tmp_path: Path) -> None:
    """The server answers 400 without it (tests/api/test_quotes_api.py); the document says so,
    so generated clients make it a required argument."""
    spec: Any = _spec(tmp_path)
    for path in ("/v1/quotes", "/v1/quotes/{quote_id}/requote"):
        (header,) = [p for p in spec["paths"][path]["post"]["parameters"]
                     if p["name"].lower() == "idempotency-key"]
        assert header["in"] == "header"
        assert header["required"] is True
        assert header["schema"]["type"] == "string"
        assert "anyOf" not in header["schema"]


def test_servers_license_contact_and_named_schemas(tmp_path: Path) -> None:
    spec: Any = _spec(tmp_path)
    assert spec["servers"]
    assert all(s["url"] for s in spec["servers"])
    assert spec["info"]["license"]["name"]
    assert spec["info"]["contact"]["name"]
    schemas = spec["components"]["schemas"]

    def inline_enums(node: Any, where: str) -> list[str]:
        if isinstance(node, dict):
            return ([where] if "enum" in node else []) + [
                x for k, v in node.items() for x in inline_enums(v, f"{where}/{k}")]
        if isinstance(node, list):
            return [x for i, v in enumerate(node) for x in inline_enums(v, f"{where}/{i}")]
        return []

    found = inline_enums(spec["paths"], "paths") + [
        x for name, schema in schemas.items()
        for key, value in schema.items() if key != "enum"
        for x in inline_enums(value, f"{name}/{key}")]
    assert found == [], "name each enum (a StrEnum or a typing_extensions.TypeAliasType)"

    def nullable_ref(model: str, field: str) -> str:
        (ref,) = [v["$ref"] for v in schemas[model]["properties"][field]["anyOf"] if "$ref" in v]
        return str(ref.rsplit("/", 1)[-1])

    assert nullable_ref("QuoteOut", "verdict") == "Verdict"
    assert nullable_ref("QuoteOut", "budget") == "MoneyOut"
    assert nullable_ref("QuoteOut", "discount_book") == "DiscountBookRef"
    assert nullable_ref("QuoteLineOut", "plan") == "Parallelism"
    assert schemas["QuoteRequest"]["properties"]["terms"]["items"] == {
        "$ref": "#/components/schemas/QuoteTerm"}


def test_component_examples_keep_their_null_members(tmp_path: Path) -> None:
    """FastAPI drops nulls from the document; an example must still have every required
    member (Redocly's no-invalid-schema-examples caught OfferOut's)."""
    schemas: Any = _spec(tmp_path)["components"]["schemas"]
    checked = 0
    for schema in schemas.values():
        for example in schema.get("examples", []):
            if isinstance(example, dict):
                assert set(schema.get("required", [])) <= set(example)
                checked += 1
    assert checked
    assert schemas["OfferOut"]["examples"][0]["zone"] is None


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
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        if alias is None:
            variable = f"CQ_{name.upper()}"
        else:  # OpenTelemetry's own variable names; the last choice is the general one
            choices = alias.choices if hasattr(alias, "choices") else [alias]
            variable = str(choices[-1])
        assert variable in readme, f"README lacks {variable}"
