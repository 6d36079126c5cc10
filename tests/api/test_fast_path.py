"""The estimate fast path (service/api/fast.py, issue 16) answers exactly what the route
answers: the same status, bytes and headers, with the layer on and off, for valid bodies
(answered by the layer) and invalid ones (passed to the route, which writes the problem)."""

from __future__ import annotations

import copy
import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from service.api import fast
from service.api.schemas.estimate import ESTIMATE_EXAMPLE
from service.main import create_app
from service.settings import Settings
from tests.conftest import dispose
from tests.json_logs import json_lines

HEADERS_COMPARED = ("content-type", "content-length", "x-content-type-options",
                    "cache-control")


def _app(engine: Engine, **settings: Any) -> Iterator[TestClient]:
    url = engine.url.render_as_string(hide_password=False)
    app = create_app(Settings(database_url=url, **settings))
    with TestClient(app, raise_server_exceptions=False) as test_client:
        yield test_client
    dispose(app)


@pytest.fixture
def client(migrated_engine: Engine) -> Iterator[TestClient]:
    """The application as it is deployed: no dependency overrides (the fast layer stands
    aside for those), on the migrated, seeded database."""
    yield from _app(migrated_engine)


@pytest.fixture
def slow(migrated_engine: Engine) -> Iterator[TestClient]:
    """The same application with the fast path off: every request goes through routing."""
    yield from _app(migrated_engine, fast_paths=False)


@pytest.fixture
def locked(migrated_engine: Engine) -> Iterator[TestClient]:
    """Reads need a key (CQ_REQUIRE_READ_AUTH)."""
    yield from _app(migrated_engine, require_read_auth=True)


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per request the fast layer examined: True when it answered it."""
    seen: list[bool] = []
    original = fast.FastPaths._estimate

    def spy(self: fast.FastPaths, raw: bytes, parsed: Any = None) -> bytes | None:
        body = original(self, raw, parsed)
        seen.append(body is not None)
        return body

    monkeypatch.setattr(fast.FastPaths, "_estimate", spy)
    return seen


@pytest.fixture
def paged(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per offers request the fast layer examined: True when it answered it."""
    seen: list[bool] = []
    original = fast.FastPaths._offers

    def spy(self: fast.FastPaths, scope: Any) -> bytes | None:
        page = original(self, scope)
        seen.append(page is not None)
        return page

    monkeypatch.setattr(fast.FastPaths, "_offers", spy)
    return seen


