"""Every stable code a quote's verdict or line can carry is documented (issue 39): the
``RuleOut.code`` description in the OpenAPI document is ``policy.RULE_CODES``, and every code
the golden quotes answer with is one of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from service.core.policy import RULE_CODES

ROOT = Path(__file__).resolve().parents[2]


def _codes(value: Any) -> set[str]:
    """Every ``code`` of a ``{"rule": ..., "outcome": ..., "code": ...}`` object in ``value``."""
    found: set[str] = set()
    if isinstance(value, dict):
        if {"rule", "outcome", "code"} <= value.keys():
            found.add(value["code"])
        for item in value.values():
            found |= _codes(item)
    elif isinstance(value, list):
        for item in value:
            found |= _codes(item)
    return found


def test_the_document_lists_every_code() -> None:
    spec = json.loads((ROOT / "openapi" / "openapi.json").read_text(encoding="utf-8"))
    description = spec["components"]["schemas"]["RuleOut"]["properties"]["code"]["description"]
    listed = description.removeprefix("Stable code: ").removesuffix(".").split(", ")
    assert listed == list(RULE_CODES)
    assert len(set(RULE_CODES)) == len(RULE_CODES)


def test_every_code_the_golden_quotes_answer_with_is_documented() -> None:
    goldens = json.loads((ROOT / "tests" / "data" / "quote_goldens.json")
                         .read_text(encoding="utf-8"))
    seen: set[str] = set()
    for case in goldens.values():
        seen |= _codes(json.loads(case["response"]))
    assert len(seen) >= 10  # the goldens exercise budget, policy, FX and date rules
    assert seen <= set(RULE_CODES), sorted(seen - set(RULE_CODES))
