"""price catalogue: providers, regions, instance types, immutable offer revisions, catalogue
versions with their membership, the current-version pointer, and API keys

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('api_keys',
    sa.Column('id', sa.String(length=16), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('secret_hash', sa.String(length=64), nullable=False),
    sa.Column('scopes', sa.String(length=512), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_keys')),
    sa.UniqueConstraint('name', name=op.f('uq_api_keys_name'))
    )
    op.create_table('catalog_versions',
    sa.Column('id', sa.String(length=16), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('parent_id', sa.String(length=16), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('created_by', sa.String(length=128), nullable=False),
    sa.Column('note', sa.Text(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('offer_count', sa.Integer(), nullable=False),
    sa.Column('report', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['parent_id'], ['catalog_versions.id'], name=op.f('fk_catalog_versions_parent_id_catalog_versions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_catalog_versions')),
    sa.UniqueConstraint('number', name=op.f('uq_catalog_versions_number'))
    )
    op.create_table('providers',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_providers'))
    )
    catalog_state = op.create_table('catalog_state',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('current_version_id', sa.String(length=16), nullable=True),
    sa.Column('write_seq', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['current_version_id'], ['catalog_versions.id'], name=op.f('fk_catalog_state_current_version_id_catalog_versions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_catalog_state'))
    )
    op.bulk_insert(catalog_state, [{"id": 1, "current_version_id": None, "write_seq": 0}])
    op.create_table('instance_types',
    sa.Column('provider_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('accelerator_id', sa.String(length=64), nullable=False),
    sa.Column('gpus_per_instance', sa.Float(), nullable=False),
    sa.Column('vcpus', sa.Float(), nullable=True),
    sa.Column('memory_gib', sa.Float(), nullable=True),
    sa.Column('gpu_memory_gib', sa.Float(), nullable=True),
    sa.Column('interconnect', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['accelerator_id'], ['accelerators.id'], name=op.f('fk_instance_types_accelerator_id_accelerators')),
    sa.ForeignKeyConstraint(['provider_id'], ['providers.id'], name=op.f('fk_instance_types_provider_id_providers')),
    sa.PrimaryKeyConstraint('provider_id', 'name', name=op.f('pk_instance_types'))
    )
    op.create_table('regions',
    sa.Column('provider_id', sa.String(length=64), nullable=False),
    sa.Column('code', sa.String(length=64), nullable=False),
    sa.Column('carbon_g_per_kwh', sa.Float(), nullable=True),
    sa.Column('carbon_source', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['provider_id'], ['providers.id'], name=op.f('fk_regions_provider_id_providers')),
    sa.PrimaryKeyConstraint('provider_id', 'code', name=op.f('pk_regions'))
    )
    op.create_table('offer_revisions',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('offer_id', sa.String(length=40), nullable=False),
    sa.Column('content_hash', sa.String(length=64), nullable=False),
    sa.Column('provider_id', sa.String(length=64), nullable=False),
    sa.Column('region', sa.String(length=64), nullable=False),
    sa.Column('zone', sa.String(length=64), nullable=True),
    sa.Column('instance_type', sa.String(length=128), nullable=False),
    sa.Column('accelerator_id', sa.String(length=64), nullable=False),
    sa.Column('gpus_per_instance', sa.Float(), nullable=False),
    sa.Column('vcpus', sa.Float(), nullable=True),
    sa.Column('memory_gib', sa.Float(), nullable=True),
    sa.Column('gpu_memory_gib', sa.Float(), nullable=True),
    sa.Column('interconnect', sa.Text(), nullable=True),
    sa.Column('term', sa.String(length=32), nullable=False),
    sa.Column('payment_option', sa.String(length=32), nullable=True),
    sa.Column('currency', sa.String(length=3), nullable=False),
    sa.Column('price_per_hour_micros', sa.BigInteger(), nullable=False),
    sa.Column('upfront_fee_micros', sa.BigInteger(), nullable=False),
    sa.Column('effective_price_per_hour_micros', sa.BigInteger(), nullable=False),
    sa.Column('price_per_gpu_hour_micros', sa.BigInteger(), nullable=False),
    sa.Column('interruption_rate_per_hour', sa.Float(), nullable=True),
    sa.Column('interruption_rate_source', sa.Text(), nullable=True),
    sa.Column('region_carbon_g_per_kwh', sa.Float(), nullable=True),
    sa.Column('region_carbon_source', sa.Text(), nullable=True),
    sa.Column('source', sa.Text(), nullable=False),
    sa.Column('as_of', sa.Date(), nullable=False),
    sa.Column('indicative', sa.Boolean(), nullable=False),
    sa.Column('notes', sa.Text(), nullable=False),
    sa.Column('quality_flags', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['accelerator_id'], ['accelerators.id'], name=op.f('fk_offer_revisions_accelerator_id_accelerators')),
    sa.ForeignKeyConstraint(['provider_id', 'instance_type'], ['instance_types.provider_id', 'instance_types.name'], name='fk_offer_revisions_instance_type_instance_types'),
    sa.ForeignKeyConstraint(['provider_id', 'region'], ['regions.provider_id', 'regions.code'], name='fk_offer_revisions_region_regions'),
    sa.ForeignKeyConstraint(['provider_id'], ['providers.id'], name=op.f('fk_offer_revisions_provider_id_providers')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_offer_revisions'))
    )
    with op.batch_alter_table('offer_revisions', schema=None) as batch_op:
        batch_op.create_index('ix_offer_revisions_offer_id_content_hash', ['offer_id', 'content_hash'], unique=False)

    op.create_table('catalog_version_offers',
    sa.Column('version_id', sa.String(length=16), nullable=False),
    sa.Column('offer_id', sa.String(length=40), nullable=False),
    sa.Column('revision_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.ForeignKeyConstraint(['revision_id'], ['offer_revisions.id'], name=op.f('fk_catalog_version_offers_revision_id_offer_revisions')),
    sa.ForeignKeyConstraint(['version_id'], ['catalog_versions.id'], name=op.f('fk_catalog_version_offers_version_id_catalog_versions')),
    sa.PrimaryKeyConstraint('version_id', 'offer_id', name=op.f('pk_catalog_version_offers'))
    )


def downgrade() -> None:
    op.drop_table('catalog_version_offers')
    with op.batch_alter_table('offer_revisions', schema=None) as batch_op:
        batch_op.drop_index('ix_offer_revisions_offer_id_content_hash')

    op.drop_table('offer_revisions')
    op.drop_table('regions')
    op.drop_table('instance_types')
    op.drop_table('catalog_state')
    op.drop_table('providers')
    op.drop_table('catalog_versions')
    op.drop_table('api_keys')
