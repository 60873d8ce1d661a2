"""backfill

Revision ID: 0001
Revises: None
"""
from alembic import op
import sqlalchemy as sa

revision = '0001'
down_revision = None


def upgrade():
    bind = op.get_bind()
    savepoint = bind.begin_nested()
    op.execute("UPDATE invoice SET currency = 'EUR'")
    savepoint.commit()
    session = sa.orm.Session(bind=bind)
    session.commit()


def downgrade():
    op.execute("UPDATE invoice SET currency = NULL")
