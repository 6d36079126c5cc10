"""The procurement examples of issue 13, as a new user would send them: what each quote
answers (verdict, recommended line, commitment, reason codes). ``python -m
benchmarks.quote_examples`` prints one line per example; the figures go in the resolving note
and ``docs/pricing.md``."""

from __future__ import annotations

import json
import sys
import tempfile
import uuid
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.catalog.db import make_engine
from service.catalog.keys import create_key
from service.catalog.migrate import migrate_and_seed
from service.main import create_app
from service.settings import Settings

LLAMA_70B_1024: dict[str, Any] = {"estimate": {
    "model": {"preset": "llama3.1-70b"},
    "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 1024},
    "parallelism": {"tp": 8, "pp": 4, "dp": 32},
    "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 15e12}}}

EXAMPLES: dict[str, tuple[str, dict[str, Any]]] = {
    "70B 15T on 1,024 H100, 5M USD": ("/v1/quotes", {
        "workload": LLAMA_70B_1024, "budget": {"amount": "5000000.00", "currency": "USD"}}),
    "70B 15T on 1,024 H100, 10,000 USD": ("/v1/quotes", {
        "workload": LLAMA_70B_1024, "budget": {"amount": "10000.00", "currency": "USD"}}),
    "70B, 5M USD, amortised at 0.5 use": ("/v1/quotes", {
        "workload": LLAMA_70B_1024, "budget": {"amount": "5000000.00", "currency": "USD"},
        "accounting": "amortised", "reservation_utilisation_fraction": "0.5"}),
    "TP8 plan, on-demand only": ("/v1/quotes", {
        "workload": LLAMA_70B_1024, "terms": ["on_demand"],
        "budget": {"amount": "50000000.00", "currency": "USD"}}),
    "AWS spot, 512 H100 in one zone": ("/v1/quotes", {
        "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 250000,
                                   "num_gpus": 512}},
        "providers": ["aws"], "terms": ["spot"],
        "budget": {"amount": "10000000.00", "currency": "USD"}}),
    "budget plan, 1M USD, 8B": ("/v1/budget-plans", {
        "model": {"preset": "llama3.1-8b"},
        "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 1e12},
        "clusters": [{"accelerator": "h100-sxm5-80gb", "num_gpus": 512}],
        "budget": {"amount": "1000000.00", "currency": "USD"},
        "terms": ["on_demand", "reserved_1y"]}),
}


def _summary(answer: dict[str, Any]) -> dict[str, Any]:
    if "soonest_within_budget" in answer:
        best = (answer["soonest_within_budget"] or [None])[0]
        return {"within_budget": len(answer["soonest_within_budget"]),
                "first": None if best is None else {
                    k: best[k] for k in ("provider", "instance_type", "term", "num_gpus",
                                         "commitment_total", "job_cost_total")},
                "explanation": answer["explanation"]}
    rec = answer["recommended"] or {}
    return {
        "verdict": answer["verdict"], "policy_outcome": answer["policy_result"]["outcome"],
        "recommended": {k: rec.get(k) for k in ("provider", "instance_type", "term",
                                               "gpus_per_instance", "instances",
                                               "commitment_total", "job_cost_total", "total")},
        "codes": [r["code"] for r in answer["reason_details"]],
        "rejected_offers": answer["rejected_offers"]["count"],
    }


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/examples.sqlite3"
        migrate_and_seed(url)
        settings = Settings(database_url=url, search_workers=0)
        engine = make_engine(url)
        with Session(engine) as session:
            _, key = create_key(session, name="examples", scopes=["quotes:write"],
                                pepper=settings.api_key_pepper.get_secret_value())
            session.commit()
        engine.dispose()
        with TestClient(create_app(settings)) as client:
            for name, (path, body) in EXAMPLES.items():
                response = client.post(path, json=body, headers={
                    "Authorization": f"Bearer {key}", "Idempotency-Key": uuid.uuid4().hex})
                out = _summary(response.json()) if response.is_success else response.json()
                print(f"{name}: {response.status_code} {json.dumps(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
