"""add payouts

Revision ID: 0046a
Revises: 0045
"""
from alembic import op
import sqlalchemy as sa

revision = '0046a'
down_revision = '0045'


def upgrade():
    op.execute("CREATE TABLE payouts (id int)")


def downgrade():
    op.execute("DROP TABLE payouts")
