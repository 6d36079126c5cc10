"""Issue 36, Medium 2: one text rule for every stored string, and bounded money.

- Every ``str`` leaf of every request model (found by walking the pydantic models, so a new
  field is covered without editing this file) refuses a NUL and a lone surrogate.
- Every write endpoint, on SQLite and PostgreSQL, answers a NUL or a lone surrogate in any
  of its body's string fields with a 422 problem naming that field, and stores nothing (before:
  500 on PostgreSQL, stored silently on SQLite).
- Imports and refreshes, whose rows are not pydantic models, apply the same rule and name the
  row and the column; a refresh's prices are bounded before any Decimal rounding (before: a
  SkyPilot ``Price`` of 1e308 was a 500, dry run or not); a JSON import refuses numeric
  strings, as the README says (before: stored).
- Serving costs: a tiny or huge load, with a price, is never a 500 (before: quantize overflow).
"""

from __future__ import annotations

import copy
import importlib
import json
import pkgutil
import types
import typing
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from pydantic import BaseModel, TypeAdapter, ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

import service.api.schemas
from service.api.schemas.catalog import ACCELERATOR_EXAMPLE
from service.api.schemas.common import RequestModel
from service.api.schemas.discounts import DISCOUNT_BOOK_EXAMPLE
from service.api.schemas.estimate import ESTIMATE_EXAMPLE
from service.api.schemas.plans import PLAN_SEARCH_EXAMPLE
from service.api.schemas.policies import POLICY_EXAMPLE
from service.api.schemas.portfolios import PORTFOLIO_EXAMPLE
from service.api.schemas.quotes import BUDGET_PLAN_EXAMPLE, QUOTE_EXAMPLE
from service.api.schemas.serving import (
    MAX_COST_FIGURE_USD,
    SERVING_EXAMPLE,
    SERVING_PLAN_EXAMPLE,
    _serving_cost,
)
from service.catalog.models import (
    Accelerator,
    CatalogVersion,
    DiscountBookRevision,
    FxVersion,
    OfferRevision,
    PolicyRevision,
    Portfolio,
    Quote,
)
from service.catalog.offers import CONTENT_COLUMNS
from service.catalog.prices import NUMBER_COLUMNS
from service.main import create_app

BAD = {"nul": "a\x00b", "surrogate": "a\ud800b"}
OUR_CODES = {"string_control_character", "string_unicode", "string_pattern_mismatch"}

for _module in pkgutil.iter_modules(service.api.schemas.__path__):
    importlib.import_module(f"service.api.schemas.{_module.name}")


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


REQUEST_MODELS = sorted(set(_subclasses(RequestModel)), key=lambda m: m.__qualname__)


def _unwrap(tp: Any) -> Any:
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif hasattr(tp, "__value__"):  # a TypeAliasType
            tp = tp.__value__
        else:
            return tp


def _members(tp: Any) -> list[Any]:
    tp = _unwrap(tp)
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(tp) for m in _members(a)]
    return [tp]


def _bad_values(tp: Any, bad: str) -> Iterator[Any]:
    """Values of type ``tp`` with ``bad`` at one string leaf (nested models are checked as
    models of their own)."""
    for member in _members(tp):
        origin = typing.get_origin(member)
        if member is str:
            yield bad
        elif origin in (list, set, frozenset, tuple):
            for item in _bad_values(typing.get_args(member)[0], bad):
                yield [item]
        elif origin is dict:
            key, value = typing.get_args(member)
            for item in _bad_values(key, bad):
                yield {item: "1"}
            for item in _bad_values(value, bad):
                yield {"k": item}


def _leaf_cases() -> Iterator[tuple[type[BaseModel], str, str]]:
    for model in REQUEST_MODELS:
        for name, info in model.model_fields.items():
            if any(True for _ in _bad_values(info.annotation, "x")):
                for label in BAD:
                    yield model, name, label


