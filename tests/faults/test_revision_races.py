"""Races on documents with numbered revisions (policies and discount books, issue 36 medium 1).

A revise reads the newest revision and stores the next one; two writers that read the same
newest revision both try to store the same (name, revision), and the primary key lets one
win. Before the fix the loser's ``IntegrityError`` answered 500 (83-125 of about 460 PUTs,
and 1-10 of 50 same-name creates). Now, against a real server on each backend:

- threads doing If-Match read-modify-write PUTs get only 200 or 412 (a lost revise: the
  revision they named is no longer the newest), and the document ends with exactly one
  revision per 200, each holding what that 200 answered (nothing lost, nothing doubled);
- concurrent creates of one name get exactly one 201, the others 409;
- concurrent ``If-Match: *`` PUTs are all refused 428 and store nothing (``*`` would skip
  the lost-update check; issue 36, low).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session

from service.catalog import policies, revisions
from service.catalog.db import make_engine
from service.catalog.errors import PreconditionFailedError
from service.catalog.models import PolicyRevision
from tests.databases import upgrade
from tests.factories import seeded_database_with_key
from tests.live_server import live_server

BACKENDS = [pytest.param("sqlite"), pytest.param("postgres", marks=pytest.mark.postgres)]
THREADS = 8
EDITS_PER_THREAD = 12
CREATORS = 12
CREATE_NAMES = 3

POLICY_RULES = {"max_job_cost": "1000000"}
BOOK_ENTRIES = [{"provider": "aws", "accelerator": "h100-sxm5-80gb", "percent_off": "18",
                 "valid_from": "2026-01-01", "valid_until": "2026-12-31"}]


@dataclass(frozen=True)
class Kind:
    path: str
    content: dict[str, Any]


KINDS = {"policy": Kind("/v1/policies", {"rules": POLICY_RULES}),
         "discount-book": Kind("/v1/discount-books", {"entries": BOOK_ENTRIES})}


@dataclass
class Tally:
    statuses: Counter[int] = field(default_factory=Counter)
    acknowledged: dict[int, str] = field(default_factory=dict)
    """revision -> the description its 2xx answer carried"""
    doubled: list[int] = field(default_factory=list)
    """revisions that two 2xx answers both claimed"""
    bad_problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, response: httpx.Response) -> None:
        with self.lock:
            self.statuses[response.status_code] += 1
            if response.is_success:
                body = response.json()
                if body["revision"] in self.acknowledged:
                    self.doubled.append(body["revision"])
                self.acknowledged[body["revision"]] = body["description"]
            elif response.headers.get("content-type") != "application/problem+json":
                self.bad_problems.append(response.text[:200])


def _threads(count: int, target: Callable[[int], None]) -> None:
    barrier = threading.Barrier(count)

    def run(index: int) -> None:
        barrier.wait()
        target(index)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _stored(client: httpx.Client, kind: Kind, name: str) -> dict[int, str]:
    """Every stored revision's description, read back one by one."""
    newest = client.get(f"{kind.path}/{name}").json()["revision"]
    stored = {}
    for revision in range(1, newest + 1):
        got = client.get(f"{kind.path}/{name}", params={"revision": revision})
        assert got.status_code == 200, f"revision {revision} of {newest} missing: {got.text}"
        stored[revision] = got.json()["description"]
    assert client.get(f"{kind.path}/{name}",
                      params={"revision": newest + 1}).status_code == 404
    return stored


def _race_edits(client: httpx.Client, base: str, auth: dict[str, str], kind: Kind,
                name: str, *, star: bool) -> tuple[Tally, dict[int, str]]:
    created = client.post(kind.path, json={"name": name, "description": "v1", **kind.content},
                          headers=auth)
    assert created.status_code == 201, created.text
    tally = Tally()
    tally.acknowledged[1] = "v1"

    def editor(index: int) -> None:
        with httpx.Client(base_url=base, timeout=60) as mine:
            for i in range(EDITS_PER_THREAD):
                etag = "*" if star else mine.get(f"{kind.path}/{name}").headers["etag"]
                tally.record(mine.put(f"{kind.path}/{name}", headers={**auth, "If-Match": etag},
                                      json={"description": f"t{index}-e{i}", **kind.content}))

    _threads(THREADS, editor)
    return tally, _stored(client, kind, name)


def _race_creates(base: str, auth: dict[str, str], kind: Kind,
                  names: list[str]) -> tuple[Counter[int], dict[str, int]]:
    statuses: Counter[int] = Counter()
    created: Counter[str] = Counter()
    lock = threading.Lock()

    def creator(index: int) -> None:
        with httpx.Client(base_url=base, timeout=60) as mine:
            for name in names:
                answer = mine.post(kind.path, headers=auth, json={
                    "name": name, "description": f"c{index}", **kind.content})
                with lock:
                    statuses[answer.status_code] += 1
                    if answer.status_code == 201:
                        created[name] += 1

    _threads(CREATORS, creator)
    return statuses, dict(created)


@pytest.fixture(params=BACKENDS)
def server(request: pytest.FixtureRequest,
           database_url_factory: Callable[[str], str]) -> Any:
    from service.settings import Settings

    url = database_url_factory(request.param)
    key = seeded_database_with_key(url, name="racer", scopes=[
        "policies:write", "discounts:write"])
    with live_server(Settings(database_url=url, search_workers=0)) as base:
        yield request.param, base, {"Authorization": f"Bearer {key}"}, url


