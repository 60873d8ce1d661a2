"""backfill

Revision ID: 0001
Revises: None
"""
from alembic import op
import sqlalchemy as sa

revision = '0001'
down_revision = None


def upgrade():
    op.execute("UPDATE invoice SET currency = 'EUR'; COMMIT;")
    op.execute("BEGIN")
    op.get_bind().exec_driver_sql("END")


def downgrade():
    op.execute("UPDATE invoice SET currency = NULL")