@pytest.mark.parametrize(("model", "name", "label"), list(_leaf_cases()),
                         ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
def test_every_string_field_of_every_request_model_refuses_bad_text(
    model: type[BaseModel], name: str, label: str,
) -> None:
    info = model.model_fields[name]
    adapter: TypeAdapter[Any] = TypeAdapter(typing.Annotated[info.annotation, info])
    for value in _bad_values(info.annotation, BAD[label]):
        with pytest.raises(ValidationError) as caught:
            adapter.validate_python(value)
        codes = {e["type"] for e in caught.value.errors()}
        assert codes & OUR_CODES, (model.__name__, name, value, codes)


def test_the_discovery_finds_the_reproducers_fields() -> None:
    found = {(m.__name__, n) for m, n, _ in _leaf_cases()}
    assert {("AcceleratorIn", "vendor"), ("AcceleratorIn", "name"),
            ("AcceleratorIn", "price_basis"), ("AcceleratorIn", "source"),
            ("PolicyIn", "description"), ("PolicyRevisionIn", "description"),
            ("DiscountBookIn", "description"), ("DiscountBookRevisionIn", "description"),
            ("OfferUpdate", "source"), ("ModelIn", "name")} <= found


# --- every write endpoint, both backends -------------------------------------------------------

EXAMPLES: dict[str, dict[str, Any]] = {
    "AcceleratorIn": ACCELERATOR_EXAMPLE, "PolicyIn": POLICY_EXAMPLE,
    "PolicyRevisionIn": {k: v for k, v in POLICY_EXAMPLE.items() if k != "name"},
    "DiscountBookIn": DISCOUNT_BOOK_EXAMPLE,
    "DiscountBookRevisionIn": {k: v for k, v in DISCOUNT_BOOK_EXAMPLE.items() if k != "name"},
    "OfferUpdate": {"price_per_hour": "52.000000", "source": "s", "as_of": "2026-11-20",
                    "indicative": False},
    "QuoteRequest": QUOTE_EXAMPLE, "BudgetPlanRequest": BUDGET_PLAN_EXAMPLE,
    "EstimateRequest": ESTIMATE_EXAMPLE, "PlanSearchRequest": PLAN_SEARCH_EXAMPLE,
    "ServingRequest": SERVING_EXAMPLE, "ServingPlanRequest": SERVING_PLAN_EXAMPLE,
    "PortfolioRequest": PORTFOLIO_EXAMPLE,
    "PortfolioWhatIfIn": {"change": "price", "factor": 0.9, "term": "reserved_3y"},
}
PATH_VALUES = {"name": "nope", "offer_id": "off_" + "0" * 24, "portfolio_id": "pf_" + "0" * 32}


def _leaf_routes(routes: Any) -> Iterator[Any]:
    """Every route, those inside included routers too (``original_router``)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is not None:
            yield from _leaf_routes(inner.routes)
        else:
            yield route


def _body_routes() -> list[tuple[str, str, type[BaseModel]]]:
    routes = []
    for route in _leaf_routes(create_app().routes):
        if not isinstance(route, APIRoute) or not route.dependant.body_params:
            continue
        model = route.dependant.body_params[0].field_info.annotation
        if isinstance(model, type) and issubclass(model, RequestModel):
            for method in sorted(route.methods & {"POST", "PUT", "PATCH"}):
                routes.append((method, route.path_format.format(**PATH_VALUES), model))
    return routes


def _string_paths(model: type[BaseModel], prefix: tuple[Any, ...] = (),
                  depth: int = 0) -> Iterator[tuple[Any, ...]]:
    """Every path to a string leaf of the model's body (lists at index 0; dict keys are
    covered by the model test above)."""
    for name, info in model.model_fields.items():
        path = (*prefix, name)
        for member in _members(info.annotation):
            origin = typing.get_origin(member)
            item = _unwrap(typing.get_args(member)[0]) if origin is list else None
            if member is str:
                yield path
            elif isinstance(member, type) and issubclass(member, BaseModel) and depth < 6:
                yield from _string_paths(member, path, depth + 1)
            elif item is str:
                yield (*path, 0)
            elif isinstance(item, type) and issubclass(item, BaseModel) and depth < 6:
                yield from _string_paths(item, (*path, 0), depth + 1)


def _with(body: dict[str, Any], path: tuple[Any, ...], value: str) -> dict[str, Any]:
    out = copy.deepcopy(body)
    node: Any = out
    for part, after in zip(path, (*path[1:], None), strict=True):
        if after is None:
            if isinstance(node, list):
                node[:] = [value]
            else:
                node[part] = value
            break
        child = node[part] if (isinstance(node, list) and node) or (
            isinstance(node, dict) and part in node) else None
        wanted: type = list if isinstance(after, int) else dict
        if not isinstance(child, wanted) or (wanted is list and not child):
            child = [{}] if wanted is list else {}
        if isinstance(node, list):
            node[:] = [child]
        else:
            node[part] = child
        node = child
    return out


def _endpoint_cases() -> Iterator[tuple[str, str, str, tuple[Any, ...]]]:
    for method, url, model in _body_routes():
        paths = sorted(set(_string_paths(model)), key=str)
        assert paths, (method, url)
        for path in paths:
            yield method, url, model.__name__, path


ENDPOINT_CASES = list(_endpoint_cases())


def test_every_write_endpoint_is_covered() -> None:
    urls = {(m, u) for m, u, _, _ in ENDPOINT_CASES}
    assert {("POST", "/v1/accelerators"), ("POST", "/v1/policies"), ("PUT", "/v1/policies/nope"),
            ("POST", "/v1/discount-books"), ("PUT", "/v1/discount-books/nope"),
            ("PUT", "/v1/offers/off_" + "0" * 24), ("POST", "/v1/quotes"),
            ("POST", "/v1/portfolios"),
            ("POST", "/v1/portfolios/pf_" + "0" * 32 + "/what-if")} <= urls


def _counts(session: Session) -> tuple[int, ...]:
    return tuple(session.scalar(select(func.count()).select_from(m)) or 0 for m in (
        Accelerator, PolicyRevision, DiscountBookRevision, CatalogVersion, OfferRevision, Quote,
        FxVersion, Portfolio))


@pytest.fixture
def writer(api_key: Callable[..., dict[str, str]]) -> dict[str, str]:
    return api_key("catalog:write", "policies:write", "discounts:write", "quotes:write",
                   "calibrations:write")


def _named(problem: dict[str, Any], field: str) -> bool:
    names = [e.get("field") for e in problem.get("errors") or []] + [problem.get("field")]
    return any(n == field or (n or "").startswith(field + ".") for n in names)


ENDPOINTS = sorted({(m, u, model): None for m, u, model, _ in ENDPOINT_CASES})
"""One test per write endpoint and backend, each trying every string path of its body with
each bad text (before: one test per path, 262 in all, each paying for its own app, key and
row counts; every request and assertion is the same)."""


@pytest.mark.parametrize(("method", "url", "model"), ENDPOINTS,
                         ids=lambda v: v if isinstance(v, str) else str(v))
def test_bad_text_in_any_body_field_is_a_named_422_and_nothing_is_stored(
    client: TestClient, db_session: Session, writer: dict[str, str], method: str, url: str,
    model: str,
) -> None:
    paths = [p for m, u, name, p in ENDPOINT_CASES if (m, u, name) == (method, url, model)]
    assert paths
    before = _counts(db_session)
    failures: list[tuple[Any, ...]] = []
    for path in paths:
        field = ".".join(map(str, path))
        for label, bad in BAD.items():
            body = _with(EXAMPLES.get(model, {}), path, bad)
            response = client.request(method, url, content=json.dumps(body), headers={
                **writer, "Content-Type": "application/json", "If-Match": '"r1"',
                "Idempotency-Key": uuid.uuid4().hex})
            if response.status_code != 422:
                failures.append((label, field, response.status_code, response.text[:300]))
            elif response.headers["content-type"] != "application/problem+json":
                failures.append((label, field, response.headers["content-type"]))
            elif not _named(response.json(), field):
                failures.append((label, field, response.json()))
    assert failures == []
    assert _counts(db_session) == before  # nothing stored for any path


@pytest.mark.parametrize("label", list(BAD))
@pytest.mark.parametrize("field", ["vendor", "name", "price_basis", "source", "notes"])
def test_reproducer_accelerator_text(client: TestClient, db_session: Session,
                                     writer: dict[str, str], label: str, field: str) -> None:
    before = _counts(db_session)
    body = {**ACCELERATOR_EXAMPLE, "id": "repro-npu", field: BAD[label]}
    response = client.post("/v1/accelerators", content=json.dumps(body),
                           headers={**writer, "Content-Type": "application/json"})
    assert response.status_code == 422
    assert _named(response.json(), field)
    error = next(e for e in response.json()["errors"] if e["field"] == field)
    assert error["code"] in {"string_control_character", "string_unicode"}
    assert BAD[label] not in response.text  # the input is not echoed
    assert _counts(db_session) == before


# --- imports, refreshes and notes ------------------------------------------------------------

ROW: dict[str, Any] = {
    "provider": "acme", "region": "eu-1", "instance_type": "gpu-8x-h100",
    "accelerator": "h100-sxm5-80gb", "gpus_per_instance": 8, "term": "on_demand",
    "currency": "USD", "price_per_hour": "20.00", "source": "ACME price list 2026-11",
    "as_of": "2026-11-01", "indicative": False, "notes": "",
}


def _import(client: TestClient, headers: dict[str, str], rows: list[dict[str, Any]],
            **params: str) -> Any:
    return client.post("/v1/catalog/imports", params={"mode": "patch", **params},
                       content=json.dumps({"offers": rows}),
                       headers={**headers, "Content-Type": "application/json"})


def _row_error(response: Any, field: str, row: int = 1) -> dict[str, Any]:
    assert response.status_code == 422, response.text[:300]
    assert response.headers["content-type"] == "application/problem+json"
    errors = [e for e in response.json()["errors"] if e["field"] == field
              and e.get("row") == row]
    assert errors, response.json()
    return errors[0]


@pytest.mark.parametrize("label", list(BAD))
def test_bad_text_in_any_json_import_column_names_the_row_and_column(
    client: TestClient, db_session: Session, writer: dict[str, str], label: str,
) -> None:
    """Every content column in one test per text (before: one test per column)."""
    before = _counts(db_session)
    for column in CONTENT_COLUMNS:
        response = _import(client, writer, [ROW, {**ROW, "instance_type": "gpu-2", column:
                                                  BAD[label]}])
        try:
            _row_error(response, column, row=2)
        except AssertionError as exc:
            raise AssertionError(f"column {column}: {exc}") from exc
    assert _counts(db_session) == before


def test_reproducer_lone_surrogate_in_an_imports_source(
    client: TestClient, db_session: Session, writer: dict[str, str],
) -> None:
    before = _counts(db_session)
    error = _row_error(_import(client, writer, [{**ROW, "source": "\ud800"}]), "source")
    assert error["code"] == "string_unicode"
    assert _counts(db_session) == before


def test_a_bad_column_name_is_refused_without_echoing_it(
    client: TestClient, db_session: Session, writer: dict[str, str],
) -> None:
    before = _counts(db_session)
    response = _import(client, writer, [{**ROW, "a\ud800": "x"}])
    _row_error(response, "row")
    assert _counts(db_session) == before


def test_a_nul_in_a_csv_import_names_the_row_and_column(
    client: TestClient, db_session: Session, writer: dict[str, str],
) -> None:
    before = _counts(db_session)
    header = ",".join(ROW)
    line = ",".join("false" if v is False else str(v) for v in {**ROW, "notes": "a\x00b"}
                    .values())
    response = client.post("/v1/catalog/imports", params={"mode": "patch"},
                           content=f"{header}\n{line}\n".encode(),
                           headers={**writer, "Content-Type": "text/csv"})
    assert _row_error(response, "notes")["code"] == "string_control_character"
    assert _counts(db_session) == before


@pytest.mark.parametrize("column", NUMBER_COLUMNS)
def test_a_json_import_refuses_numeric_strings(
    client: TestClient, db_session: Session, writer: dict[str, str], column: str,
) -> None:
    """README: "NaN, infinities, numeric strings, booleans given as numbers ... are all 422";
    a JSON export writes these columns as numbers."""
    before = _counts(db_session)
    row = {**ROW, column: "8", "fabric_source": "doc", "region_carbon_source": "doc"}
    assert _row_error(_import(client, writer, [row]), column)["code"] == "float_type"
    assert _counts(db_session) == before


SKYPILOT = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,SpotPrice,"
            "Region,AvailabilityZone\n"
            "p5.48xlarge,H100,8.0,192.0,2048.0,55.04,19.3212,us-east-1,use1-az4\n"
            "p4d.24xlarge,A100,8.0,96.0,1152.0,{price},{spot},us-east-1,use1-az1\n")
BAD_PRICES = ["1e308", "inf", "-inf", "1e400", "-1", "NaN", "1000001", "9" * 400, "abc"]


def _refresh(client: TestClient, headers: dict[str, str], body: str, fmt: str,
             **params: str) -> Any:
    media = "text/csv" if fmt == "skypilot" else "application/json"
    return client.post("/v1/catalog/refreshes", params={"format": fmt, **params},
                       content=body.encode(), headers={**headers, "Content-Type": media})


@pytest.mark.parametrize("dry_run", ["true", "false"])
@pytest.mark.parametrize("column", ["Price", "SpotPrice"])
def test_a_skypilot_refresh_bounds_its_prices(
    client: TestClient, db_session: Session, writer: dict[str, str], column: str,
    dry_run: str,
) -> None:
    """Every bad price in one test per column and mode (before: one test per price)."""
    before = _counts(db_session)
    for price in BAD_PRICES:
        body = SKYPILOT.format(price=price if column == "Price" else "21.957642",
                               spot=price if column == "SpotPrice" else "2.4655")
        response = _refresh(client, writer, body, "skypilot", provider="aws", dry_run=dry_run)
        try:
            assert _row_error(response, column, row=2)["code"] == "out_of_range"
        except AssertionError as exc:
            raise AssertionError(f"price {price[:20]}: {exc}") from exc
    assert _counts(db_session) == before


@pytest.mark.parametrize("price", [1e308, 1e300, -1.0, 10**400])
def test_json_refreshes_bound_their_prices(
    client: TestClient, db_session: Session, writer: dict[str, str], price: float,
) -> None:
    before = _counts(db_session)
    azure = {"Items": [{"serviceName": "Virtual Machines", "armSkuName":
                        "Standard_ND96isr_H100_v5", "productName": "Virtual Machines ND",
                        "unitOfMeasure": "1 Hour", "retailPrice": price, "type": "Consumption",
                        "skuName": "ND96isr H100 v5", "armRegionName": "eastus",
                        "currencyCode": "USD"}]}
    response = _refresh(client, writer, json.dumps(azure), "azure", dry_run="true")
    _row_error(response, "retailPrice")
    assert _counts(db_session) == before


@pytest.mark.parametrize("nanos", [10**308, -1, 1e9, "x"])
def test_a_gcp_refresh_bounds_nanos(
    client: TestClient, db_session: Session, writer: dict[str, str], nanos: Any,
) -> None:
    sku = {"skuId": "A", "description": "Nvidia H100 80GB GPU running in Americas",
           "category": {"resourceFamily": "Compute", "usageType": "OnDemand"},
           "serviceRegions": ["us-central1"], "pricingInfo": [{"pricingExpression": {
               "tieredRates": [{"startUsageAmount": 0, "unitPrice": {
                   "currencyCode": "USD", "units": "1", "nanos": nanos}}]}}]}
    response = _refresh(client, writer, json.dumps({"skus": [sku]}), "gcp", dry_run="true")
    assert response.status_code == 422, response.text[:300]
    _row_error(response, "unitPrice.nanos")


@pytest.mark.parametrize("url", ["/v1/catalog/imports", "/v1/catalog/refreshes",
                                 "/v1/fx-rates/imports"])
def test_a_nul_in_a_version_note_is_refused(
    client: TestClient, db_session: Session, writer: dict[str, str], url: str,
) -> None:
    before = _counts(db_session)
    bodies = {"/v1/catalog/imports": ("application/json", json.dumps({"offers": [ROW]})),
              "/v1/catalog/refreshes": ("text/csv", SKYPILOT.format(price="21.9", spot="2.4")),
              "/v1/fx-rates/imports": ("text/csv", "Date,USD,\n2025-06-02,1.1444,\n")}
    media, content = bodies[url]
    params = {"note": "a\x00b", "format": "skypilot", "provider": "aws"} if "refresh" in url \
        else {"note": "a\x00b"}
    response = client.post(url, params=params, content=content.encode(),
                           headers={**writer, "Content-Type": media})
    assert response.status_code == 422, response.text[:300]
    assert _named(response.json(), "note")
    assert _counts(db_session) == before


# --- money bounded before Decimal -------------------------------------------------------------

@pytest.mark.parametrize("requests_per_s", [5e-324, 1e-300, 1e-30, 1e-7, 1e-6, 1e6])
def test_tiny_and_huge_loads_with_a_price_are_never_5xx(
    client: TestClient, requests_per_s: float,
) -> None:
    plan = copy.deepcopy(SERVING_PLAN_EXAMPLE)
    plan["traffic"]["requests_per_s"] = requests_per_s
    estimate = copy.deepcopy(SERVING_EXAMPLE)
    estimate["traffic"]["requests_per_s"] = requests_per_s
    estimate["deployment"]["price_per_gpu_hour_usd"] = "2.50"
    for url, body in (("/v1/serving-plans", plan), ("/v1/serving-estimates", estimate)):
        response = client.post(url, json=body)
        assert response.status_code < 500, (url, requests_per_s, response.text[:300])
        if requests_per_s < 1e-6:
            assert response.status_code == 422
            assert _named(response.json(), "traffic.requests_per_s")
        else:
            assert response.status_code == 200, response.text[:300]


@pytest.mark.parametrize(("url", "body", "field"), [
    ("/v1/serving-estimates", {**SERVING_EXAMPLE, "deployment": {
        **SERVING_EXAMPLE["deployment"], "price_per_gpu_hour_usd": "9999999999999.999999"}},
     "deployment.price_per_gpu_hour_usd"),
    ("/v1/serving-plans", {**SERVING_PLAN_EXAMPLE, "price_per_gpu_hour_usd": "1000000.01"},
     "price_per_gpu_hour_usd"),
    ("/v1/parallelism-plans", {**PLAN_SEARCH_EXAMPLE, "training": {
        **PLAN_SEARCH_EXAMPLE["training"], "tokens": 1e18}, "constraints": {
        "price_per_gpu_hour_usd": "9999999999999.999999"}}, "constraints.price_per_gpu_hour_usd"),
])
def test_a_price_per_gpu_hour_is_bounded(client: TestClient, url: str, body: dict[str, Any],
                                          field: str) -> None:
    """Before: the parallelism plan's cost (GPU-hours x 10^13) overflowed quantize: 500."""
    response = client.post(url, json=body)
    assert response.status_code == 422, response.text[:300]
    assert _named(response.json(), field)
    assert "1000000" in response.text


