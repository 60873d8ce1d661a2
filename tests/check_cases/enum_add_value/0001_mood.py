"""mood

Revision ID: 0001
Revises: None
"""
from alembic import op
import sqlalchemy as sa

revision = '0001'
down_revision = None


def upgrade():
    op.execute("ALTER TYPE mood ADD VALUE IF NOT EXISTS 'meh' AFTER 'ok'")


def downgrade():
    op.execute("ALTER TYPE mood RENAME VALUE 'meh' TO 'meh_unused'")
