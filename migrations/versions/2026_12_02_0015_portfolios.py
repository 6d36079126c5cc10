"""portfolios: stored commitment portfolio plans (issue 44)

Expand-only (one new table), so it names 0014 as the oldest compatible code. The downgrade
drops the table.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0015'
down_revision = '0014'
branch_labels = None
depends_on = None

OLDEST_COMPATIBLE_CODE = "0014"
"""Expand-only: code at 0014 runs unchanged on this schema (it ignores the new table)."""

COMPATIBILITY = sa.table("schema_compatibility", sa.column("revision", sa.String),
                         sa.column("oldest_compatible_code", sa.String))


def upgrade() -> None:
    op.create_table(
        "portfolios",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("principal", sa.String(length=128), nullable=False),
        sa.Column("team", sa.String(length=128), nullable=True),
        sa.Column("idempotency_key", sa.String(length=255), nullable=False),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("catalog_version_id", sa.String(length=16), nullable=False),
        sa.Column("estimator_version", sa.String(length=128), nullable=False),
        sa.Column("policy_name", sa.String(length=64), nullable=True),
        sa.Column("policy_revision", sa.Integer(), nullable=True),
        sa.Column("verdict", sa.String(length=16), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("response", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["catalog_version_id"], ["catalog_versions.id"],
                                name=op.f("fk_portfolios_catalog_version_id_catalog_versions")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_portfolios")),
        sa.UniqueConstraint("principal", "idempotency_key",
                            name="uq_portfolios_principal_idempotency"),
    )
    with op.batch_alter_table("portfolios", schema=None) as batch_op:
        batch_op.create_index("ix_portfolios_created_at_id", ["created_at", "id"], unique=False)
        batch_op.create_index(batch_op.f("ix_portfolios_principal"), ["principal"],
                              unique=False)
    op.bulk_insert(COMPATIBILITY, [{"revision": revision,
                                    "oldest_compatible_code": OLDEST_COMPATIBLE_CODE}])


def downgrade() -> None:
    op.execute(COMPATIBILITY.delete().where(COMPATIBILITY.c.revision == revision))
    with op.batch_alter_table("portfolios", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_portfolios_principal"))
        batch_op.drop_index("ix_portfolios_created_at_id")
    op.drop_table("portfolios")
