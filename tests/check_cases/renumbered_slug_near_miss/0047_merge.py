"""merge

Revision ID: 0047
Revises: ('0046a', '0046b')
"""
from alembic import op
import sqlalchemy as sa

revision = '0047'
down_revision = ('0046a', '0046b')


def upgrade():
    pass


def downgrade():
    pass
