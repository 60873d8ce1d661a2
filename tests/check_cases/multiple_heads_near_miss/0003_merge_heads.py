"""merge heads

Revision ID: 0003
Revises: ('0002a', '0002b')
"""
from alembic import op
import sqlalchemy as sa

revision = '0003'
down_revision = ('0002a', '0002b')


def upgrade():
    pass


def downgrade():
    pass
