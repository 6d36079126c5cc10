"""undated offers: offer_revisions.as_of may be NULL when the price's source gives no date

Issue 17: a price whose source gives no date says ``unknown`` (NULL here) and is flagged
``undated_price``; it is never given a stand-in date.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("offer_revisions") as batch:
        batch.alter_column("as_of", existing_type=sa.Date(), nullable=True)


def downgrade() -> None:
    # A NULL date has no honest replacement: refuse rather than invent one.
    bind = op.get_bind()
    undated = bind.execute(sa.text(
        "SELECT count(*) FROM offer_revisions WHERE as_of IS NULL")).scalar_one()
    if undated:
        raise RuntimeError(f"{undated} offer revisions have no date; downgrade would need a "
                           "stand-in date, which issue 17 forbids")
    with op.batch_alter_table("offer_revisions") as batch:
        batch.alter_column("as_of", existing_type=sa.Date(), nullable=False)
