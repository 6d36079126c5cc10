"""The OpenAPI document: operationIds are route function names, errors are problem+json,
every operation states its security (HTTP bearer API keys, the scope in its description).

``python -m service.api.openapi > openapi/openapi.json`` (``make openapi``) writes the committed
copy with sorted keys; ``tests/api/test_openapi.py`` fails when it drifts from the app, and
``make lint-openapi`` lints it with Redocly CLI (``redocly.yaml``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute, iter_route_contexts

from service.api import examples as response_examples
from service.api.auth import SCOPE_CHECKS
from service.api.problems import PROBLEM_MEDIA_TYPE, FieldError, Problem

COMPONENT_REF = "#/components/schemas/"
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

REQUIRED_HEADERS = {"idempotency-key": frozenset({"create_quote", "requote_quote"})}
"""Header -> the operations whose handler refuses to go without it (400 naming the header):
FastAPI sees them as optional, so that a missing one is that 400 rather than a validation 422,
and this document marks them required there, so generated clients make them a required
argument (issue 18). ``create_calibration`` takes an optional key (a retry without one makes
a second calibration) and is documented so (decision 338)."""


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


CANONICAL_HEADERS = {"idempotency-key": "Idempotency-Key", "if-match": "If-Match",
                     "if-none-match": "If-None-Match"}
"""Header parameters as RFC 9110 and the README spell them: FastAPI names a header parameter
after its lower-cased alias, and strict TypeScript types generated from ``idempotency-key``
refused the documented ``Idempotency-Key`` (issue 41). Header names are case-insensitive, so
the server reads either."""


def _require_headers(operation: dict[str, Any]) -> None:
    for parameter in operation.get("parameters", []):
        if parameter["in"] == "header":
            parameter["name"] = CANONICAL_HEADERS.get(parameter["name"].lower(),
                                                      parameter["name"])
        if parameter["in"] == "header" and parameter["name"].lower() in REQUIRED_HEADERS:
            # A header is a string or absent, never null: one schema, required or not.
            required = operation.get("operationId") in REQUIRED_HEADERS[parameter["name"].lower()]
            parameter["required"] = required
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


def _refs(node: Any) -> Iterator[str]:
    """The component names ``node`` references, at any depth (not following them)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(COMPONENT_REF):
            yield ref[len(COMPONENT_REF):]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _closure(components: dict[str, Any], roots: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name in seen or name not in components:
            continue
        seen.add(name)
        pending.extend(_refs(components[name]))
    return seen


def _renamed(node: Any, names: dict[str, str]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(COMPONENT_REF) and \
                ref[len(COMPONENT_REF):] in names:
            return {**node, "$ref": COMPONENT_REF + names[ref[len(COMPONENT_REF):]]}
        return {key: _renamed(value, names) for key, value in node.items()}
    if isinstance(node, list):
        return [_renamed(value, names) for value in node]
    return node


def _defaults_described(schema: Any) -> None:
    """A request schema's property defaults, moved into the property's description: the
    server applies them when the field is left out, so a client need not send it. A
    ``default`` keyword on a component's property makes openapi-typescript (with its default
    flags) type the property as required, in requests too (issue 41)."""
    if not isinstance(schema, dict):
        return
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict) and "default" in prop:
            default = json.dumps(prop.pop("default"), sort_keys=True)
            text = prop.get("description", "").rstrip()
            prop["description"] = f"{text}\n\nDefault: `{default}`.".lstrip()


def _split_requests_from_responses(schema: dict[str, Any]) -> None:
    """Request schemas apart from response schemas (issue 41). A component that both a request
    and a response use is copied as ``<Name>Input`` for the requests (FastAPI splits only the
    models whose two JSON schemas differ); then every request-only component states its
    defaults in prose rather than as ``default`` (``_defaults_described``). Responses keep
    ``default``: there a field with one is always present."""
    components = schema["components"]["schemas"]
    request_roots: list[str] = []
    response_roots: list[str] = []
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            request_roots.extend(_refs(operation.get("requestBody", {})))
            request_roots.extend(_refs(operation.get("parameters", [])))
            for status, response in operation.get("responses", {}).items():
                if status.startswith("2"):
                    response_roots.extend(_refs(response.get("content", {})))
    requests = _closure(components, request_roots)
    responses = _closure(components, response_roots)
    shared = requests & responses

    def has_defaults(name: str) -> bool:
        return any(isinstance(p, dict) and "default" in p
                   for p in components[name].get("properties", {}).values())

    needs = {name for name in shared if has_defaults(name)}
    grown = True
    while grown:  # a shared schema that refers to one needing a copy needs one too
        more = {name for name in shared - needs if set(_refs(components[name])) & needs}
        grown = bool(more)
        needs |= more
    names = {name: f"{name}Input" for name in sorted(needs)
             if f"{name}Input" not in components}
    for name, copy in names.items():
        components[copy] = _renamed(json.loads(json.dumps(components[name])), names)
    for name in requests - responses:
        components[name] = _renamed(components[name], names)
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            if "requestBody" in operation:
                operation["requestBody"] = _renamed(operation["requestBody"], names)
            if "parameters" in operation:
                operation["parameters"] = _renamed(operation["parameters"], names)
    for name in (requests - responses) | set(names.values()):
        _defaults_described(components[name])


def _binary_csv_bodies(schema: dict[str, Any]) -> None:
    """CSV request bodies (catalogue imports, refreshes, FX imports) as a string of bytes
    (``format: binary``, ``contentMediaType: text/csv``), so generators that upload files
    make them a file argument: openapi-python-client, with ``openapi/python-client.yaml``
    (``text/csv`` read as ``application/octet-stream``), generates the FX import it skipped
    before (issue 41)."""
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            body = operation.get("requestBody", {}).get("content", {}).get("text/csv")
            if body is not None and body.get("schema", {}).get("type") == "string":
                body["schema"] = {**body["schema"], "format": "binary",
                                  "contentMediaType": "text/csv"}


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
    _split_requests_from_responses(schema)
    _binary_csv_bodies(schema)
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
