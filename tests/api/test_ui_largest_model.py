"""The portal's Largest model answer shows the generated architecture, the rules it was made by
and what bound the answer (issue 39, item 7): the figures are the API's own answer for the
same form."""

from __future__ import annotations

import re
from typing import Any

from fastapi.testclient import TestClient
from markupsafe import escape
from sqlalchemy.orm import Session

from service.api import presentation as fmt
from service.api.ui import train as ui_train
from tests.factories import date_offers

FORM = {**ui_train.DEFAULTS, "gpus_min": "256", "gpus_max": "512", "gpus_step": "256",
        "providers": "aws", "budget": "1000000", "deadline_days": "270",
        "candidate_models": ""}


def _element(html: str, tag: str, element_id: str) -> str:
    match = re.search(rf'<{tag}[^>]* id="{element_id}".*?</{tag}>', html, re.S)
    assert match is not None, f"no <{tag} id={element_id}>"
    return match.group(0)


def _answer_and_page(client: TestClient, db_session: Session) -> tuple[dict[str, Any], str]:
    date_offers(db_session)
    api = client.post("/v1/budget-plans", json=ui_train.budget_plan_body(FORM, largest=True))
    assert api.status_code == 200, api.text
    page = client.post("/ui", data={**FORM, "action": "largest_model"})
    assert page.status_code == 200, page.text[:800]
    return api.json(), page.text


def test_largest_model_shows_its_architecture_rules_share_and_bound(
        client: TestClient, db_session: Session) -> None:
    answer, html = _answer_and_page(client, db_session)
    largest = answer["largest_model"]
    assert largest is not None
    arch = largest["architecture"]
    assert arch is not None  # no candidate presets: the generated family was searched
    figures = _element(html, "dl", "largest-figures")
    assert "<dt>Architecture</dt>" in figures
    assert str(escape(fmt.architecture_text(arch))) in figures
    assert f"{arch['num_layers']:,} layers × hidden {arch['hidden_size']:,}" in figures
    assert fmt.percent(largest["share_of_budget"]) in figures
    rules = _element(html, "div", "largest-rules")
    assert str(escape(largest["shape_rule"])) in rules
    assert str(escape(largest["tokens_rule"])) in rules
    bound = _element(html, "p", "largest-bound")
    assert f"<strong>{answer['binding_constraint']}</strong>" in bound
    stopped = fmt.stopped_size(answer)
    assert stopped is not None
    assert stopped["params"] > largest["params"]
    assert stopped["preset"] in bound
    assert "What bound the answer" in _element(html, "div", "plan-explanation")


def test_models_tried_are_listed_by_size_with_shape_and_bound(
        client: TestClient, db_session: Session) -> None:
    answer, html = _answer_and_page(client, db_session)
    table = _element(html, "table", "models-tried")
    headers = re.findall(r'<th scope="col"[^>]*>([^<]*)</th>', table)
    assert headers[3] == "Layers × hidden, heads, FFN"
    assert "Bound" in headers
    rows = re.findall(r"<tr[^>]*><td>([^<]+)</td>(.*?)</tr>", table, re.S)
    by_size = sorted(answer["models_tried"], key=lambda m: m["params"])
    assert [name for name, _ in rows] == [m["preset"] for m in by_size]
    for (_, cells), model in zip(rows, by_size, strict=True):
        assert fmt.architecture_text(model["architecture"], short=True) in cells
        assert f"<td>{model['bound'] or '—'}</td>" in cells
    assert "searched by bisection" in table
