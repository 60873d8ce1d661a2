"""add invoice currency

Revision ID: 0042
Revises: 0041
"""
from alembic import op
import sqlalchemy as sa

revision = '0042'
down_revision = '0041'


def upgrade():
    op.add_column("invoice", sa.Column("currency", sa.String(3)))
    op.execute("UPDATE invoice SET currency = 'EUR'")


def downgrade():
    op.drop_column("invoice", "currency")
