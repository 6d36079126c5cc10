"""Issue 14's outside probes, rerun: for each defect class, requests tried, 5xx answers,
wrong answers (a promise broken: another principal's quote served, a formula exported, a bad
value accepted) and, where it applies, CPU and memory spent.

Runs in process (FastAPI's TestClient) on a fresh SQLite database. It only speaks HTTP, so
it can probe an older checkout too, for the "before" column:

    git worktree add /tmp/before <commit>
    (cd /tmp/before && PYTHONPATH=. /work/main/.venv/bin/python \\
        /work/main/benchmarks/reliability_probe.py)

    .venv/bin/python -m benchmarks.reliability_probe          # this checkout

Durability under crashes (kill -9 after the answer, PostgreSQL stopped mid-run) is measured
by tests/faults and recorded in benchmarks/RESULTS.md, not here.
"""

from __future__ import annotations

import csv
import io
import itertools
import os
import resource
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

sys.path.insert(0, os.getcwd())  # the checkout being probed, before this file's own tree

warnings.simplefilter("ignore")
from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from service.catalog.db import make_engine  # noqa: E402
from service.catalog.keys import create_key  # noqa: E402
from service.catalog.migrate import migrate_and_seed  # noqa: E402
from service.main import create_app  # noqa: E402
from service.settings import Settings  # noqa: E402


@dataclass
class Row:
    probe: str
    tried: int = 0
    server_errors: int = 0
    wrong: int = 0
    notes: list[str] = field(default_factory=list)

    def answer(self, status: int, wrong: bool = False) -> None:
        """A 503 is a deliberate refusal (overload, search deadline), not a server error."""
        self.tried += 1
        self.server_errors += status >= 500 and status != 503
        self.wrong += wrong


def key(session: Session, scopes: list[str], team: str | None = None) -> dict[str, str]:
    pepper = Settings().api_key_pepper.get_secret_value()
    name = f"probe-{uuid.uuid4().hex[:8]}"
    try:
        _, text = create_key(session, name=name, scopes=scopes, pepper=pepper,
                             **({"team": team} if team else {}))
    except (TypeError, ValueError):  # an older checkout: no teams, or no quotes:admin
        _, text = create_key(session, name=name, scopes=[s for s in scopes
                                                         if s != "quotes:admin"]
                             or ["quotes:read"], pepper=pepper)
    session.commit()
    return {"Authorization": f"Bearer {text}"}


OPTIMISE = {"model": {"preset": "llama3.1-8b"},
            "training": {"seq_len": 4096, "global_batch_seqs": 256, "tokens": 1e11},
            "clusters": [{"accelerator": "h100-sxm5-80gb", "num_gpus": 64}]}


def boundary_quotes(client: TestClient, writer: dict[str, str]) -> Row:
    """Reliability, on-prem and budget inputs at and past their edges, on quotes and budget
    plans (issue 14: 74 of 1,704 were 500s: infeasible goodput, near-zero bandwidth)."""
    row = Row("boundary quote and budget-plan requests")
    failure = [0.0, 1e-12, 2.2e-5, 0.01, 0.5, 1.0, 2.0, -1.0]
    restart = [0.0, 60.0, 86_400.0, 1e9]
    bandwidth = [1e-300, 1e-9, 1.0, 1e10, 1e13, 1e20, 0.0]
    workloads = [{"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 1e6,
                                "num_gpus": 1024}},
                 {"optimise": OPTIMISE}]
    for f, r, b, w in itertools.product(failure, restart, bandwidth, workloads):
        reliability = {"failure_rate_per_gpu_hour": f, "restart_s": r,
                       "checkpoint_bytes_per_s": b}
        body = {"workload": w, "providers": ["lambda", "onprem"],
                "terms": ["on_demand", "spot"], "reliability": reliability,
                "onprem": {"purchase_price_per_gpu": "30000"},
                "budget": {"amount": "1000000.00", "currency": "USD"}}
        answer = client.post("/v1/quotes", json=body,
                             headers={**writer, "Idempotency-Key": uuid.uuid4().hex})
        row.answer(answer.status_code, wrong=answer.status_code < 300 and (
            "NaN" in answer.text or "Infinity" in answer.text))
        if "optimise" in w:
            plan = {**OPTIMISE, "budget": {"amount": "1000000.00", "currency": "USD"},
                    "providers": ["lambda", "onprem"], "reliability": reliability,
                    "onprem": {"purchase_price_per_gpu": "30000"}}
            answer = client.post("/v1/budget-plans", json=plan)
            row.answer(answer.status_code, wrong=answer.status_code < 300 and (
                "NaN" in answer.text or "Infinity" in answer.text))
    return row


