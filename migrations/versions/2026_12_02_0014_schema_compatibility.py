"""schema_compatibility: which code each applied migration stays compatible with (issue 41)

Rolling releases (``deploy/README.md``, "Rolling releases: expand, then contract"): once
release N's migration Job has run, the replicas of release N-1 keep serving until they are
replaced. Their ``/readyz`` asks the database, not only ``alembic_version``: every migration
from this one on inserts a row ``(revision, oldest_compatible_code)``, the oldest
``SCHEMA_HEAD`` whose code still runs correctly on the schema that migration leaves. An
expand-only step (a new table, a nullable column) names the revision before it; a contract
step (a drop, a rename, a new constraint old code would break) names itself. Code at head
``H`` is ready on a schema at ``R > H`` when every row above ``H`` names a code revision
``<= H``.

This step is expand-only (one new table), so it names 0013; code at 0013 predates the rule and
still demands its exact revision. The rule holds from code at 0014 on. The downgrade drops the
table.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0014'
down_revision = '0013'
branch_labels = None
depends_on = None

OLDEST_COMPATIBLE_CODE = "0013"
"""Expand-only: code at 0013 runs unchanged on this schema (it ignores the new table)."""

COMPATIBILITY = sa.table("schema_compatibility", sa.column("revision", sa.String),
                         sa.column("oldest_compatible_code", sa.String))


def upgrade() -> None:
    op.create_table(
        "schema_compatibility",
        sa.Column("revision", sa.String(length=32), primary_key=True),
        sa.Column("oldest_compatible_code", sa.String(length=32), nullable=False),
    )
    op.bulk_insert(COMPATIBILITY, [{"revision": revision,
                                    "oldest_compatible_code": OLDEST_COMPATIBLE_CODE}])


def downgrade() -> None:
    op.drop_table("schema_compatibility")
