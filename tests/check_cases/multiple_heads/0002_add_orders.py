"""add orders

Revision ID: 0002b
Revises: 0001
"""
from alembic import op
import sqlalchemy as sa

revision = '0002b'
down_revision = '0001'


def upgrade():
    op.execute("CREATE TABLE orders (id int)")


def downgrade():
    op.execute("DROP TABLE orders")
