"""add invoice currency

Revision ID: 0043
Revises: 0042
"""
from alembic import op
import sqlalchemy as sa

revision = '0043'
down_revision = '0042'


def upgrade():
    op.add_column("invoice", sa.Column("currency", sa.Text))


def downgrade():
    op.drop_column("invoice", "currency")
