"""maintenance

Revision ID: 0001
Revises: None
"""
from alembic import op
import sqlalchemy as sa

revision = '0001'
down_revision = None


def upgrade():
    op.execute("ANALYZE invoice")
    op.execute("CREATE TABLE vacuum_log (id int)")
    op.execute("CLUSTER invoice USING invoice_pkey")


def downgrade():
    op.execute("DROP TABLE vacuum_log")
