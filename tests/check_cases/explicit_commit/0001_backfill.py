"""backfill

Revision ID: 0001
Revises: None
"""
from alembic import op
import sqlalchemy as sa

revision = '0001'
down_revision = None


def upgrade():
    op.execute("UPDATE invoice SET currency = 'EUR'")
    op.get_bind().commit()
    bind = op.get_bind()
    raw = bind.connection
    raw.rollback()


def downgrade():
    op.execute("UPDATE invoice SET currency = NULL")
