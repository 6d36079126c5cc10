"""The OpenAPI document: operationIds are route function names, errors are problem+json,
every operation states its security (HTTP bearer API keys, the scope in its description).

``python -m service.api.openapi > openapi/openapi.json`` (``make openapi``) writes the committed
copy with sorted keys; ``tests/api/test_openapi.py`` fails when it drifts from the app, and
``make lint-openapi`` lints it with Redocly CLI (``redocly.yaml``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute, iter_route_contexts

from service.api import examples as response_examples
from service.api.auth import SCOPE_CHECKS
from service.api.problems import PROBLEM_MEDIA_TYPE, FieldError, Problem

BEARER = "bearerAuth"
SECURITY_SCHEMES = {BEARER: {
    "type": "http", "scheme": "bearer", "bearerFormat": "cq_ API key",
    "description": "An API key (`cq keys create`) as `Authorization: Bearer <key>`. Each "
                   "operation's description names the scope it needs.",
}}
SERVERS = [{"url": "/", "description": "The server that serves this document"},
           {"url": "http://127.0.0.1:8000", "description": "`make run` on this machine"}]
# pyproject.toml's license; LicenseRef- is SPDX's form for a licence not on its list.
LICENSE = {"name": "Proprietary", "identifier": "LicenseRef-Proprietary"}
CONTACT = {"name": "ComputeQuote maintainers"}

REQUIRED_HEADERS = frozenset({"idempotency-key"})
"""Headers that a handler refuses to go without (400 naming the header): FastAPI sees them as
optional, so that a missing one is that 400 rather than a validation 422, and this document
marks them required, so generated clients make them a required argument (issue 18)."""


def operation_id(route: APIRoute) -> str:
    """The route function's name: create_estimate, list_accelerators, ..."""
    return route.name


def _scopes(app: FastAPI) -> dict[str, tuple[str, bool]]:
    """operationId -> (scope, open unless CQ_REQUIRE_READ_AUTH) for every operation with a
    scope check (``service/api/auth.py``) among its dependencies, at any depth."""
    found: dict[str, tuple[str, bool]] = {}
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        if not isinstance(route, APIRoute):
            continue
        pending = list(route.dependant.dependencies)
        while pending:
            dependant = pending.pop()
            if dependant.call in SCOPE_CHECKS:
                found[route.name] = SCOPE_CHECKS[dependant.call]
            pending.extend(dependant.dependencies)
    return found


def _secure(operation: dict[str, Any], check: tuple[str, bool] | None) -> None:
    """The operation's ``security`` and a sentence on it at the end of its description."""
    if check is None:
        operation["security"] = []
        note = "No API key is needed."
    else:
        scope, open_by_default = check
        keyed = {BEARER: [scope]}
        operation["security"] = [{}, keyed] if open_by_default else [keyed]
        note = (f"Open unless the server sets CQ_REQUIRE_READ_AUTH; then it needs an API key "
                f"with scope `{scope}`." if open_by_default
                else f"Needs an API key with scope `{scope}`.")
        responses = operation.setdefault("responses", {})
        responses.setdefault("401", {"description": "Missing or unknown API key"})
        responses.setdefault("403", {"description": "The key lacks the scope"})
    description = operation.get("description", "").rstrip()
    operation["description"] = f"{description}\n\n{note}" if description else note


def _require_headers(operation: dict[str, Any]) -> None:
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "header" and parameter["name"].lower() in REQUIRED_HEADERS:
            parameter["required"] = True
            schema = parameter["schema"]
            for variant in schema.pop("anyOf", []):
                if variant.get("type") != "null":
                    schema.update(variant)


def _restore_null_examples(spec: dict[str, Any], schema: Any, example: Any) -> None:
    """FastAPI drops null members from the document (``exclude_none``), examples' included:
    an example's required member that is missing was null; put it back (Redocly's
    no-invalid-schema-examples)."""
    components = spec["components"]["schemas"]
    while isinstance(schema, dict) and "$ref" in schema:
        schema = components.get(schema["$ref"].rsplit("/", 1)[-1], {})
    if not isinstance(schema, dict) or not isinstance(example, dict):
        return
    properties = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in example:
            example[name] = None
        elif name in properties:
            _restore_null_examples(spec, properties[name], example[name])


def _add_response_example(operation: dict[str, Any], stored: dict[str, Any] | None,
                          shared: dict[str, Any]) -> None:
    """The operation's stored real answer (``service.api.examples``) as its success
    response's example, under the media type the document declares for it; held once in
    ``components.examples`` (``shared``) and referenced, so operations that answer the same
    body (a quote: created, read, requoted) share it."""
    if stored is None:
        return
    response = operation.get("responses", {}).get(stored["status"])
    if response is None:
        return
    content = response.setdefault("content", {})
    media = next((m for m in content if m.split(";")[0] == stored["media_type"]), None)
    if media is None:
        media = stored["media_type"]
        content[media] = {"schema": {"type": "string"} if not media.endswith("json") else {}}
    name = next((key for key, held in shared.items() if held["value"] == stored["example"]),
                operation["operationId"])
    shared.setdefault(name, {"summary": f"A real answer of {name} (service/api/examples.py)",
                             "value": stored["example"]})
    content[media]["examples"] = {name: {"$ref": f"#/components/examples/{name}"}}


def build_openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes,
        tags=app.openapi_tags, servers=SERVERS, license_info=LICENSE, contact=CONTACT,
    )
    schema["components"] = {**schema.get("components", {}), "securitySchemes": SECURITY_SCHEMES}
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in (Problem, FieldError):
        definition = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in definition.pop("$defs", {}).items():
            components[name] = sub
        components[model.__name__] = definition
    problem_ref = {"$ref": "#/components/schemas/Problem"}
    scopes = _scopes(app)
    examples = response_examples.load()
    shared = schema["components"].setdefault("examples", {})
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            _secure(operation, scopes.get(operation["operationId"]))
            _add_response_example(operation, examples.get(operation["operationId"]), shared)
            _require_headers(operation)
            responses = operation.setdefault("responses", {})
            # Any operation can meet a malformed request, an outage or a bug; documented
            # once here rather than on every route.
            common = {"400": "Malformed request", "500": "Internal error",
                      "503": "The database is unavailable, or the replica is overloaded "
                             "(retry after Retry-After); for searches, the searches did not "
                             "finish within CQ_SEARCH_DEADLINE_S (type search-deadline: "
                             "narrow the request)"}
            if "requestBody" in operation:
                common.update({"413": "Body too large", "415": "Unsupported media type",
                               "422": "Invalid input or an impossible plan"})
            for status, description in common.items():
                responses.setdefault(status, {"description": description})
            for status, response in responses.items():
                if status.isdigit() and int(status) >= 400:
                    response["content"] = {PROBLEM_MEDIA_TYPE: {"schema": problem_ref}}
    components.pop("HTTPValidationError", None)
    components.pop("ValidationError", None)
    for definition in components.values():
        for example in definition.get("examples", []):
            _restore_null_examples(schema, definition, example)
    app.openapi_schema = schema
    return schema


def dump(app: FastAPI) -> str:
    return json.dumps(build_openapi(app), indent=2, sort_keys=True) + "\n"


def main() -> int:
    from service.main import create_app

    sys.stdout.write(dump(create_app()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