@pytest.mark.parametrize(("field", "value"), [
    ("bf16_tflops", 1e-300), ("hbm_tbytes_per_s", 1e-300), ("scaleup_gbytes_per_s", 1e-300),
    ("scaleout_gbits_per_s", 1e-300), ("memory_gib", 1e-300), ("tdp_w", 1e-300),
    ("purchase_price_usd", "9999999999999.999999"),
])
def test_an_accelerator_that_would_overflow_every_cost_is_refused(
    client: TestClient, db_session: Session, writer: dict[str, str], field: str, value: Any,
) -> None:
    """Before: 1e-300 TFLOP/s was stored (then every plan, quote and serving estimate on it
    was a 500), and a purchase price of 10^13 overflowed its 64-bit micro-units column."""
    before = _counts(db_session)
    response = client.post("/v1/accelerators", headers=writer,
                           json={**ACCELERATOR_EXAMPLE, "id": "slow-npu", field: value})
    assert response.status_code == 422, response.text[:300]
    assert _named(response.json(), field)
    assert _counts(db_session) == before


def test_a_cost_figure_past_the_bound_is_null_with_a_warning() -> None:
    cost, warnings = _serving_cost("1000000", 10**10, 1e-300, 1e-300)
    assert cost.usd_per_million_output_tokens is None
    assert cost.usd_per_million_total_tokens is None
    assert cost.usd_per_hour is None  # 10^16 USD per hour
    assert warnings
    assert "not given" in warnings[0]
    cost, warnings = _serving_cost("2.50", 4, 2560.0, 12800.0)
    assert (cost.usd_per_hour, warnings) == ("10.00", [])
    assert Decimal(cost.usd_per_million_output_tokens or "0") < MAX_COST_FIGURE_USD
