"""analyze

Revision ID: 0001
Revises: None
"""
from alembic import op
import sqlalchemy as sa
# fencemigrate: allow FM301 because ANALYZE changes no schema

revision = '0001'
down_revision = None


def upgrade():
    with op.get_context().autocommit_block():
        op.execute("ANALYZE invoice")


def downgrade():
    pass
