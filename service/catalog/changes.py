"""When may the catalogue state or the API keys have changed? A generation number per process.

Hot read paths keep two facts in memory: which catalogue version is current, and which
principal an API key belongs to (issue 16: each cost a database round trip per request). A
value cached at generation *g* is served only while the generation is still *g*, so any
change made by any writer, on any replica, ends its use:

- **PostgreSQL**: a trigger (migration 0006) sends ``NOTIFY cq_changes`` when a statement
  changes ``catalog_state`` or ``api_keys``; NOTIFY is delivered when the writing transaction
  commits. One thread per process listens and bumps the generation on each notification.
  It counts as live only while it hears the ping it sends itself every second (decision 60).
  While it is not live (start-up, a restart of the database, a network fault, a pooler that
  does not carry LISTEN) the generation is ``None`` and nothing is served from memory; when
  it is live again it bumps the generation once, since it may have missed notifications.
- **SQLite** (one file, possibly several processes): ``PRAGMA data_version`` on a connection
  of its own changes whenever any other connection commits. Reading it is a local call of a
  few microseconds. It changes on every commit, quotes too, so when it has moved the feed
  reads ``change_counter``: triggers (migration 0011) count every change to ``catalog_state``
  and ``api_keys`` there, in the writer's transaction. The generation moves only when that
  count has (decision 166: a stored quote no longer empties the caches). A database without
  the table (a schema before 0011) moves it on every commit, as before: less caching, never
  a stale answer. An in-memory database has no second connection: no caching.

A request that reads the database on a miss records the generation *before* its read and
stores what it read under that generation: if a change lands in between, the entry is never
served. Delivery to other replicas takes as long as a NOTIFY (milliseconds); the replica that
made the change bumps its own generation at once (``bump``).
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from sqlalchemy.engine import make_url

logger = logging.getLogger(__name__)

CHANNEL = "cq_changes"
APPLICATION_NAME = "cq-change-feed"
"""The listener's ``application_name`` in ``pg_stat_activity``."""
PING_S = 1.0
"""The listener NOTIFYs its own channel this often; it is live only while it hears itself
(decision 60: through a transaction-mode pooler a LISTEN can be connected and deaf)."""
PING_TIMEOUT_S = 3.0
"""Not hearing its own ping for this long ends the listener's liveness (and reconnects)."""
POLL_S = 0.1
"""How long the listener waits for a notification before checking its connection and the
stop flag: a shutdown waits at most this long for it (a NOTIFY wakes it at once)."""
RECONNECT_S = (0.5, 1.0, 2.0, 5.0)
"""Back-off between reconnection attempts of the PostgreSQL listener."""
COUNTER_TABLE = "change_counter"
"""SQLite only (migration 0011): one row whose ``changes`` the triggers on the watched tables
count up. Not in the models' metadata, like PostgreSQL's NOTIFY triggers: a migration's
detail (``migrations/env.py`` leaves it out of autogenerate's comparison)."""


def compared_by_autogenerate(name: str | None, type_: str, _parents: object) -> bool:
    """Alembic's ``include_name``: every table but ``COUNTER_TABLE``, which triggers keep and
    no model maps (``migrations/env.py`` and the migration test's comparison)."""
    return not (type_ == "table" and name == COUNTER_TABLE)


