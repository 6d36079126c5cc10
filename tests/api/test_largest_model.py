"""``objective: largest_model`` searches model sizes continuously (issue 39, item 7): a
bisection on parameter count over a generated Llama-style family, each size trained on
tokens_per_param × its parameters; training.tokens optional; the explanation always names
what bound the answer.

Before (preset ladder 8B, 13B, 70B, 405B), $1M for 270 days on 256-512 H100 (AWS) answered
llama2-13b at about 8% of the budget: 70B costs about $2.4M. After: see
``test_one_million_for_270_days_uses_most_of_the_budget``.
"""

from __future__ import annotations

import datetime as dt
import itertools
from decimal import Decimal
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.core.params import count_parameters
from service.core.scaling import (
    ASPECT_MAX,
    ASPECT_MIN,
    HEAD_DIM,
    MIN_SIZE_STEP,
    ffn_hidden_size,
    generated_family,
)
from tests.factories import date_offers

DAY_S = 86_400.0
BODY: dict[str, Any] = {
    "objective": "largest_model",
    "training": {"seq_len": 8192, "global_batch_seqs": 512},
    "clusters": [
        {
            "accelerator": "h100-sxm5-80gb",
            "num_gpus_range": {"start": 256, "stop": 512, "step": 256},
        }
    ],
    "providers": ["aws"],
    "terms": ["on_demand", "spot", "reserved_1y"],
    "deadline_s": 270 * DAY_S,
}
BOUNDS = {"budget", "deadline", "memory", "policy", "no_offer", "search_range", "work_budget"}


