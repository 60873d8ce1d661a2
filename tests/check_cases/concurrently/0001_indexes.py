"""indexes

Revision ID: 0001
Revises: None
"""
from alembic import op
import sqlalchemy as sa

revision = '0001'
down_revision = None


def upgrade():
    op.execute("CREATE UNIQUE INDEX CONCURRENTLY ix_invoice_number ON invoice (number)")
    op.create_index("ix_invoice_date", "invoice", ["date"], postgresql_concurrently=True)
    op.execute(sa.text("REINDEX INDEX CONCURRENTLY ix_invoice_customer"))
    op.execute("ALTER TABLE invoice DETACH PARTITION invoice_2019 CONCURRENTLY")


def downgrade():
    op.execute("DROP INDEX CONCURRENTLY ix_invoice_number")
    op.drop_index("ix_invoice_date", "invoice")
