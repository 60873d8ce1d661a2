"""add orders

Revision ID: 0003
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa

revision = '0003'
down_revision = '0002'


def upgrade():
    op.execute("CREATE TABLE orders (id int)")


def downgrade():
    op.execute("DROP TABLE orders")
