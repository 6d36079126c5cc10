"""The portal tells a plan nobody would run by its warnings' codes (issue 38), not by the
sentences' opening words; a quote line stored before the codes existed (it has no
``warning_details``) still gets its tag from the sentence."""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.api.ui import common as ui_common
from service.catalog.models import Quote
from tests.api.test_warning_details import _strip_stored_lines

LONG = "impractical wall-clock: training takes 900 days (2.5 years), more than the limit"
COSTLY = "impractical cost: 12.0× the cheapest alternative in this answer"


def _detail(code: str, message: str) -> dict[str, Any]:
    return {"code": code, "field": None, "message": message}


def test_the_codes_decide_not_the_sentences() -> None:
    reworded = "nobody would pay this: 12× the cheapest"
    coded = {"warnings": [reworded, "fits at the edge: 79 GiB of 80"],
             "warning_details": [_detail("impractical_cost", reworded),
                                 _detail("fits_at_edge", "fits at the edge: 79 GiB of 80")]}
    assert ui_common._impractical(coded) == [reworded]
    # A sentence that opens like a plausibility warning but is coded otherwise is not one.
    other = {"warnings": [LONG], "warning_details": [_detail("other", LONG)]}
    assert ui_common._impractical(other) == []
    both = {"warnings": [LONG, COSTLY],
            "warning_details": [_detail("defaulted_input", "x"),
                                _detail("impractical_wall_clock", LONG),
                                _detail("impractical_cost", COSTLY)]}
    assert ui_common._impractical(both) == [LONG, COSTLY]
    assert ui_common._impractical({"warnings": [], "warning_details": []}) == []
    assert ui_common.templates.globals["impractical"] is ui_common._impractical


def test_a_line_without_codes_falls_back_to_the_sentence() -> None:
    assert ui_common._impractical({"warnings": [COSTLY, "tp (16) spans more than one node"]}) == [
        COSTLY]
    assert ui_common._impractical({"warnings": [LONG], "warning_details": []}) == [LONG]
    assert ui_common._impractical({}) == []


def _tags(html: str) -> list[str]:
    table = re.search(r'<table id="lines-table">.*?</table>', html, re.S)
    assert table is not None
    return re.findall(r'<span class="tag" title="([^"]*)">impractical</span>', table.group(0))


def test_a_stored_quote_without_codes_is_tagged_as_it_was(
        client: TestClient, api_key: Any, db_session: Session) -> None:
    owner = api_key("quotes:write", "quotes:read")
    body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 80_000,
                                       "num_gpus": 256}},
            "providers": ["lambda", "aws"], "regions": ["us-east-1"],
            "terms": ["on_demand", "reserved_1y"]}
    quote = client.post("/v1/quotes", json=body,
                        headers={**owner, "Idempotency-Key": "codes-ui-1"}).json()
    assert any(d["code"] == "impractical_cost" for x in quote["lines"]
               for d in x["warning_details"])
    coded = client.get(f"/ui/quotes/{quote['id']}", headers=owner).text
    assert _tags(coded)
    row = db_session.scalars(select(Quote).where(Quote.id == quote["id"])).one()
    old = json.loads(row.response)
    for line in old["lines"]:
        line.pop("warning_details")
    row.response = json.dumps(old)
    _strip_stored_lines(db_session, row)
    db_session.flush()
    stored = client.get(f"/ui/quotes/{quote['id']}", headers=owner).text
    assert _tags(stored) == _tags(coded)
