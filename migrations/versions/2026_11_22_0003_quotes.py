"""quotes: immutable priced quotes with their idempotency keys

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('quotes',
    sa.Column('id', sa.String(length=40), nullable=False),
    sa.Column('principal', sa.String(length=128), nullable=False),
    sa.Column('idempotency_key', sa.String(length=255), nullable=False),
    sa.Column('request_hash', sa.String(length=64), nullable=False),
    sa.Column('request_id', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('catalog_version_id', sa.String(length=16), nullable=False),
    sa.Column('catalog_content_hash', sa.String(length=64), nullable=False),
    sa.Column('estimator_version', sa.String(length=128), nullable=False),
    sa.Column('verdict', sa.String(length=16), nullable=True),
    sa.Column('requote_of', sa.String(length=40), nullable=True),
    sa.Column('request', sa.JSON(), nullable=False),
    sa.Column('response', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['catalog_version_id'], ['catalog_versions.id'], name=op.f('fk_quotes_catalog_version_id_catalog_versions')),
    sa.ForeignKeyConstraint(['requote_of'], ['quotes.id'], name=op.f('fk_quotes_requote_of_quotes')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_quotes')),
    sa.UniqueConstraint('principal', 'idempotency_key', name='uq_quotes_principal_idempotency')
    )
    with op.batch_alter_table('quotes', schema=None) as batch_op:
        batch_op.create_index('ix_quotes_created_at_id', ['created_at', 'id'], unique=False)
        batch_op.create_index(batch_op.f('ix_quotes_principal'), ['principal'], unique=False)
        batch_op.create_index(batch_op.f('ix_quotes_verdict'), ['verdict'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('quotes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_quotes_verdict'))
        batch_op.drop_index(batch_op.f('ix_quotes_principal'))
        batch_op.drop_index('ix_quotes_created_at_id')

    op.drop_table('quotes')
