"""add refunds

Revision ID: 0044b
Revises: 0043
"""
from alembic import op
import sqlalchemy as sa

revision = '0044b'
down_revision = '0043'


def upgrade():
    op.execute("CREATE TABLE refunds (id int)")


def downgrade():
    op.execute("DROP TABLE refunds")
