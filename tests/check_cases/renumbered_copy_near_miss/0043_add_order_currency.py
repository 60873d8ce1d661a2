"""add order currency

Revision ID: 0043
Revises: 0042
"""
from alembic import op
import sqlalchemy as sa

revision = '0043'
down_revision = '0042'


def upgrade():
    op.add_column("orders", sa.Column("currency", sa.String(3)))
    op.execute("UPDATE orders SET currency = 'EUR'")


def downgrade():
    op.drop_column("orders", "currency")
