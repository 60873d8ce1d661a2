"""currency not null

Revision ID: 0044
Revises: 0043
"""
from alembic import op
import sqlalchemy as sa

revision = '0044'
down_revision = '0043'


def upgrade():
    op.add_column("invoice", sa.Column("currency", sa.String(3), nullable=False))
    op.execute("UPDATE invoice SET currency = 'EUR'")


def downgrade():
    op.drop_column("invoice", "currency")
