"""Breaking changes between two OpenAPI documents: ``python -m service.api.contract OLD NEW``.

A change breaks clients generated from OLD when it:
- removes a path or an operation;
- changes an operationId;
- adds a required field to a request body (at any depth);
- adds a required parameter, or makes an optional one required (unless the server already
  refused requests without it: ``ALREADY_REQUIRED``);
- removes a field from a response body (at any depth);
- narrows an enum (removes a value) anywhere in a request or response schema.
``tests/api/test_openapi.py`` runs it between ``openapi/released/v1.json`` (the last release)
and the committed ``openapi/openapi.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

METHODS = ("get", "put", "post", "delete", "patch", "head", "options")

ALREADY_REQUIRED = {
    ("header", "idempotency-key"):
        "create_quote and requote_quote have answered 400 without it since v1, whose "
        "description said 'Required'; v1 marked it optional only so that FastAPI let the "
        "handler give that 400 (issue 18 marks it required in the document)",
}
"""Parameters that became ``required`` in the document only: a documentation fix of what the
server already enforced, not a change that breaks a working client (each with its reason)."""


def _resolve(spec: dict[str, Any], schema: Any) -> Any:
    seen = 0
    while isinstance(schema, dict) and "$ref" in schema and seen < 50:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = spec.get("components", {}).get("schemas", {}).get(name, {})
        seen += 1
    return schema


def _variants(spec: dict[str, Any], schema: Any) -> list[dict[str, Any]]:
    schema = _resolve(spec, schema)
    if not isinstance(schema, dict):
        return []
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return [v for sub in schema[key] for v in _variants(spec, sub)]
    return [schema]


def _walk(old_spec: dict[str, Any], new_spec: dict[str, Any], old: Any, new: Any, where: str,
          direction: str, found: list[str], depth: int = 0) -> None:
    """Compare two schemas; ``direction`` is 'request' or 'response'."""
    if depth > 12:
        return
    old_variants, new_variants = _variants(old_spec, old), _variants(new_spec, new)
    old_enum = {json.dumps(v) for s in old_variants for v in s.get("enum", [])}
    new_enum = {json.dumps(v) for s in new_variants for v in s.get("enum", [])}
    if old_enum and new_enum and old_enum - new_enum:
        found.append(f"{where}: enum narrowed, removed {sorted(old_enum - new_enum)}")
    old_props = {k: v for s in old_variants for k, v in s.get("properties", {}).items()}
    new_props = {k: v for s in new_variants for k, v in s.get("properties", {}).items()}
    if direction == "request":
        old_required = {r for s in old_variants for r in s.get("required", [])}
        new_required = {r for s in new_variants for r in s.get("required", [])}
        for name in sorted(new_required - old_required):
            found.append(f"{where}.{name}: new required request field")
    else:
        for name in sorted(set(old_props) - set(new_props)):
            found.append(f"{where}.{name}: response field removed")
    for name in sorted(set(old_props) & set(new_props)):
        _walk(old_spec, new_spec, old_props[name], new_props[name], f"{where}.{name}",
              direction, found, depth + 1)
    old_items = [s["items"] for s in old_variants if "items" in s]
    new_items = [s["items"] for s in new_variants if "items" in s]
    if old_items and new_items:
        _walk(old_spec, new_spec, old_items[0], new_items[0], f"{where}[]", direction, found,
              depth + 1)


def _body_schema(content: dict[str, Any]) -> Any:
    for media_type in ("application/json", "text/csv"):
        if media_type in content:
            return content[media_type].get("schema")
    return None


def _param_key(parameter: dict[str, Any]) -> tuple[str, str]:
    """A parameter's identity: header names compare case-insensitively (RFC 9110, 5.1), so
    ``idempotency-key`` respelt ``Idempotency-Key`` is the same parameter."""
    name = str(parameter["name"])
    return str(parameter["in"]), name.lower() if parameter["in"] == "header" else name


def breaking_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    found: list[str] = []
    for path, old_item in old.get("paths", {}).items():
        new_item = new.get("paths", {}).get(path)
        if new_item is None:
            found.append(f"{path}: path removed")
            continue
        for method in METHODS:
            if method not in old_item:
                continue
            op, new_op = old_item[method], new_item.get(method)
            where = f"{method.upper()} {path}"
            if new_op is None:
                found.append(f"{where}: operation removed")
                continue
            if op.get("operationId") != new_op.get("operationId"):
                found.append(f"{where}: operationId changed from {op.get('operationId')} to "
                             f"{new_op.get('operationId')}")
            old_params = {_param_key(p): p for p in op.get("parameters", [])}
            for p in new_op.get("parameters", []):
                old_param = old_params.get(_param_key(p))
                if p.get("required") and old_param is None:
                    found.append(f"{where}: new required {p['in']} parameter {p['name']}")
                elif (p.get("required") and old_param is not None
                      and not old_param.get("required")
                      and (p["in"], p["name"].lower()) not in ALREADY_REQUIRED):
                    found.append(f"{where}: {p['in']} parameter {p['name']} became required")
                if old_param is not None:
                    _walk(old, new, old_param.get("schema"), p.get("schema"),
                          f"{where} {p['name']}", "request", found)
            old_body = _body_schema(op.get("requestBody", {}).get("content", {}))
            new_body = _body_schema(new_op.get("requestBody", {}).get("content", {}))
            if new_body is not None and old_body is None and new_op["requestBody"].get(
                    "required"):
                found.append(f"{where}: new required request body")
            if old_body is not None and new_body is not None:
                _walk(old, new, old_body, new_body, f"{where} body", "request", found)
            for status, response in op.get("responses", {}).items():
                if not status.startswith("2"):
                    continue
                new_response = new_op.get("responses", {}).get(status)
                if new_response is None:
                    found.append(f"{where}: response {status} removed")
                    continue
                old_schema = _body_schema(response.get("content", {}))
                new_schema = _body_schema(new_response.get("content", {}))
                if old_schema is not None and new_schema is not None:
                    _walk(old, new, old_schema, new_schema, f"{where} {status}", "response",
                          found)
    return found


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 2:
        print("usage: python -m service.api.contract OLD.json NEW.json", file=sys.stderr)
        return 2
    old, new = (json.loads(Path(a).read_text()) for a in args)
    found = breaking_changes(old, new)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
