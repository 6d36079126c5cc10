"""quote ownership: API keys may belong to a team; a quote records its creator's team

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.add_column(sa.Column('team', sa.String(length=128), nullable=True))
    with op.batch_alter_table('quotes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('team', sa.String(length=128), nullable=True))
        batch_op.create_index('ix_quotes_team_created_at', ['team', 'created_at'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('quotes', schema=None) as batch_op:
        batch_op.drop_index('ix_quotes_team_created_at')
        batch_op.drop_column('team')
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.drop_column('team')
