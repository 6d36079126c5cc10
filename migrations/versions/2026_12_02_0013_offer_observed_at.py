"""offer observation dates: offer_revisions.observed_at, the day the price was read (issue 39)

``as_of`` is when the provider published a price (NULL when its source gives no date);
``observed_at`` is when this catalogue read it: the seed files' copy day
(``service/catalog/seed/prices/README.md``), an import's or a refresh's day. An expand-only
step: a new nullable column, nothing existing changes. Stored revisions keep NULL (unknown):
the day an existing row was read is not recorded anywhere the migration can see, so it
invents none (issue 17). The seed step dates the current version's offers that are exactly
the seed's own (``service/catalog/seed.py``); a refresh or an import dates the rest. The
downgrade drops the column (the observation dates are lost; ``as_of`` is untouched).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ADD COLUMN in place on both backends (a batch copy of offer_revisions would drop a
    # table that catalog_version_offers references while SQLite enforces foreign keys).
    op.add_column("offer_revisions", sa.Column("observed_at", sa.Date(), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        # SQLite 3.35+ drops a plain column in place; the batch copy would fail on the
        # foreign keys of catalog_version_offers once the catalogue holds offers.
        op.execute("ALTER TABLE offer_revisions DROP COLUMN observed_at")
    else:
        op.drop_column("offer_revisions", "observed_at")
