"""fx rates: the ECB euro reference rates, versioned append-only (issue 17)

Quotes convert a budget in another currency with one fixing day's rates and name the FX
version and date they used, so ``verify`` reproduces them (service/catalog/fx.py).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "fx_versions",
        sa.Column("id", sa.String(16), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("added", sa.Integer(), nullable=False),
        sa.Column("rate_count", sa.Integer(), nullable=False),
        sa.Column("first_date", sa.Date(), nullable=False),
        sa.Column("last_date", sa.Date(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fx_versions")),
        sa.UniqueConstraint("number", name=op.f("uq_fx_versions_number")),
    )
    op.create_table(
        "fx_rates",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("version_number", sa.Integer(), nullable=False),
        sa.Column("date", sa.Date(), nullable=False),
        sa.Column("currency", sa.String(3), nullable=False),
        sa.Column("rate_per_eur", sa.String(40), nullable=False),
        sa.ForeignKeyConstraint(["version_number"], ["fx_versions.number"],
                                name=op.f("fk_fx_rates_version_number_fx_versions")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_fx_rates")),
        sa.UniqueConstraint("date", "currency", name=op.f("uq_fx_rates_date")),
    )
    op.create_index("ix_fx_rates_currency_date", "fx_rates", ["currency", "date"])


def downgrade() -> None:
    op.drop_index("ix_fx_rates_currency_date", table_name="fx_rates")
    op.drop_table("fx_rates")
    op.drop_table("fx_versions")
