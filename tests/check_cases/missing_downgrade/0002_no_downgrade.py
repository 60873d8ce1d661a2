"""no downgrade

Revision ID: 0002
Revises: 0001
"""
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade():
    op.execute("CREATE TABLE u (id int)")
