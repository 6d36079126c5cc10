"""Every kind of write survives a replica killed right after acknowledging it (issue 36).

For each write kind and each backend: a replica in its own process takes the write; as soon
as the answer's status line arrives (its first bytes) and says 2xx, the replica gets SIGKILL;
a new replica on the same database must show the write. ``test_catalog_write_durability.py``
does the same for offer edits and FX imports; this covers the rest: catalogue imports,
refreshes, policies and discount books (create and revise), accelerators, quotes, requotes,
and API keys (``cq keys create``: the service has no keys endpoint, so the acknowledgement is
the key printed). Calibrations are not a write the service has yet.

What the client knows at the status line is in the headers (ETag, Location), so the checks
read only those, never a body the kill may have cut.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.api.schemas.catalog import ACCELERATOR_EXAMPLE
from tests.factories import seeded_database_with_key
from tests.live_server import ServerProcess, server_process

BACKENDS = [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]
SCOPES = ["catalog:write", "policies:write", "discounts:write", "quotes:write"]
IMPORTERS = Path(__file__).parents[1] / "data" / "importers"
QUOTE = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 100,
                                    "num_gpus": 8}}, "providers": ["lambda"]}
BOOK_ENTRIES = [{"provider": "aws", "accelerator": "h100-sxm5-80gb", "percent_off": "18",
                 "valid_from": "2026-01-01", "valid_until": "2026-12-31"}]
OFFERS = [{"provider": "acme", "region": f"r{i}", "instance_type": "gpu-8x-h100",
           "accelerator": "h100-sxm5-80gb", "gpus_per_instance": 8, "term": "on_demand",
           "currency": "USD", "price_per_hour": "10.000000", "source": "kill test",
           "as_of": "2026-11-01", "indicative": False} for i in range(5)]

Request = dict[str, Any]
"""httpx.Client.stream keyword arguments, with ``method`` and ``url``."""


@dataclass(frozen=True)
class Write:
    prepare: Callable[[httpx.Client, dict[str, str]], Request]
    """Any writes the acknowledged one needs first (on the first replica, not killed for
    them); returns the request to send."""
    check: Callable[[httpx.Client, dict[str, str], httpx.Headers], None]
    """On the new replica: the write the headers acknowledged is there."""


def _import(_: httpx.Client, auth: dict[str, str]) -> Request:
    return {"method": "POST", "url": "/v1/catalog/imports", "json": {"offers": OFFERS},
            "headers": auth}


def _current_version_is(client: httpx.Client, headers: httpx.Headers, note: str) -> None:
    """The version the Location names exists, is current and carries the note sent."""
    version = client.get(headers["location"])
    assert version.status_code == 200, version.text
    assert version.json()["current"] is True
    assert version.json()["note"] == note


def _import(_: httpx.Client, auth: dict[str, str]) -> Request:
    return {"method": "POST", "url": "/v1/catalog/imports", "json": {"offers": OFFERS},
            "params": {"note": "kill import"}, "headers": auth}


def _import_check(client: httpx.Client, _: dict[str, str], headers: httpx.Headers) -> None:
    _current_version_is(client, headers, "kill import")
    offers = client.get("/v1/offers", params={"provider": "acme", "page_size": 50}).json()
    assert len(offers["items"]) == len(OFFERS)


def _refresh(_: httpx.Client, auth: dict[str, str]) -> Request:
    return {"method": "POST", "url": "/v1/catalog/refreshes",
            "params": {"format": "aws", "note": "kill refresh"},
            "content": (IMPORTERS / "aws_ec2_offer.json").read_bytes(),
            "headers": {**auth, "content-type": "application/json"}}


def _refresh_check(client: httpx.Client, _: dict[str, str], headers: httpx.Headers) -> None:
    _current_version_is(client, headers, "kill refresh")


def _document(path: str, content: dict[str, Any], *, revise: bool) -> Write:
    """Create (or revise) a policy or a discount book; the new replica shows the revision
    the ETag named, holding the description sent."""

    name = "revised" if revise else "created"

    def prepare(client: httpx.Client, auth: dict[str, str]) -> Request:
        if not revise:
            return {"method": "POST", "url": path, "headers": auth,
                    "json": {"name": name, "description": "acknowledged", **content}}
        first = client.post(path, json={"name": name, **content}, headers=auth)
        assert first.status_code == 201, first.text
        return {"method": "PUT", "url": f"{path}/{name}", "json": {
            "description": "acknowledged", **content},
                "headers": {**auth, "If-Match": first.headers["etag"]}}

    def check(client: httpx.Client, auth: dict[str, str], headers: httpx.Headers) -> None:
        got = client.get(f"{path}/{name}", headers=auth)
        assert got.status_code == 200, got.text
        assert got.headers["etag"] == headers["etag"]
        assert got.json()["description"] == "acknowledged"

    return Write(prepare, check)


def _accelerator(_: httpx.Client, auth: dict[str, str]) -> Request:
    return {"method": "POST", "url": "/v1/accelerators", "json": ACCELERATOR_EXAMPLE,
            "headers": auth}


def _located(client: httpx.Client, auth: dict[str, str], headers: httpx.Headers) -> None:
    got = client.get(headers["location"], headers=auth)
    assert got.status_code == 200, got.text


def _quote(_: httpx.Client, auth: dict[str, str]) -> Request:
    return {"method": "POST", "url": "/v1/quotes", "json": QUOTE,
            "headers": {**auth, "Idempotency-Key": "kill-after-quote"}}


def _requote(client: httpx.Client, auth: dict[str, str]) -> Request:
    first = client.post("/v1/quotes", json=QUOTE, headers={**auth, "Idempotency-Key": "to-requote"})
    assert first.status_code == 201, first.text
    return {"method": "POST", "url": first.headers["location"] + "/requote",
            "headers": {**auth, "Idempotency-Key": "kill-after-requote"}}


def _quote_check(client: httpx.Client, auth: dict[str, str], headers: httpx.Headers) -> None:
    assert headers.get("idempotent-replayed") is None  # a new quote, not a replay
    quote_id = headers["location"].rsplit("/", 1)[-1]
    assert client.get(f"/v1/quotes/{quote_id}", headers=auth).json()["id"] == quote_id


POLICY = {"rules": {"max_job_cost": "1000000"}}
BOOK = {"entries": BOOK_ENTRIES}
WRITES = {  # in the order run on one database: the catalogue writes come last
    "policy-create": _document("/v1/policies", POLICY, revise=False),
    "policy-revise": _document("/v1/policies", POLICY, revise=True),
    "discount-book-create": _document("/v1/discount-books", BOOK, revise=False),
    "discount-book-revise": _document("/v1/discount-books", BOOK, revise=True),
    "accelerator": Write(_accelerator, _located),
    "quote": Write(_quote, _quote_check),
    "requote": Write(_requote, _quote_check),
    "catalog-refresh": Write(_refresh, _refresh_check),
    "catalog-import": Write(_import, _import_check),
}


def _env(url: str) -> dict[str, str]:
    return {"CQ_DATABASE_URL": url, "CQ_SEARCH_WORKERS": "0", "CQ_LOG_LEVEL": "warning"}


def _kill_at_status_line(server: ServerProcess, client: httpx.Client,
                         request: Request) -> tuple[int, httpx.Headers]:
    with client.stream(**request) as response:
        status, headers = response.status_code, response.headers  # the first bytes
        if response.is_success:
            server.kill9()
    return status, headers


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_acknowledged_write_survives_the_replica_killed_at_once(
        database_url_factory: Callable[[str], str], backend: str) -> None:
    """One replica per write kind, plus one: replica k checks that kind k-1's acknowledged
    write is there, then takes kind k's write and is killed at its status line."""
    url = database_url_factory(backend)
    key = seeded_database_with_key(url, name="writer", scopes=SCOPES)
    auth = {"Authorization": f"Bearer {key}"}
    done: list[str] = []
    previous: tuple[str, httpx.Headers] | None = None
    for kind in [*WRITES, None]:
        with server_process(_env(url)) as server, httpx.Client(base_url=server.url,
                                                               timeout=60) as client:
            if previous is not None:
                try:
                    WRITES[previous[0]].check(client, auth, previous[1])
                except AssertionError as exc:
                    raise AssertionError(f"{previous[0]} ({backend}): acknowledged, then "
                                         f"lost: {exc}") from exc
                done.append(previous[0])
            if kind is None:
                break
            request = WRITES[kind].prepare(client, auth)
            status, headers = _kill_at_status_line(server, client, request)
            assert 200 <= status < 300, (kind, status)
            assert server.process.poll() is not None  # killed, not shut down
            previous = (kind, headers)
    assert done == list(WRITES)
    print(f"kill -9 at the status line ({backend}): {len(done)} kinds acknowledged "
          f"({', '.join(done)}), 0 lost")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_printed_api_key_survives_cq_killed_at_once(
        database_url_factory: Callable[[str], str], backend: str) -> None:
    """``cq keys create`` prints the key once it is stored; killed as soon as the key line
    is read, the key still authenticates on a replica started afterwards."""
    url = database_url_factory(backend)
    seeded_database_with_key(url, name="seed", scopes=["quotes:read"])
    command = [sys.executable, "-u", "-c", "from service.cli import main; main()", "keys",
               "create", "--name", "printed", "--scope", "policies:write"]
    process = subprocess.Popen(command, env={**os.environ, **_env(url)},  # noqa: S603
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    try:
        line = process.stdout.readline().strip()
        process.kill()
    finally:
        process.wait(timeout=60)
        process.stdout.close()
    assert line.startswith("cq_"), line
    with server_process(_env(url)) as server:
        created = httpx.post(f"{server.url}/v1/policies", json={"name": "by-printed-key"},
                             headers={"Authorization": f"Bearer {line}"}, timeout=60)
        assert created.status_code == 201, created.text
    print(f"kill -9 after the key line, API key ({backend}): 1 acknowledged, 0 lost")
