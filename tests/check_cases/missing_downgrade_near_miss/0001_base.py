"""base

Revision ID: 0001
Revises: None
"""
from alembic import op
import sqlalchemy as sa

revision = '0001'
down_revision = None


def upgrade():
    op.execute("CREATE TABLE t (id int)")


def downgrade():
    raise NotImplementedError("restore the backup taken before 0001")
