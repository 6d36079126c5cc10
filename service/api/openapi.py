"""The OpenAPI document: operationIds are route function names, errors are problem+json.

``python -m service.api.openapi > openapi/openapi.json`` (``make openapi``) writes the committed
copy with sorted keys; ``tests/api/test_openapi.py`` fails when it drifts from the app.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from service.api.problems import PROBLEM_MEDIA_TYPE, FieldError, Problem


def operation_id(route: APIRoute) -> str:
    """The route function's name: create_estimate, list_accelerators, ..."""
    return route.name


def build_openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes,
        tags=app.openapi_tags,
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in (Problem, FieldError):
        definition = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in definition.pop("$defs", {}).items():
            components[name] = sub
        components[model.__name__] = definition
    problem_ref = {"$ref": "#/components/schemas/Problem"}
    for path in schema.get("paths", {}).values():
        for operation in path.values():
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
