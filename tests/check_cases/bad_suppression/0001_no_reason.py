"""no reason

Revision ID: 0001
Revises: None
"""
from alembic import op
import sqlalchemy as sa
# fencemigrate: allow FM301

revision = '0001'
down_revision = None


def upgrade():
    op.execute("CREATE TABLE audit_log (id int)")


def downgrade():
    pass