FORM = {"model": "llama3.1-8b", "tokens": "1e11", "seq_len": "4096", "global_batch": "256",
        "accelerator": "h100-sxm5-80gb", "gpus": "64", "tp": "1", "pp": "1", "cp": "1",
        "micro_batch": "1", "zero_stage": "1", "recompute": "none", "currency": "USD",
        "budget": "1000000", "providers": "lambda"}
NUMBER_FIELDS = ("tokens", "seq_len", "global_batch", "gpus", "tp", "pp", "cp", "micro_batch",
                 "zero_stage", "budget", "deadline_days")
BAD_NUMBERS = ("NaN", "nan", "inf", "-inf", "Infinity", "1e400", "-1e400", "1e-400")


def portal_forms(client: TestClient, writer: dict[str, str]) -> Row:
    """Every number field of the portal with NaN, infinities and overflows, for every action
    (issue 14: 52 of 680 were 500s)."""
    row = Row("portal form submissions with NaN, inf, 1e400")
    api_key = writer["Authorization"].split()[1]
    for name, value, action in itertools.product(
            NUMBER_FIELDS, BAD_NUMBERS, ("estimate", "optimise", "quote", "budget_plan")):
        form = {**FORM, name: value, "action": action,
                **({"api_key": api_key, "nonce": uuid.uuid4().hex} if action == "quote"
                   else {})}
        row.answer(client.post("/ui", data=form).status_code)
    return row