def _variant(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(ESTIMATE_EXAMPLE)
    for path, value in changes.items():
        node = body
        *parents, leaf = path.split(".")
        for name in parents:
            node = node[name]
        if value is _DROP:
            node.pop(leaf)
        else:
            node[leaf] = value
    return body


_DROP = object()

VALID = {
    "example": _variant(),
    "moe": _variant(**{"model.preset": "mixtral-8x7b", "parallelism.ep": 2,
                       "parallelism.tp": 2, "parallelism.dp": 4, "parallelism.vp": 1}),
    "full recompute": _variant(**{"parallelism.recompute": "full"}),
    "zero 3": _variant(**{"parallelism.zero_stage": 3}),
    "a100": _variant(**{"cluster.accelerator": "a100-sxm4-80gb"}),
    "long run warned": _variant(**{"training.tokens": 1e15}),
    "unknown framework": _variant(**{"training.framework": "unknown"}),
}

INVALID = {
    "unknown field": _variant(**{"cluster.surprise": 1}),
    "negative gpus": _variant(**{"cluster.num_gpus": -64}),
    "wrong type": _variant(**{"parallelism.tp": "four"}),
    "missing model": _variant(model=_DROP),
    "layout does not multiply": _variant(**{"parallelism.dp": 3}),
    "unknown accelerator": _variant(**{"cluster.accelerator": "h999"}),
    "auto": _variant(**{"parallelism.vp": "auto"}),
}


def _same(fast_answer: Any, slow_answer: Any) -> None:
    """The same answer; a problem's ``request_id`` names its own request, so it differs."""
    assert fast_answer.status_code == slow_answer.status_code, fast_answer.text
    if fast_answer.headers.get("content-type") == "application/problem+json":
        mine, theirs = fast_answer.json(), slow_answer.json()
        assert mine.pop("request_id") != theirs.pop("request_id")
        assert mine == theirs
    else:
        assert fast_answer.content == slow_answer.content
    for name in HEADERS_COMPARED:
        if name != "content-length" or fast_answer.status_code == 200:
            assert fast_answer.headers.get(name) == slow_answer.headers.get(name), name


@pytest.mark.parametrize("name", sorted(VALID))
def test_a_valid_estimate_is_answered_by_the_layer_with_the_routes_bytes(
    client: TestClient, slow: TestClient, answered: list[bool], name: str
) -> None:
    body = VALID[name]
    client.post("/v1/estimates", json=body)  # a cold accelerator cache is read in the pool
    answered.clear()
    quick = client.post("/v1/estimates", json=body)
    assert quick.status_code == 200, quick.text
    assert answered == [True]
    _same(quick, slow.post("/v1/estimates", json=body))


@pytest.mark.parametrize("name", sorted(INVALID))
def test_everything_else_goes_to_the_route(
    client: TestClient, slow: TestClient, answered: list[bool], name: str
) -> None:
    body = INVALID[name]
    quick = client.post("/v1/estimates", json=body)
    assert answered == [False]
    _same(quick, slow.post("/v1/estimates", json=body))
    if name != "auto":
        assert quick.status_code == 422
        assert quick.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize("payload", [b"{", b"", b"NaN", b"[]", b'{"model": NaN}'])
def test_malformed_json_goes_to_the_route(
    client: TestClient, slow: TestClient, answered: list[bool], payload: bytes
) -> None:
    headers = {"content-type": "application/json"}
    quick = client.post("/v1/estimates", content=payload, headers=headers)
    assert answered == [False]
    _same(quick, slow.post("/v1/estimates", content=payload, headers=headers))
    assert quick.status_code == 422


def test_other_content_types_and_methods_are_not_examined(
    client: TestClient, answered: list[bool]
) -> None:
    text = json.dumps(ESTIMATE_EXAMPLE)
    client.post("/v1/estimates", content=text, headers={"content-type": "text/plain"})
    client.get("/v1/estimates")
    client.post("/v1/parallelism-plans", content=text,
                headers={"content-type": "application/json"})
    assert answered == []


def test_a_fast_answer_is_logged_and_counted_under_its_route(
        client: TestClient, answered: list[bool]) -> None:
    client.post("/v1/estimates", json=ESTIMATE_EXAMPLE)  # warms the accelerator cache
    with json_lines(logging.getLogger("service.access")) as lines:
        answer = client.post("/v1/estimates", json=ESTIMATE_EXAMPLE,
                             headers={"X-Request-ID": "fast-1"})
    assert answered[-1] is True
    assert answer.headers["x-request-id"] == "fast-1"
    assert answer.headers["x-content-type-options"] == "nosniff"
    line = next(x for x in lines if x.get("request_id") == "fast-1")
    assert (line["route"], line["status"]) == ("/v1/estimates", 200)
    metrics = client.get("/metrics").text
    assert ('computequote_http_requests_total{method="POST",route="/v1/estimates",'
            'status="200"} 2.0') in metrics


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seq_len=st.sampled_from([2048, 4096, 8192]),
       batch=st.integers(min_value=1, max_value=4096),
       tokens=st.floats(min_value=1e9, max_value=1e14),
       micro=st.integers(min_value=1, max_value=4),
       recompute=st.sampled_from(["none", "selective", "full"]),
       zero=st.integers(min_value=0, max_value=3))
def test_random_layouts_match(client: TestClient, slow: TestClient, seq_len: int, batch: int,
                              tokens: float, micro: int, recompute: str, zero: int) -> None:
    """Valid or not (a batch the layout cannot split is a 422 from the model), the two
    paths agree."""
    body = _variant(**{"training.seq_len": seq_len, "training.global_batch_seqs": batch,
                       "training.tokens": tokens, "parallelism.micro_batch": micro,
                       "parallelism.recompute": recompute, "parallelism.zero_stage": zero})
    _same(client.post("/v1/estimates", json=body), slow.post("/v1/estimates", json=body))


def _get_fast(client: TestClient, url: str, paged: list[bool], **kwargs: Any) -> Any:
    """GET ``url`` until the fast layer answers it (at most 5 tries): on PostgreSQL a NOTIFY
    from an earlier test's commit may still arrive and end the held values once, which sends
    one request to the route, as it should."""
    for _ in range(5):
        paged.clear()
        answer = client.get(url, **kwargs)
        if paged == [True]:
            return answer
    raise AssertionError(f"the fast layer never answered {url}")


