"""add orders (started as a copy of 0002's file)

Revision ID: 0002
Revises: 0001
"""
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade():
    op.execute("CREATE TABLE orders (id int)")


def downgrade():
    op.execute("DROP TABLE orders")