class ChangeFeed:
    """The generation number of this process's view of the database (module docstring)."""

    ping_channel = CHANNEL
    """Where the listener sends its pings (a test points it elsewhere to make it deaf)."""

    def __init__(self, database_url: str) -> None:
        self._url = make_url(database_url)
        self._lock = threading.Lock()
        self._generation = 0
        self._live = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sqlite: sqlite3.Connection | None = None
        self._sqlite_version: int | None = None
        self._sqlite_changes: int | None = None

    @property
    def backend(self) -> str:
        return self._url.get_backend_name()

    def start(self) -> None:
        """Begin watching (idempotent). Until then ``generation()`` is ``None``."""
        if self.backend == "sqlite":
            path = self._url.database
            if not path or path == ":memory:":
                return
            with self._lock:
                if self._sqlite is None:
                    self._sqlite = sqlite3.connect(path, check_same_thread=False,
                                                   isolation_level=None)
                    self._live = True
            return
        if self.backend == "postgresql" and self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._listen, name="cq-change-feed",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=5)
        with self._lock:
            self._live = False
            if self._sqlite is not None:
                self._sqlite.close()
                self._sqlite = None
                self._sqlite_version = self._sqlite_changes = None

    def generation(self) -> int | None:
        """The current generation, or ``None`` when changes cannot be seen (do not cache)."""
        with self._lock:
            if not self._live:
                return None
            if self._sqlite is not None:
                try:
                    version = self._sqlite.execute("PRAGMA data_version").fetchone()[0]
                except sqlite3.Error:
                    return None
                if version != self._sqlite_version:
                    self._sqlite_version = version
                    changes = self._sqlite_changes_now()
                    if changes is None or changes != self._sqlite_changes:
                        self._generation += 1
                    self._sqlite_changes = changes
            return self._generation

    def _sqlite_changes_now(self) -> int | None:
        """The count of changes to the watched tables (migration 0011), or None where it
        cannot be read (no such table yet): then every commit counts as a change."""
        assert self._sqlite is not None  # noqa: S101 - called with the lock, connection open
        try:
            row = self._sqlite.execute(
                f"SELECT changes FROM {COUNTER_TABLE} WHERE id = 1").fetchone()  # noqa: S608
        except sqlite3.Error:
            return None
        return None if row is None else int(row[0])

    def bump(self) -> None:
        """This process changed something: values cached before now are not served again."""
        with self._lock:
            self._generation += 1

    @property
    def live(self) -> bool:
        with self._lock:
            return self._live

    def _set_live(self, live: bool) -> None:
        with self._lock:
            self._live = live
            self._generation += 1  # whatever was cached before may have missed a change

    def _listen(self) -> None:
        import psycopg

        conninfo = self._url.set(drivername="postgresql").render_as_string(
            hide_password=False)
        ping = f"ping:{uuid.uuid4().hex}"
        attempt = 0
        while not self._stop.is_set():
            try:
                with psycopg.connect(conninfo, autocommit=True, connect_timeout=5,
                                     application_name=APPLICATION_NAME) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    sent = heard = time.monotonic() - PING_S  # ping at once
                    while not self._stop.is_set():
                        now = time.monotonic()
                        if now - sent >= PING_S:
                            conn.execute("SELECT pg_notify(%s, %s)",
                                         (self.ping_channel, ping))
                            sent = now
                        for note in conn.notifies(timeout=POLL_S):
                            if note.payload == ping:
                                heard = time.monotonic()
                                if not self.live:  # live once the channel is proven
                                    self._set_live(True)
                                    attempt = 0
                            elif not note.payload.startswith("ping:"):
                                self.bump()
                        if time.monotonic() - heard > PING_TIMEOUT_S and self.live:
                            raise ConnectionError("the listener stopped hearing its own pings")
            except Exception as exc:
                if self.live:
                    logger.warning("change feed lost its connection: %s", type(exc).__name__)
                with self._lock:
                    self._live = False
            if self._stop.wait(RECONNECT_S[min(attempt, len(RECONNECT_S) - 1)]):
                break
            attempt += 1
        with self._lock:
            self._live = False


class GenerationCache:
    """A bounded map whose entries are served only while the feed's generation is the one
    they were read at."""

    def __init__(self, feed: ChangeFeed, max_entries: int = 1024) -> None:
        self.feed = feed
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, tuple[int, Any]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> tuple[bool, Any, int | None]:
        """(found, value, generation now): on a miss, read the database and ``put`` what it
        said with the generation returned here."""
        generation = self.feed.generation()
        with self._lock:
            entry = self._entries.get(key) if generation is not None else None
            if entry is not None and entry[0] == generation:
                self._entries.move_to_end(key)
                self.hits += 1
                return True, entry[1], generation
            self.misses += 1
            return False, None, generation

    def put(self, key: Hashable, value: Any, generation: int | None) -> None:
        if generation is None:
            return
        with self._lock:
            self._entries[key] = (generation, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)


WATCHED_TABLES = frozenset({"catalog_state", "api_keys"})
"""The tables whose changes end cached values (migration 0006 puts triggers on the same)."""
_WROTE = "cq_wrote_watched_table"


def bump_on_commit(factory: Any, feed: ChangeFeed) -> None:
    """Sessions of ``factory`` that change a watched table bump ``feed`` when they commit, so
    the writing replica sees its own change at once (others see it by NOTIFY or
    ``data_version``)."""
    from sqlalchemy import event

    def _touches(instances: Any) -> bool:
        return any(getattr(obj, "__tablename__", None) in WATCHED_TABLES for obj in instances)

    @event.listens_for(factory, "before_flush")
    def _before_flush(session: Any, _context: Any, _instances: Any) -> None:
        if _touches(session.new) or _touches(session.dirty) or _touches(session.deleted):
            session.info[_WROTE] = True

    @event.listens_for(factory, "do_orm_execute")
    def _on_execute(state: Any) -> None:
        if state.is_insert or state.is_update or state.is_delete:
            table = getattr(state.statement, "table", None)
            if getattr(table, "name", None) in WATCHED_TABLES:
                state.session.info[_WROTE] = True

    @event.listens_for(factory, "after_commit")
    def _after_commit(session: Any) -> None:
        if session.info.pop(_WROTE, False):
            feed.bump()

    @event.listens_for(factory, "after_rollback")
    def _after_rollback(session: Any) -> None:
        session.info.pop(_WROTE, None)
