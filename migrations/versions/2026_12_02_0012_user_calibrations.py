"""user calibrations: immutable fits on a user's measured runs (issue 37)

An expand-only step: a new table, nothing existing changes, so the code before it runs on
this schema unchanged and the downgrade only drops the table (its calibrations are lost;
quotes that name one keep the id in their stored request and answer, but can no longer be
verified below this revision).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "user_calibrations",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("principal", sa.String(length=128), nullable=False),
        sa.Column("team", sa.String(length=128), nullable=True),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=255), nullable=True),
        sa.Column("request_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("base_calibration_version", sa.String(length=64), nullable=False),
        sa.Column("estimator_version", sa.String(length=128), nullable=False),
        sa.Column("runs_used", sa.Integer(), nullable=False),
        sa.Column("fit", sa.JSON(), nullable=False),
        sa.Column("response", sa.Text(), nullable=False),
        sa.Column("runs_zstd", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_user_calibrations")),
        sa.UniqueConstraint("principal", "name", "revision",
                            name="uq_user_calibrations_principal_name_revision"),
        sa.UniqueConstraint("principal", "idempotency_key",
                            name="uq_user_calibrations_principal_idempotency"),
    )
    with op.batch_alter_table("user_calibrations", schema=None) as batch_op:
        batch_op.create_index("ix_user_calibrations_created_at_id", ["created_at", "id"],
                              unique=False)
        batch_op.create_index("ix_user_calibrations_team_created_at", ["team", "created_at"],
                              unique=False)
        batch_op.create_index(batch_op.f("ix_user_calibrations_principal"), ["principal"],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table("user_calibrations", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_user_calibrations_principal"))
        batch_op.drop_index("ix_user_calibrations_team_created_at")
        batch_op.drop_index("ix_user_calibrations_created_at_id")
    op.drop_table("user_calibrations")
