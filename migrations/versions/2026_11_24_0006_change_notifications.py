"""change notifications: PostgreSQL NOTIFYs cq_changes when the catalogue state or API keys change

Every replica keeps the current catalogue version id and verified API keys in memory and drops
them when this notification arrives (service/catalog/changes.py). A trigger, not application
code, sends it, so every writer is covered: the API, ``cq keys``, ``cq catalog`` and manual
SQL. NOTIFY is delivered when the writing transaction commits, never before. SQLite needs no
trigger: the reader polls ``PRAGMA data_version``.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

TABLES = ("catalog_state", "api_keys")


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute("""
        CREATE OR REPLACE FUNCTION cq_notify_change() RETURNS trigger AS $$
        BEGIN
            PERFORM pg_notify('cq_changes', TG_TABLE_NAME);
            RETURN NULL;
        END;
        $$ LANGUAGE plpgsql
    """)
    for table in TABLES:
        op.execute(f"""
            CREATE TRIGGER {table}_notify_change
            AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table}
            FOR EACH STATEMENT EXECUTE FUNCTION cq_notify_change()
        """)


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.execute(f"DROP TRIGGER IF EXISTS {table}_notify_change ON {table}")
    op.execute("DROP FUNCTION IF EXISTS cq_notify_change()")
