"""Response examples for the OpenAPI document: ``python -m service.api.examples``.

Every operation's success response carries an example (issue 41: none of 36 had one, so a
reader of the document or of a generated client saw shapes, never a value). The examples are
real answers, not hand-written ones: this module runs each operation's documented request (the
schemas' ``*_EXAMPLE`` bodies) against the app on a fresh, seeded SQLite database, in the
order that makes the ids the later requests need, and writes what came back to
``service/api/response_examples.json`` (operationId -> {status, media type, example}).
``service.api.openapi`` puts them in the document; ``tests/api/test_openapi.py`` checks that
every operation has one and that each validates against its response schema, so a schema
change that the stored example no longer fits fails there (then run this again).

Long lists are cut to ``MAX_ITEMS`` entries and long text to ``MAX_TEXT_CHARS`` characters:
an example shows the shape and real values, not 274 quote lines.
"""

from __future__ import annotations

import json
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

EXAMPLES_PATH = Path(__file__).with_name("response_examples.json")
MAX_ITEMS = 2
MAX_TEXT_CHARS = 600


def trimmed(value: Any, depth: int = 0) -> Any:
    """``value`` with lists cut to ``MAX_ITEMS`` entries at the top two levels and to one
    below them, maps of records to ``MAX_ITEMS`` entries, and strings to
    ``MAX_TEXT_CHARS``."""
    if isinstance(value, list):
        keep = MAX_ITEMS if depth < 2 else 1
        return [trimmed(v, depth + 1) for v in value[:keep]]
    if isinstance(value, dict):
        items = list(value.items())
        if depth >= 1 and len(items) > MAX_ITEMS and all(isinstance(v, dict) for _, v in items):
            items = items[:MAX_ITEMS]  # a map of records (the cheapest line per term)
        return {k: trimmed(v, depth + 1) for k, v in items}
    if isinstance(value, str) and len(value) > MAX_TEXT_CHARS:
        return value[:MAX_TEXT_CHARS]
    return value


def load() -> dict[str, dict[str, Any]]:
    """The stored examples (empty when the file is absent: a partial checkout)."""
    if not EXAMPLES_PATH.exists():
        return {}
    loaded: dict[str, dict[str, Any]] = json.loads(EXAMPLES_PATH.read_text())
    return loaded


