"""Request schemas apart from response schemas (issue 41, item 9): TypeScript types generated
with openapi-typescript's default flags type-check requests that leave defaulted fields out
(tests/api/test_typescript_client.py: 11 errors before), because no request-side component
carries a property ``default`` (it is stated in the description), while response components
keep theirs (a field with a default is always in an answer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from service.api.openapi import _closure, _refs, _split_requests_from_responses

DOCUMENT = json.loads((Path(__file__).resolve().parents[2] / "openapi" / "openapi.json")
                      .read_text())


def sides(document: dict[str, Any]) -> tuple[set[str], set[str]]:
    components = document["components"]["schemas"]
    requests: list[str] = []
    responses: list[str] = []
    for item in document["paths"].values():
        for operation in item.values():
            requests.extend(_refs(operation.get("requestBody", {})))
            requests.extend(_refs(operation.get("parameters", [])))
            for status, response in operation["responses"].items():
                if status.startswith("2"):
                    responses.extend(_refs(response.get("content", {})))
    return _closure(components, requests), _closure(components, responses)


def defaults(document: dict[str, Any], name: str) -> list[str]:
    schema = document["components"]["schemas"][name]
    return [p for p, v in schema.get("properties", {}).items()
            if isinstance(v, dict) and "default" in v]


def test_no_request_schema_has_a_property_default_and_each_says_it_in_words() -> None:
    requests, _ = sides(DOCUMENT)
    assert "EstimateRequest" in requests
    for name in requests:
        assert not defaults(DOCUMENT, name), name
    training = DOCUMENT["components"]["schemas"]["TrainingIn"]["properties"]["precision"]
    assert "Default: `\"bf16\"`." in training["description"]


def test_response_schemas_keep_their_defaults() -> None:
    _, responses = sides(DOCUMENT)
    assert any(defaults(DOCUMENT, name) for name in responses)


def test_a_schema_both_sides_use_is_copied_for_requests() -> None:
    shared_item = {"type": "object", "properties": {"n": {"type": "integer", "default": 1}}}
    document: dict[str, Any] = {
        "components": {"schemas": {
            "Shared": shared_item,
            "Req": {"type": "object", "properties": {
                "s": {"$ref": "#/components/schemas/Shared"}}}}},
        "paths": {"/x": {"post": {
            "requestBody": {"content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Req"}}}},
            "responses": {"200": {"content": {"application/json": {
                "schema": {"$ref": "#/components/schemas/Shared"}}}}}}}}}
    _split_requests_from_responses(document)
    components = document["components"]["schemas"]
    assert components["Req"]["properties"]["s"]["$ref"] == "#/components/schemas/SharedInput"
    assert components["Shared"]["properties"]["n"]["default"] == 1
    copy = components["SharedInput"]["properties"]["n"]
    assert "default" not in copy
    assert copy["description"] == "Default: `1`."
