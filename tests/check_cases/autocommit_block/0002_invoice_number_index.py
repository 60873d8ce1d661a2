"""invoice number index, built concurrently (PostgreSQL's documented pattern)

Revision ID: 0002
Revises: 0001
"""
from alembic import op
import sqlalchemy as sa

revision = '0002'
down_revision = '0001'


def upgrade():
    with op.get_context().autocommit_block():
        op.execute("CREATE INDEX CONCURRENTLY ix_invoice_number ON invoice (number)")
        op.create_index("ix_invoice_date", "invoice", ["date"], postgresql_concurrently=True)


def downgrade():
    with op.get_context().autocommit_block():
        op.drop_index("ix_invoice_date", "invoice", postgresql_concurrently=True)
        op.execute("DROP INDEX CONCURRENTLY ix_invoice_number")
