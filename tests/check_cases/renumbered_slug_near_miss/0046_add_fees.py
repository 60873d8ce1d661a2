"""add fees

Revision ID: 0046b
Revises: 0045
"""
from alembic import op
import sqlalchemy as sa

revision = '0046b'
down_revision = '0045'


def upgrade():
    op.execute("CREATE TABLE fees (id int)")


def downgrade():
    op.execute("DROP TABLE fees")
