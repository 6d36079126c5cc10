"""change_counter: on SQLite, a count of committed changes to the catalogue state and API keys

Each replica keeps the current catalogue version id and verified API keys in memory while
nothing has changed them (service/catalog/changes.py). On SQLite it noticed a change through
``PRAGMA data_version``, which moves on every commit to the file: a stored quote, which
changes neither, emptied those caches too, so the next request read both again (issue 16,
decision 166). Triggers now count the changes to the two watched tables in one row; the reader
looks at the row only when ``data_version`` has moved, and forgets what it holds only when the
count has. Like the NOTIFY triggers of 0006, they cover every writer: the API, ``cq keys``,
``cq catalog`` and manual SQL. PostgreSQL keeps its NOTIFY triggers and gets no table.

On PostgreSQL, ``quotes.lines_zstd`` is stored ``EXTERNAL``: out of line, never compressed
again. At zstd's fast levels the frame keeps its literals as plain text, so the default
(``EXTENDED``) had pglz compress every frame a second time (decision 167: about 0.3 ms of the
server's CPU per quote).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

from __future__ import annotations

from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None

TABLE = "change_counter"
WATCHED = ("catalog_state", "api_keys")
EVENTS = ("INSERT", "UPDATE", "DELETE")


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    if dialect == "postgresql":
        op.execute("ALTER TABLE quotes ALTER COLUMN lines_zstd SET STORAGE EXTERNAL")
    if dialect != "sqlite":
        return
    op.execute(f"CREATE TABLE {TABLE} (id INTEGER NOT NULL PRIMARY KEY CHECK (id = 1), "
               "changes INTEGER NOT NULL)")
    op.execute(f"INSERT INTO {TABLE} (id, changes) VALUES (1, 0)")
    # SQLite has row triggers only; a DELETE with no WHERE still fires them (a table with
    # triggers is never truncated in one step).
    for table in WATCHED:
        for event in EVENTS:
            op.execute(f"CREATE TRIGGER {table}_{event.lower()}_counts_change "
                       f"AFTER {event} ON {table} BEGIN "
                       f"UPDATE {TABLE} SET changes = changes + 1 WHERE id = 1; END")


def downgrade() -> None:
    dialect = op.get_context().dialect.name
    if dialect == "postgresql":
        op.execute("ALTER TABLE quotes ALTER COLUMN lines_zstd SET STORAGE EXTENDED")
    if dialect != "sqlite":
        return
    for table in WATCHED:
        for event in EVENTS:
            op.execute(f"DROP TRIGGER IF EXISTS {table}_{event.lower()}_counts_change")
    op.execute(f"DROP TABLE IF EXISTS {TABLE}")
