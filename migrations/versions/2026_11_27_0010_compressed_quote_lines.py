"""quotes.lines_zstd: a quote's every line stored zstd-compressed (issue 16, decision 163)

A quote's lines were stored as JSON text, about 525 KB for the load benchmark's quote of 197
lines; compressed they are about 19 KB. New quotes fill ``lines_zstd`` and leave ``lines``
empty; older quotes keep their text, which the service still reads. The downgrade writes
every compressed quote's lines back as text before dropping the column, so it loses nothing.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
import zstandard
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("quotes") as batch:
        batch.add_column(sa.Column("lines_zstd", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    quotes = sa.table("quotes", sa.column("id", sa.String()), sa.column("lines", sa.Text()),
                      sa.column("lines_zstd", sa.LargeBinary()))
    connection = op.get_bind()
    decompressor = zstandard.ZstdDecompressor()
    # The ids first, then one quote at a time: no cursor is left open over the table while
    # it is updated (SQLite), and one quote's text at a time is in memory.
    packed_ids = connection.execute(
        sa.select(quotes.c.id).where(quotes.c.lines_zstd.is_not(None))).scalars().all()
    for quote_id in packed_ids:
        data = connection.execute(sa.select(quotes.c.lines_zstd).where(
            quotes.c.id == quote_id)).scalar_one()
        connection.execute(quotes.update().where(quotes.c.id == quote_id).values(
            lines=decompressor.decompress(data).decode()))
    with op.batch_alter_table("quotes") as batch:
        batch.drop_column("lines_zstd")
