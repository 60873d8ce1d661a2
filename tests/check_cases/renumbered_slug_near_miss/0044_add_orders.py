"""add orders

Revision ID: 0044a
Revises: 0043
"""
from alembic import op
import sqlalchemy as sa

revision = '0044a'
down_revision = '0043'


def upgrade():
    op.execute("CREATE TABLE orders (id int)")


def downgrade():
    op.execute("DROP TABLE orders")