def quote_ownership(client: TestClient, session: Session) -> Row:
    """Principals x operations on one principal's quote (issue 14: anyone could read, list
    and verify every quote; any writer could requote another's). Wrong: a key that is not
    the owner, its team or an admin got the quote, saw it listed, or requoted it."""
    row = Row("stored-quote reads, lists, verifies, requotes by other principals")
    owner = key(session, ["quotes:write"], team="alpha")
    others = {"stranger": key(session, ["quotes:write"], team="beta"),
              "reader": key(session, ["quotes:read"]), "anonymous": {}}
    body = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 1000,
                                       "num_gpus": 8}}, "providers": ["lambda"]}
    made = client.post("/v1/quotes", json=body,
                       headers={**owner, "Idempotency-Key": uuid.uuid4().hex}).json()
    qid = made["id"]
    for headers in others.values():
        for method, path in (("GET", f"/v1/quotes/{qid}"), ("GET", f"/v1/quotes/{qid}/lines"),
                             ("POST", f"/v1/quotes/{qid}/verify")):
            answer = client.request(method, path, headers=headers)
            row.answer(answer.status_code, wrong=answer.status_code < 300)
        listed = client.get("/v1/quotes", params={"page_size": 200}, headers=headers)
        row.answer(listed.status_code, wrong=listed.status_code < 300 and qid in listed.text)
        requote = client.post(f"/v1/quotes/{qid}/requote",
                              headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
        row.answer(requote.status_code, wrong=requote.status_code < 300)
        page = client.post(f"/ui/quotes/{qid}", data={"api_key": headers.get(
            "Authorization", " ").split(" ")[1]})
        row.answer(page.status_code, wrong=page.status_code < 300 and made["principal"]
                   in page.text)
        bare = client.get(f"/ui/quotes/{qid}", headers=headers)
        row.answer(bare.status_code, wrong=bare.status_code < 300)
    return row


FORMULAS = ["=1+1", "+1+1", "-1+1", "@SUM(A1)", "\t=1+1", "\r=1+1", "=cmd|' /C calc'!A0",
            "=HYPERLINK(\"http://x\")", "-2"]
OFFER = {"provider": "probe", "region": "eu-1", "instance_type": "gpu-8x-h100",
         "accelerator": "h100-sxm5-80gb", "gpus_per_instance": "8", "term": "on_demand",
         "currency": "USD", "price_per_hour": "20.00", "source": "probe",
         "as_of": "2026-11-01", "indicative": False}


def csv_injection(client: TestClient, catalog: dict[str, str]) -> Row:
    """Formula payloads in free-text cells, imported then exported (issue 14: 9 of 9 were
    exported verbatim). Wrong: an exported cell starts with = + - @ tab or CR, or the export
    does not import back to the same notes."""
    row = Row("CSV exports of formula payloads")
    for payload in FORMULAS:
        imported = client.post("/v1/catalog/imports", params={"mode": "patch"},
                               json={"offers": [{**OFFER, "region": f"r{uuid.uuid4().hex[:6]}",
                                                 "notes": payload, "source": payload}]},
                               headers=catalog)
        if imported.status_code >= 300:
            row.answer(imported.status_code, wrong=False)
            row.notes.append(f"{payload!r} refused {imported.status_code}")
            continue
        version = imported.json()["id"]
        exported = client.get(f"/v1/catalog/versions/{version}/export",
                              params={"format": "csv"}, headers=catalog)
        cells = [c for r in csv.reader(io.StringIO(exported.text)) for c in r]
        risky = any(c.startswith(("=", "+", "-", "@", "\t", "\r")) for c in cells
                    if c == payload or c.endswith(payload.lstrip("\t\r")))
        row.answer(exported.status_code, wrong=risky)
    return row


def small_defects(client: TestClient, catalog: dict[str, str],
                  writer: dict[str, str]) -> list[Row]:
    rows = []
    nul = Row("NUL in a version or import note")
    for note in ("a\x00b", "\x00"):
        answer = client.post("/v1/catalog/imports", params={"mode": "patch", "note": note},
                             json={"offers": [{**OFFER, "region": "nul"}]}, headers=catalog)
        nul.answer(answer.status_code, wrong=answer.status_code < 300)
    rows.append(nul)
    tiny = Row("gpus_per_instance of 1e-7, 1e-300, 0.001")
    for value in ("1e-7", "1e-300", "0.001", "0.0000001"):
        answer = client.post("/v1/catalog/imports", params={"mode": "patch"}, json={
            "offers": [{**OFFER, "region": "tiny", "gpus_per_instance": value}]},
            headers=catalog)
        tiny.answer(answer.status_code, wrong=answer.status_code < 300)
    rows.append(tiny)
    money = Row("currency XXX/ZZZ, Unicode digits, exponents in prices")
    for change in ({"currency": "XXX"}, {"currency": "ZZZ"}, {"price_per_hour": "١٢.٥"},
                   {"price_per_hour": "1e2"}, {"price_per_hour": "１２"}):
        answer = client.post("/v1/catalog/imports", params={"mode": "patch"}, json={
            "offers": [{**OFFER, "region": "money", **change}]}, headers=catalog)
        money.answer(answer.status_code, wrong=answer.status_code < 300)
    rows.append(money)
    allow = Row("405 answers with an Allow header listing the methods")
    for method, path in (("DELETE", "/v1/quotes"), ("PUT", "/v1/estimates"),
                         ("DELETE", "/v1/offers"), ("PATCH", "/v1/parallelism-plans")):
        answer = client.request(method, path)
        allow.answer(answer.status_code, wrong=answer.status_code == 405
                     and not answer.headers.get("allow"))
    rows.append(allow)
    requote = Row("requote retried without Idempotency-Key")
    made = client.post("/v1/quotes", json={"workload": {"gpu_hours": {
        "accelerator": "h100-sxm5-80gb", "gpu_hours": 100, "num_gpus": 8}},
        "providers": ["lambda"]}, headers={**writer, "Idempotency-Key": uuid.uuid4().hex})
    ids = set()
    for _ in range(3):
        answer = client.post(f"/v1/quotes/{made.json()['id']}/requote", headers=writer)
        if answer.status_code < 300:
            ids.add(answer.json()["id"])
        requote.answer(answer.status_code)
    requote.wrong = max(0, len(ids) - 1)
    rows.append(requote)
    dup = Row("duplicate JSON keys in one object")
    for text in ('{"model": {"preset": "llama3.1-8b"}, "model": {"preset": "llama3.1-70b"}}',
                 '{"budget": {"amount": "1", "amount": "1000000000", "currency": "USD"}}'):
        answer = client.post("/v1/estimates", content=text,
                             headers={"content-type": "application/json"})
        dup.answer(answer.status_code, wrong=answer.status_code < 300 or not any(
            e.get("code") == "duplicate_key" for e in answer.json().get("errors", [])))
    rows.append(dup)
    headers = Row("security headers on the API and the portal")
    for path in ("/v1/models", "/ui"):
        answer = client.get(path)
        missing = answer.headers.get("x-content-type-options") != "nosniff" or (
            path == "/ui" and "frame-ancestors 'none'" not in answer.headers.get(
                "content-security-policy", ""))
        headers.answer(answer.status_code, wrong=missing)
    rows.append(headers)
    return rows


def llama_405b_on(step: int) -> dict[str, Any]:
    """Llama 3.1 405B on four accelerators, every ``step`` GPUs from ``step`` to 16,384."""
    return {"model": {"preset": "llama3.1-405b"},
            "training": {"seq_len": 8192, "global_batch_seqs": 2048, "tokens": 15.6e12},
            "clusters": [{"accelerator": a, "num_gpus_range": {"start": step, "stop": 16384,
                                                                "step": step}}
                         for a in ("h100-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb",
                                   "a100-sxm4-80gb")]}


def unbounded_work(client: TestClient) -> list[Row]:
    """The costliest anonymous requests: a plan search over 1,024 pairs with every dimension
    free, and a budget plan over 128 (accelerator, GPU count) pairs of 405B searches."""
    rows = []
    huge = Row("plan search over 1,024 405B pairs, every dimension free")
    body = {**llama_405b_on(64), "constraints": {}}
    statuses: list[int] = []

    def ask() -> None:
        statuses.append(client.post("/v1/parallelism-plans", json=body).status_code)
        huge.answer(statuses[-1])

    cpu, rss = _cost(ask)
    huge.notes.append(f"{statuses[0]} after {cpu:.2f} CPU s, peak RSS +{rss / 1e6:.0f} MB")
    rows.append(huge)
    plans = Row("budget plan over 128 405B (accelerator, GPU count) pairs")
    body = {**llama_405b_on(512), "budget": {"amount": "100000000.00", "currency": "USD"}}
    start = time.perf_counter()
    answer = client.post("/v1/budget-plans", json=body)
    plans.answer(answer.status_code)
    plans.notes.append(f"{answer.status_code} after {time.perf_counter() - start:.1f} s "
                       f"(deadline {client.app.state.settings.search_deadline_s:g} s)")
    rows.append(plans)
    return rows


def _cost(work: Callable[[], None]) -> tuple[float, int]:
    """CPU seconds of this process and its children, and the growth of peak RSS."""
    def cpu() -> float:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = cpu()
    work()
    return cpu() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak


def main() -> None:
    folder = tempfile.mkdtemp()
    url = f"sqlite:///{folder}/probe.sqlite3"
    migrate_and_seed(url)
    settings = Settings(database_url=url, search_workers=0, search_deadline_s=2.0,
                        log_level="warning")
    app = create_app(settings)
    engine = make_engine(url)
    with Session(engine) as session, TestClient(app, raise_server_exceptions=False) as client:
        writer = key(session, ["quotes:write"])
        catalog = key(session, ["catalog:write"])
        rows = [boundary_quotes(client, writer), portal_forms(client, writer),
                quote_ownership(client, session), csv_injection(client, catalog),
                *small_defects(client, catalog, writer), *unbounded_work(client)]
    engine.dispose()
    print("| probe | tried | 5xx | wrong | notes |")
    print("|---|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r.probe} | {r.tried:,} | {r.server_errors:,} | {r.wrong:,} | "
              f"{'; '.join(r.notes)} |")


if __name__ == "__main__":
    main()