def collect() -> dict[str, dict[str, Any]]:
    from fastapi.testclient import TestClient
    from sqlalchemy.orm import Session

    from service.api.routes.fx import CSV_EXAMPLE
    from service.api.schemas.calibrations import CALIBRATION_EXAMPLE
    from service.api.schemas.catalog import ACCELERATOR_EXAMPLE
    from service.api.schemas.discounts import DISCOUNT_BOOK_EXAMPLE
    from service.api.schemas.estimate import ESTIMATE_EXAMPLE
    from service.api.schemas.plans import PLAN_SEARCH_EXAMPLE
    from service.api.schemas.policies import POLICY_EXAMPLE
    from service.api.schemas.portfolios import PORTFOLIO_EXAMPLE
    from service.api.schemas.quotes import BUDGET_PLAN_EXAMPLE, QUOTE_EXAMPLE
    from service.api.schemas.serving import SERVING_EXAMPLE, SERVING_PLAN_EXAMPLE
    from service.api.schemas.whatifs import WHAT_IF_EXAMPLE
    from service.catalog.db import make_engine
    from service.catalog.keys import create_key
    from service.catalog.migrate import migrate_and_seed
    from service.catalog.scopes import SCOPES
    from service.main import create_app, dispose
    from service.settings import Settings

    url = f"sqlite:///{tempfile.mkdtemp(prefix='cq-examples-')}/examples.sqlite3"
    migrate_and_seed(url)
    settings = Settings(database_url=url, search_workers=0, warm_up=False)
    engine = make_engine(url)
    with Session(engine) as session:
        _, key = create_key(session, name="examples", scopes=list(SCOPES),
                            pepper=settings.api_key_pepper.get_secret_value())
        session.commit()
    engine.dispose()
    auth = {"Authorization": f"Bearer {key}"}
    found: dict[str, dict[str, Any]] = {}
    app = create_app(settings)

    with TestClient(app) as client:
        def call(operation: str, method: str, path: str, **kwargs: Any) -> Any:
            headers = {**auth, **kwargs.pop("headers", {})}
            answer = client.request(method, path, headers=headers, **kwargs)
            if not 200 <= answer.status_code < 300:
                raise RuntimeError(f"{operation}: {answer.status_code} {answer.text[:500]}")
            media = answer.headers.get("content-type", "").split(";")[0]
            body: Any = (answer.json() if media.endswith("json") else answer.text)
            found[operation] = {"status": str(answer.status_code), "media_type": media,
                                "example": trimmed(body)}
            return body

        call("get_liveness", "GET", "/livez")
        call("get_readiness", "GET", "/readyz")
        call("get_metrics", "GET", "/metrics")
        call("list_models", "GET", "/v1/models", params={"page_size": 3})
        call("list_accelerators", "GET", "/v1/accelerators", params={"page_size": 3})
        call("get_accelerator", "GET", "/v1/accelerators/h100-sxm5-80gb")
        call("create_accelerator", "POST", "/v1/accelerators", json=ACCELERATOR_EXAMPLE)
        call("create_estimate", "POST", "/v1/estimates", json=ESTIMATE_EXAMPLE)
        call("create_what_if", "POST", "/v1/what-ifs", json=WHAT_IF_EXAMPLE)
        call("optimise_parallelism", "POST", "/v1/parallelism-plans", json=PLAN_SEARCH_EXAMPLE)
        call("estimate_serving", "POST", "/v1/serving-estimates", json=SERVING_EXAMPLE)
        call("plan_serving", "POST", "/v1/serving-plans", json=SERVING_PLAN_EXAMPLE)
        offers = call("list_offers", "GET", "/v1/offers",
                      params={"accelerator": "h100-sxm5-80gb", "page_size": 3})
        offer_id = offers["items"][0]["id"]
        offer = client.get(f"/v1/offers/{offer_id}", headers=auth)
        call("get_offer", "GET", f"/v1/offers/{offer_id}")
        call("update_offer", "PUT", f"/v1/offers/{offer_id}",
             headers={"If-Match": offer.headers["etag"]},
             json={key: offer.json()[key] for key in (
                 "price_per_hour", "upfront_fee", "interruption_rate_per_hour",
                 "interruption_rate_source", "region_carbon_g_per_kwh",
                 "region_carbon_source", "source", "as_of", "indicative", "notes")}
             | {"note": "example: the same price, read again"})
        versions = call("list_catalog_versions", "GET", "/v1/catalog/versions",
                        params={"page_size": 2})
        version_id = versions["items"][0]["id"]
        call("get_catalog_version", "GET", f"/v1/catalog/versions/{version_id}")
        exported = call("export_catalog_version", "GET",
                        f"/v1/catalog/versions/{version_id}/export")
        header, first = exported.splitlines()[:2]
        call("import_catalog", "POST", "/v1/catalog/imports",
             params={"mode": "patch", "note": "example"}, content=f"{header}\n{first}\n",
             headers={"Content-Type": "text/csv"})
        skypilot = ("InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,"
                    "SpotPrice,Region,AvailabilityZone\n"
                    "p5.48xlarge,H100,8.0,192.0,2048.0,55.04,,us-east-1,\n")
        call("refresh_catalog", "POST", "/v1/catalog/refreshes",
             params={"format": "skypilot", "provider": "aws", "dry_run": "true"},
             content=skypilot, headers={"Content-Type": "text/csv"})
        call("import_fx_rates", "POST", "/v1/fx-rates/imports", content=CSV_EXAMPLE,
             headers={"Content-Type": "text/csv"})
        call("get_fx_rates", "GET", "/v1/fx-rates")
        call("create_policy", "POST", "/v1/policies", json=POLICY_EXAMPLE)
        name = POLICY_EXAMPLE["name"]
        call("list_policies", "GET", "/v1/policies", params={"page_size": 2})
        policy = client.get(f"/v1/policies/{name}", headers=auth)
        call("get_policy", "GET", f"/v1/policies/{name}")
        update = {k: v for k, v in POLICY_EXAMPLE.items() if k != "name"}
        call("update_policy", "PUT", f"/v1/policies/{name}",
             headers={"If-Match": policy.headers["etag"]}, json=update)
        call("create_discount_book", "POST", "/v1/discount-books", json=DISCOUNT_BOOK_EXAMPLE)
        book = DISCOUNT_BOOK_EXAMPLE["name"]
        call("list_discount_books", "GET", "/v1/discount-books")
        current = client.get(f"/v1/discount-books/{book}", headers=auth)
        call("get_discount_book", "GET", f"/v1/discount-books/{book}")
        call("update_discount_book", "PUT", f"/v1/discount-books/{book}",
             headers={"If-Match": current.headers["etag"]},
             json={k: v for k, v in DISCOUNT_BOOK_EXAMPLE.items() if k != "name"})
        call("create_calibration", "POST", "/v1/calibrations",
             headers={"Idempotency-Key": uuid.uuid4().hex}, json=CALIBRATION_EXAMPLE)
        calibrations = call("list_calibrations", "GET", "/v1/calibrations")
        call("get_calibration", "GET", f"/v1/calibrations/{calibrations['items'][0]['id']}")
        quote = call("create_quote", "POST", "/v1/quotes",
                     headers={"Idempotency-Key": uuid.uuid4().hex}, json=QUOTE_EXAMPLE)
        quote_id = quote["id"]
        call("get_quote", "GET", f"/v1/quotes/{quote_id}")
        call("list_quotes", "GET", "/v1/quotes", params={"page_size": 2})
        call("list_quote_lines", "GET", f"/v1/quotes/{quote_id}/lines",
             params={"page_size": 2})
        call("verify_quote", "POST", f"/v1/quotes/{quote_id}/verify")
        call("requote_quote", "POST", f"/v1/quotes/{quote_id}/requote",
             headers={"Idempotency-Key": uuid.uuid4().hex})
        call("plan_budget", "POST", "/v1/budget-plans", json=BUDGET_PLAN_EXAMPLE)
        portfolio = call("create_portfolio", "POST", "/v1/portfolios",
                         headers={"Idempotency-Key": uuid.uuid4().hex}, json=PORTFOLIO_EXAMPLE)
        call("get_portfolio", "GET", f"/v1/portfolios/{portfolio['id']}")
        call("verify_portfolio", "POST", f"/v1/portfolios/{portfolio['id']}/verify")
        call("what_if_portfolio", "POST", f"/v1/portfolios/{portfolio['id']}/what-if",
             json={"change": "price", "term": "on_demand", "factor": 0.9})
    dispose(app)
    return found


def main() -> int:
    examples = collect()
    EXAMPLES_PATH.write_text(json.dumps(examples, indent=1, sort_keys=True) + "\n")
    sys.stdout.write(f"{len(examples)} response examples written to {EXAMPLES_PATH}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
