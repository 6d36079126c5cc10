"""discount books: an organisation's negotiated prices, immutable revisions (issue 17)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "discount_book_revisions",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("entries", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("name", "revision", name=op.f("pk_discount_book_revisions")),
    )


def downgrade() -> None:
    op.drop_table("discount_book_revisions")
