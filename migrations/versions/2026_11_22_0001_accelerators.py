"""accelerators: datasheet facts per accelerator

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "accelerators",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("vendor", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("memory_gib", sa.Float(), nullable=False),
        sa.Column("hbm_tbytes_per_s", sa.Float(), nullable=False),
        sa.Column("fp32_tflops", sa.Float(), nullable=True),
        sa.Column("tf32_tflops", sa.Float(), nullable=True),
        sa.Column("bf16_tflops", sa.Float(), nullable=True),
        sa.Column("fp16_tflops", sa.Float(), nullable=True),
        sa.Column("fp8_tflops", sa.Float(), nullable=True),
        sa.Column("tdp_w", sa.Float(), nullable=False),
        sa.Column("scaleup_domain_size", sa.Integer(), nullable=False),
        sa.Column("scaleup_gbytes_per_s", sa.Float(), nullable=False),
        sa.Column("scaleout_gbits_per_s", sa.Float(), nullable=False),
        sa.Column("purchase_price_usd_micros", sa.BigInteger(), nullable=True),
        sa.Column("price_basis", sa.Text(), nullable=True),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("as_of", sa.Date(), nullable=False),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_accelerators")),
    )


def downgrade() -> None:
    op.drop_table("accelerators")
