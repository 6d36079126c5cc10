"""Header parameters are spelt as RFC 9110 and the README spell them (issue 41): the document
said ``idempotency-key`` and ``if-match``, so strict TypeScript types refused the documented
``Idempotency-Key``. Header names are case-insensitive, so the respelling breaks no client,
and the contract check compares them that way."""

from __future__ import annotations

import json
from pathlib import Path

from service.api.contract import breaking_changes

DOCUMENT = json.loads((Path(__file__).resolve().parents[2] / "openapi" / "openapi.json")
                      .read_text())


def test_every_header_parameter_is_canonically_spelt() -> None:
    headers = {p["name"] for item in DOCUMENT["paths"].values() for op in item.values()
               for p in op.get("parameters", []) if p["in"] == "header"}
    assert {"Idempotency-Key", "If-Match"} <= headers
    assert all(name[0].isupper() for name in headers), headers


def _spec(name: str, required: bool) -> dict[str, object]:
    return {"paths": {"/q": {"post": {"operationId": "q", "responses": {}, "parameters": [
        {"in": "header", "name": name, "required": required, "schema": {"type": "string"}}]}}}}


def test_a_respelt_header_is_the_same_parameter_to_the_contract_check() -> None:
    assert breaking_changes(_spec("if-match", True), _spec("If-Match", True)) == []
    # A new required header is still caught, whatever its spelling.
    found = breaking_changes({"paths": {"/q": {"post": {"operationId": "q", "responses": {}}}}},
                             _spec("If-Match", True))
    assert found == ["POST /q: new required header parameter If-Match"]
