"""maintenance

Revision ID: 0001
Revises: None
"""
from alembic import op
import sqlalchemy as sa

revision = '0001'
down_revision = None


def upgrade():
    op.execute("VACUUM (ANALYZE) invoice")
    op.execute("ALTER SYSTEM SET work_mem = '64MB'")
    op.execute("CREATE DATABASE reporting")


def downgrade():
    op.execute("DROP DATABASE reporting")
