"""Every operation's success response carries a real example that fits its schema (issue 41:
none of the 36 operations had one). The examples are answers the app gave to the documented
requests (``service/api/examples.py``); the document holds each once in
``components.examples``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

from service.api.examples import load, trimmed

DOCUMENT = json.loads((Path(__file__).resolve().parents[2] / "openapi" / "openapi.json")
                      .read_text())
OPERATIONS = [(path, method, op) for path, item in DOCUMENT["paths"].items()
              for method, op in item.items()]


def success_media(op: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{status} {media}", body) for status, response in op["responses"].items()
            if status.startswith("2") for media, body in response.get("content", {}).items()]


def resolved_example(body: dict[str, Any]) -> Any:
    if "example" in body:
        return body["example"]
    (reference,) = body["examples"].values()
    name = reference["$ref"].rsplit("/", 1)[-1]
    return DOCUMENT["components"]["examples"][name]["value"]


@pytest.mark.parametrize(("path", "method", "op"), OPERATIONS,
                         ids=[op["operationId"] for _, _, op in OPERATIONS])
def test_the_success_response_has_an_example_that_fits_its_schema(
        path: str, method: str, op: dict[str, Any]) -> None:
    with_examples = [(where, body) for where, body in success_media(op)
                     if "example" in body or "examples" in body]
    assert with_examples, f"{method.upper()} {path} has no response example"
    for where, body in with_examples:
        errors = schema_errors(body.get("schema", {}), resolved_example(body))
        assert not errors, (where, errors[:5])


REGISTRY: Registry = Registry().with_resource("urn:cq:openapi", Resource.opaque(DOCUMENT))


def schema_errors(schema: dict[str, Any], value: Any) -> list[str]:
    """``value`` against ``schema``, its ``#/components/...`` references resolved in the
    committed document (JSON Schema 2020-12, as OpenAPI 3.1 is)."""
    rooted = json.loads(json.dumps(schema).replace('"#/components/',
                                                   '"urn:cq:openapi#/components/'))
    validator = Draft202012Validator(rooted, registry=REGISTRY)
    return [f"{list(e.absolute_path)}: {e.message[:200]}"
            for e in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))]


def test_the_check_fails_on_an_example_that_does_not_fit() -> None:
    op = DOCUMENT["paths"]["/v1/estimates"]["post"]
    (_, body), *_ = success_media(op)
    example = json.loads(json.dumps(resolved_example(body)))
    assert not schema_errors(body["schema"], example)
    example["memory"]["peak_bytes_per_gpu"] = "a lot"
    del example["time"]
    errors = schema_errors(body["schema"], example)
    assert any("time" in e for e in errors)
    assert any("peak_bytes_per_gpu" in e for e in errors)


def test_every_operation_of_the_app_has_a_stored_example() -> None:
    assert {op["operationId"] for _, _, op in OPERATIONS} <= set(load())


def test_examples_are_trimmed_but_keep_their_shape() -> None:
    long_list = {"items": list(range(10)), "deep": {"a": {"b": [1, 2, 3]}},
                 "text": "x" * 5000}
    short = trimmed(long_list)
    assert short["items"] == [0, 1]
    assert short["deep"]["a"]["b"] == [1]
    assert len(short["text"]) == 600
