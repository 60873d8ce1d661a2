"""merge

Revision ID: 0045
Revises: ('0044a', '0044b')
"""
from alembic import op
import sqlalchemy as sa

revision = '0045'
down_revision = ('0044a', '0044b')


def upgrade():
    pass


def downgrade():
    pass
