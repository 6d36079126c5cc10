"""fabric facts on offers, paged quote lines, procurement policies

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('offer_revisions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('nvlink_domain', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('inter_node_gbps', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('fabric_source', sa.Text(), nullable=True))
    with op.batch_alter_table('quotes', schema=None) as batch_op:
        batch_op.add_column(sa.Column('lines', sa.Text(), nullable=True))
        batch_op.add_column(sa.Column('policy_name', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('policy_revision', sa.Integer(), nullable=True))
    op.create_table('policy_revisions',
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('revision', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('created_by', sa.String(length=128), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.Column('rules', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('name', 'revision', name=op.f('pk_policy_revisions'))
    )


def downgrade() -> None:
    op.drop_table('policy_revisions')
    with op.batch_alter_table('quotes', schema=None) as batch_op:
        batch_op.drop_column('policy_revision')
        batch_op.drop_column('policy_name')
        batch_op.drop_column('lines')
    with op.batch_alter_table('offer_revisions', schema=None) as batch_op:
        batch_op.drop_column('fabric_source')
        batch_op.drop_column('inter_node_gbps')
        batch_op.drop_column('nvlink_domain')
