"""base

Revision ID: 0041
Revises: None
"""
from alembic import op
import sqlalchemy as sa

revision = '0041'
down_revision = None


def upgrade():
    op.execute("CREATE TABLE t (id int)")


def downgrade():
    op.execute("DROP TABLE t")
