"""add invoice currency

Revision ID: 0042
Revises: None
"""
from alembic import op
import sqlalchemy as sa

revision = '0042'
down_revision = None


def upgrade():
    op.add_column("invoice", sa.Column("currency", sa.String(3)))


def downgrade():
    op.drop_column("invoice", "currency")