OFFER_QUERIES = [
    "",
    "?accelerator=h100-sxm5-80gb",
    "?accelerator=h100-sxm5-80gb&term=spot&page_size=7",
    "?provider=aws&region=us-east-1&term=on_demand",
    "?version=cv_000001&page_size=200",
]


@pytest.mark.parametrize("query", OFFER_QUERIES)
def test_a_cached_offers_page_is_answered_by_the_layer_with_the_routes_bytes(
    client: TestClient, slow: TestClient, paged: list[bool], query: str
) -> None:
    first = client.get(f"/v1/offers{query}")  # fills the version and page caches
    assert first.status_code == 200, first.text
    quick = _get_fast(client, f"/v1/offers{query}", paged)
    _same(quick, slow.get(f"/v1/offers{query}"))
    assert quick.content == first.content
    # The next page, through the token the first one gave.
    token = first.json()["next_page_token"]
    if token:
        joiner = "&" if query else "?"
        client.get(f"/v1/offers{query}{joiner}page_token={token}")
        again = _get_fast(client, f"/v1/offers{query}{joiner}page_token={token}", paged)
        _same(again, slow.get(f"/v1/offers{query}{joiner}page_token={token}"))


@pytest.mark.parametrize("query", [
    "?accelerator=", "?accelerator=-bad", "?term=forever", "?page_size=0", "?page_size=201",
    "?page_size=05", "?page_size=abc", "?version=cv_1", "?page_token=not-a-token",
    "?accelerator=a&accelerator=b", "?surprise=1", "?accelerator=" + "a" * 65,
])
def test_any_other_offers_query_goes_to_the_route(
    client: TestClient, slow: TestClient, paged: list[bool], query: str
) -> None:
    client.get(f"/v1/offers{query}")
    quick = client.get(f"/v1/offers{query}")
    assert paged[-1] is False
    _same(quick, slow.get(f"/v1/offers{query}"))


def test_a_catalogue_change_is_never_answered_from_a_stale_page(
    client: TestClient, paged: list[bool], migrated_engine: Engine
) -> None:
    """The version id comes from the state cache, which a writer's commit ends: after a new
    version the layer stands aside until the route has read the new one."""
    client.get("/v1/offers?page_size=3")
    _get_fast(client, "/v1/offers?page_size=3", paged)
    app: Any = client.app
    app.state.changes.bump()  # what a writer's commit does (service/catalog/changes.py)
    paged.clear()
    client.get("/v1/offers?page_size=3")
    assert paged == [False]


@pytest.fixture
def committed_key(migrated_engine: Engine) -> Iterator[Any]:
    """Makes committed API keys (the fast layer's app has no session override); removes
    them afterwards."""
    from sqlalchemy import delete
    from sqlalchemy.orm import Session

    from service.catalog.keys import create_key
    from service.catalog.models import ApiKey

    names: list[str] = []

    def make(*scopes: str) -> dict[str, str]:
        name = f"fast-{uuid.uuid4().hex[:8]}"
        with Session(migrated_engine) as session:
            _, key = create_key(session, name=name, scopes=scopes,
                                pepper=Settings().api_key_pepper.get_secret_value())
            session.commit()
        names.append(name)
        return {"Authorization": f"Bearer {key}"}

    yield make
    with Session(migrated_engine) as session:
        session.execute(delete(ApiKey).where(ApiKey.name.in_(names)))
        session.commit()


def test_keys_and_read_auth_are_honoured(
    locked: TestClient, paged: list[bool], committed_key: Any
) -> None:
    """With CQ_REQUIRE_READ_AUTH, no key and an unknown key go to the route (401); a key
    with catalog:read is answered once it is held; one without the scope goes to the route
    (403)."""
    reader = committed_key("catalog:read")
    other = committed_key("quotes:read")
    assert locked.get("/v1/offers?page_size=2").status_code == 401
    assert locked.get("/v1/offers?page_size=2",
                      headers={"Authorization": "Bearer cq_nope"}).status_code == 401
    assert locked.get("/v1/offers?page_size=2", headers=reader).status_code == 200
    answer = _get_fast(locked, "/v1/offers?page_size=2", paged, headers=reader)
    assert answer.status_code == 200
    assert locked.get("/v1/offers?page_size=2", headers=other).status_code == 403
    assert paged[-1] is False
    assert locked.get("/v1/offers?page_size=2").status_code == 401
    assert paged[-1] is False
