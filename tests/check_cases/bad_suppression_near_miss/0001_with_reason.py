"""with reason

Revision ID: 0001
Revises: None
"""
from alembic import op
import sqlalchemy as sa
# fencemigrate: allow missing-downgrade because the table holds an append-only audit log

revision = '0001'
down_revision = None


def upgrade():
    op.execute("CREATE TABLE t (id int)")


def downgrade():
    pass