def _left_in_transaction(url: str) -> int:
    """The server's PostgreSQL connections still inside a transaction (a loser whose failed
    flush was never rolled back would sit "idle in transaction (aborted)"); 0 on SQLite."""
    if not url.startswith("postgresql"):
        return 0
    from sqlalchemy import text

    from service.catalog.db import make_engine

    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.scalar(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()")) or 0)
    finally:
        engine.dispose()


def _still_writable(client: httpx.Client, auth: dict[str, str], kind: Kind, name: str) -> None:
    """One more edit with the newest ETag answers 200: no pooled connection was left broken."""
    etag = client.get(f"{kind.path}/{name}").headers["etag"]
    again = client.put(f"{kind.path}/{name}", headers={**auth, "If-Match": etag},
                       json={"description": "after the race", **kind.content})
    assert again.status_code == 200, again.text


@pytest.mark.parametrize("what", sorted(KINDS))
def test_if_match_edits_race_to_200_or_412_and_lose_nothing(
        server: tuple[str, str, dict[str, str], str], what: str) -> None:
    backend, base, auth, url = server
    kind = KINDS[what]
    with httpx.Client(base_url=base, timeout=60) as client:
        tally, stored = _race_edits(client, base, auth, kind, "raced", star=False)
        _still_writable(client, auth, kind, "raced")
    tried = sum(tally.statuses.values())
    fivexx = sum(n for status, n in tally.statuses.items() if status >= 500)
    ok = tally.statuses[200]
    wrong = len(tally.doubled) + len(tally.bad_problems) + sum(
        n for status, n in tally.statuses.items() if status not in (200, 412) and status < 500)
    lost = sum(1 for revision, text in tally.acknowledged.items()
               if stored.get(revision) != text)
    print(f"{what} If-Match race ({backend}): tried {tried}, {dict(tally.statuses)}, "
          f"5xx {fivexx}, wrong {wrong}, lost {lost}")
    assert tried == THREADS * EDITS_PER_THREAD
    assert fivexx == 0, tally.statuses
    assert set(tally.statuses) <= {200, 412}, tally.statuses
    assert tally.doubled == []
    assert tally.bad_problems == []
    assert ok >= EDITS_PER_THREAD  # every round has a winner: not all could lose
    assert len(stored) == 1 + ok  # one revision per 200, and no other
    assert stored == tally.acknowledged  # each holds what its 200 answered
    assert lost == 0
    assert _left_in_transaction(url) == 0


@pytest.mark.parametrize("what", sorted(KINDS))
def test_star_edits_are_refused_428_and_store_nothing(
        server: tuple[str, str, dict[str, str], str], what: str) -> None:
    backend, base, auth, _ = server
    kind = KINDS[what]
    with httpx.Client(base_url=base, timeout=60) as client:
        tally, stored = _race_edits(client, base, auth, kind, "starred", star=True)
        _still_writable(client, auth, kind, "starred")
    print(f"{what} If-Match: * race ({backend}): {dict(tally.statuses)}")
    assert tally.statuses == {428: THREADS * EDITS_PER_THREAD}, tally.statuses
    assert tally.bad_problems == []
    assert stored == tally.acknowledged == {1: "v1"}


@pytest.mark.parametrize("what", sorted(KINDS))
def test_same_name_creates_race_to_one_201_and_409s(
        server: tuple[str, str, dict[str, str], str], what: str) -> None:
    backend, base, auth, url = server
    kind = KINDS[what]
    names = [f"born-{i}" for i in range(CREATE_NAMES)]
    statuses, created = _race_creates(base, auth, kind, names)
    print(f"{what} create race ({backend}): tried {sum(statuses.values())}, {dict(statuses)}")
    assert set(statuses) <= {201, 409}, statuses
    assert created == dict.fromkeys(names, 1)  # exactly one creator per name
    assert statuses[409] == (CREATORS - 1) * CREATE_NAMES
    with httpx.Client(base_url=base, timeout=60) as client:
        for name in names:
            got = client.get(f"{kind.path}/{name}")
            assert got.json()["revision"] == 1, got.text
    assert _left_in_transaction(url) == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_revise_that_read_a_stale_newest_revision_loses_cleanly(
        database_url_factory: Callable[[str], str], backend: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The race without threads: the newest revision is read, another writer stores the next
    one, then the insert runs. The loser is a 412, and its session is rolled back and
    usable."""
    url = database_url_factory(backend)
    upgrade(url)
    engine = make_engine(url)
    edit = {"name": "p", "description": "", "rules": {}, "created_by": "t"}
    try:
        with Session(engine) as session:
            policies.create(session, **edit)
            session.commit()
            stale = policies.latest(session, "p")
        with Session(engine) as session:
            policies.revise(session, expected_revision=1, **edit)
            session.commit()
        monkeypatch.setattr(revisions, "latest", lambda *_args: stale)
        with Session(engine) as session:
            with pytest.raises(PreconditionFailedError, match="same moment"):
                policies.revise(session, expected_revision=1, **edit)
            assert session.get(PolicyRevision, ("p", 2)) is not None
            assert session.get(PolicyRevision, ("p", 3)) is None
    finally:
        engine.dispose()
