"""A Python client generated from the committed OpenAPI document (openapi-python-client) works
against the app on a local uvicorn: estimate, optimisation, quote and get-quote."""

from __future__ import annotations

import importlib
import inspect
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from service.catalog.db import make_engine
from service.catalog.keys import create_key
from service.catalog.migrate import upgrade
from service.catalog.seed import seed_catalog
from service.settings import Settings
from tests.live_server import live_server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Generate the client package into a temporary directory and put it on sys.path."""
    out = tmp_path_factory.mktemp("client")
    generator = shutil.which("openapi-python-client", path=str(Path(sys.executable).parent))
    assert generator, "openapi-python-client is a dev dependency"
    subprocess.run(  # noqa: S603 - fixed arguments
        [generator, "generate", "--path", str(ROOT / "openapi" / "openapi.json"),
         "--config", str(ROOT / "openapi" / "python-client.yaml"),
         "--meta", "none", "--output-path", str(out / "cq_client")],
        check=True, capture_output=True, timeout=120)
    sys.path.insert(0, str(out))
    try:
        yield "cq_client"
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m == "cq_client" or m.startswith("cq_client.")]:
            del sys.modules[name]


def load(name: str) -> ModuleType:
    return importlib.import_module(f"cq_client.{name}")


def test_every_operation_is_generated(generated: str) -> None:
    """Every operation of the document is a function of the client: none skipped for its
    media type (the CSV uploads, with openapi/python-client.yaml)."""
    import json

    document = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    for item in document["paths"].values():
        for op in item.values():
            tag = op["tags"][0]
            module = load(f"api.{tag.replace('-', '_')}.{op['operationId']}")
            assert callable(module.sync_detailed), op["operationId"]


def test_generated_client_requires_the_idempotency_key_and_sends_the_bearer_key(
        generated: str) -> None:
    """Issue 18: the document marks Idempotency-Key required (the server answers 400 without
    it) and declares bearer security, so the generated client asks for both."""
    for name in ("api.quotes.create_quote", "api.quotes.requote_quote"):
        for call in ("sync", "sync_detailed", "asyncio", "asyncio_detailed"):
            parameter = inspect.signature(getattr(load(name), call)).parameters[
                "idempotency_key"]
            assert parameter.default is inspect.Parameter.empty, (name, call)
    client = load("client").AuthenticatedClient(base_url="http://x", token="cq_test")
    assert client.get_httpx_client().headers["Authorization"] == "Bearer cq_test"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def own_engine(request: pytest.FixtureRequest, database_url_factory: Any) -> Iterator[Engine]:
    """A seeded database of this test's own, per backend: the server it starts commits (an FX
    import, quotes), and writes to the shared per-backend database moved every later test's
    ids on the same worker (the quote goldens' FX table became fx_000002; CI, stop 47)."""
    url = database_url_factory(request.param)
    upgrade(url)
    engine = make_engine(url)
    with Session(engine) as session:
        seed_catalog(session)
        session.commit()
    yield engine
    engine.dispose()


def test_generated_client_against_the_app(generated: str, own_engine: Engine) -> None:
    url = own_engine.url.render_as_string(hide_password=False)
    settings = Settings(database_url=url)
    with Session(own_engine) as session:
        _, key = create_key(session, name=f"client-{uuid.uuid4().hex[:6]}",
                            scopes=["quotes:write", "catalog:write"],
                            pepper=settings.api_key_pepper.get_secret_value())
        session.commit()
    client_module = load("client")
    models = load("models")
    with live_server(settings) as base, client_module.AuthenticatedClient(
        base_url=base, token=key, timeout=60.0
    ) as client:

        estimate = load("api.estimates.create_estimate").sync(
            client=client, body=models.EstimateRequest.from_dict({
                "model": {"preset": "llama3.1-70b"},
                "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 64,
                            "gpus_per_node": 8},
                "parallelism": {"tp": 4, "pp": 4, "dp": 2, "cp": 2, "vp": 5},
                "training": {"seq_len": 8192, "global_batch_seqs": 128, "tokens": 15e12,
                             "framework": "megatron"}}))
        assert isinstance(estimate, models.EstimateResponse)
        assert 1000 < estimate.time.tokens_per_s_per_gpu < 1250  # NVIDIA measured 1113
        assert estimate.memory.fits is True

        plans = load("api.plans.optimise_parallelism").sync(
            client=client, body=models.PlanSearchRequest.from_dict({
                "model": {"preset": "llama3.1-8b"},
                "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 16},
                "training": {"seq_len": 8192, "global_batch_seqs": 64, "tokens": 1e12},
                "top_k": 3}))
        assert isinstance(plans, models.PlanSearchResponse)
        assert len(plans.plans) == 3
        assert plans.search.candidates_evaluated > 100
        times = [p.time.train_s for p in plans.plans]
        assert times == sorted(times)

        quote = load("api.quotes.create_quote").sync(
            client=client, idempotency_key=uuid.uuid4().hex,
            body=models.QuoteRequest.from_dict({
                "workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb",
                                           "gpu_hours": 10000, "num_gpus": 64}},
                "providers": ["aws"], "terms": ["on_demand"],
                "budget": {"amount": "100000.00", "currency": "USD"}}))
        assert isinstance(quote, models.QuoteOut), quote
        assert quote.verdict.value in {"approve", "reject"}
        cheapest: Any = quote.cheapest
        assert cheapest.provider == "aws"
        assert float(cheapest.total) > 10000 * 31.92 / 8 * 0.99

        fetched = load("api.quotes.get_quote").sync(client=client, quote_id=quote.id)
        assert isinstance(fetched, models.QuoteOut)
        assert fetched.id == quote.id
        assert fetched.cheapest.total == cheapest.total

        # CSV uploads are file arguments (issue 41: the FX import was skipped before).
        import io

        from service.api.routes.fx import CSV_EXAMPLE
        types = load("types")
        imported = load("api.catalog.import_fx_rates").sync_detailed(
            client=client, body=types.File(payload=io.BytesIO(CSV_EXAMPLE.encode()),
                                           file_name="eurofxref.csv", mime_type="text/csv"))
        assert imported.status_code in (200, 201), imported.content

        missing = load("api.quotes.get_quote").sync(client=client,
                                                   quote_id="q_" + "0" * 32)
        assert isinstance(missing, models.Problem)
        assert missing.status == 404
