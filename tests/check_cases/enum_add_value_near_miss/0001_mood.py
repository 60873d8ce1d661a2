"""mood

Revision ID: 0001
Revises: None
"""
from alembic import op
import sqlalchemy as sa

revision = '0001'
down_revision = None


def upgrade():
    op.execute("CREATE TYPE mood AS ENUM ('sad', 'ok')")
    op.execute("ALTER TYPE mood RENAME VALUE 'sad' TO 'blue'")


def downgrade():
    op.execute("DROP TYPE mood")