def _plan(client: TestClient, amount: str, **extra: Any) -> dict[str, Any]:
    body = {**BODY, "budget": {"amount": amount, "currency": "USD"}, **extra}
    response = client.post("/v1/budget-plans", json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_the_family_follows_its_shape_rules() -> None:
    family = generated_family()
    assert len(family) >= 100
    for before, after in itertools.pairwise(family):
        assert after.params >= MIN_SIZE_STEP * before.params
    for size in family:
        m = size.model
        assert count_parameters(m).total == size.params
        assert m.hidden_size % 1024 == 0
        assert m.num_heads * HEAD_DIM == m.hidden_size
        assert m.num_heads % 8 == 0
        assert ASPECT_MIN <= m.hidden_size / m.num_layers <= ASPECT_MAX
        assert m.ffn_hidden_size == ffn_hidden_size(m.hidden_size)
        assert m.ffn_hidden_size % 256 == 0
        assert m.ffn_hidden_size >= 8 * m.hidden_size / 3
        assert m.vocab_size == 128_256
    assert ffn_hidden_size(4096) == 11_008  # Llama 2 7B's published width
    assert family[0].params < 1e9 < 1e12 < family[-1].params


def test_one_million_for_270_days_uses_most_of_the_budget(
    client: TestClient, db_session: Session
) -> None:
    """Failed before: llama2-13b at about 8% of the budget, explanation empty."""
    date_offers(db_session)
    answer = _plan(client, "1000000.00")
    largest = answer["largest_model"]
    assert largest is not None, answer["explanation"]
    total = Decimal(largest["line"]["commitment_total"])
    assert total <= Decimal("1000000.00")
    assert total >= Decimal("500000.00"), answer["explanation"]
    assert largest["share_of_budget"] == pytest.approx(float(total) / 1e6)
    assert largest["params"] > 13.02e9 * 1.5  # well past the preset answer, llama2-13b
    assert largest["tokens"] == pytest.approx(20.0 * largest["params"])
    arch = largest["architecture"]
    assert arch is not None
    assert arch["num_heads"] * 128 == arch["hidden_size"]
    assert "Hoffmann" in largest["tokens_rule"]
    assert "Kaplan" in largest["shape_rule"]
    assert answer["binding_constraint"] == "budget"
    why = answer["explanation"]
    assert "bound by the budget" in why
    assert "nothing fits the budget" in why
    assert largest["preset"] in why
    # the bisection: at most 12 sizes priced; the next larger one priced has no line
    tried = answer["models_tried"]
    assert 2 <= len(tried) <= 12
    larger = [t for t in tried if t["params"] > largest["params"]]
    assert larger
    assert all(t["lines_within"] == 0 and t["bound"] for t in larger)
    assert all(t["lines_within"] > 0 for t in tried if t["params"] <= largest["params"])
    assert all(t["architecture"] is not None for t in tried)


@pytest.mark.parametrize(
    ("amount", "bound"), [("10.00", "budget"), ("200000.00", "budget"), ("5000000.00", None)]
)
def test_the_explanation_always_names_the_bound(
    client: TestClient, db_session: Session, amount: str, bound: str | None
) -> None:
    date_offers(db_session)
    answer = _plan(client, amount)
    assert answer["explanation"]
    assert answer["binding_constraint"] in BOUNDS
    if bound is not None:
        assert answer["binding_constraint"] == bound
    words = {
        "budget": "the budget",
        "deadline": "the deadline",
        "memory": "memory",
        "policy": "the policy",
        "search_range": "the search's range",
        "work_budget": "the request's work budget",
        "no_offer": "the offers",
    }
    assert f"bound by {words[answer['binding_constraint']]}" in answer["explanation"]
    if amount == "10.00":
        assert answer["largest_model"] is None
        assert "no model size has a line" in answer["explanation"]


def test_a_short_deadline_binds(client: TestClient, db_session: Session) -> None:
    date_offers(db_session)
    answer = _plan(client, "100000000.00", deadline_s=3 * DAY_S)
    assert answer["binding_constraint"] == "deadline", answer["explanation"]
    assert "bound by the deadline" in answer["explanation"]
    largest = answer["largest_model"]
    assert largest is not None
    assert largest["line"]["wall_clock_s"] <= 3 * DAY_S


def test_the_policy_binds_and_is_named(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """45 days after the seed's prices were read the default policy fails every line
    (observed_price_stale): the smallest size has no line and the rule is named."""
    from tests.api.test_price_dates import READ_DAY, freeze

    freeze(monkeypatch, READ_DAY + dt.timedelta(days=45))
    answer = _plan(client, "1000000.00")
    assert answer["largest_model"] is None
    assert answer["binding_constraint"] == "policy"
    why = answer["explanation"]
    assert "bound by the policy: the smallest size" in why
    assert "max_observed_age_days (observed_price_stale)" in why
    assert len(answer["models_tried"]) == 1


def test_training_tokens_is_optional_for_largest_model_only(client: TestClient) -> None:
    body = {**BODY, "budget": {"amount": "10.00", "currency": "USD"}}
    assert client.post("/v1/budget-plans", json=body).status_code == 200
    soonest = {**body, "objective": "soonest", "model": {"preset": "llama3.1-8b"}}
    response = client.post("/v1/budget-plans", json=soonest)
    assert response.status_code == 422
    assert "training.tokens is required" in response.text


def test_named_presets_still_climb_the_ladder_and_explain(
    client: TestClient, db_session: Session
) -> None:
    date_offers(db_session)
    answer = _plan(
        client, "1000000.00", candidate_models=["llama3.1-8b", "llama2-13b", "llama3.1-70b"]
    )
    largest = answer["largest_model"]
    assert largest is not None
    assert largest["architecture"] is None
    assert next(t["preset"] for t in answer["models_tried"]) == "llama3.1-8b"
    assert answer["binding_constraint"] in BOUNDS
    assert "bound by" in answer["explanation"]


def test_a_small_work_budget_ends_the_search_and_says_so(
    client: TestClient, db_session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bisection is charged to the request's WorkBudget: when what is left cannot pay for
    one more size, it stops with the answer so far and says so."""
    from service.api import budget_plans

    date_offers(db_session)
    real = budget_plans.optimised_jobs  # type: ignore[attr-defined]
    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        result = real(*args, **kwargs)
        budget = args[-1]
        if len(calls) == 3:
            budget.remaining = 1  # as if the request's candidates were nearly spent
        return result

    monkeypatch.setattr(budget_plans, "optimised_jobs", counted)
    answer = _plan(client, "1000000.00")
    assert len(calls) == 3
    assert answer["binding_constraint"] == "work_budget"
    assert "CQ_SEARCH_MAX_CANDIDATES" in answer["explanation"]
    assert answer["largest_model"] is not None
