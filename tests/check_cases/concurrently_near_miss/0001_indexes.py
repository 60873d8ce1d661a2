"""indexes

Revision ID: 0001
Revises: None
"""
from alembic import op
import sqlalchemy as sa

revision = '0001'
down_revision = None


def upgrade():
    op.execute("REFRESH MATERIALIZED VIEW CONCURRENTLY invoice_totals")
    op.execute("CREATE TABLE job_log (concurrently boolean)  -- not CREATE INDEX CONCURRENTLY")
    op.create_index("ix_invoice_date", "invoice", ["date"], postgresql_concurrently=False)


def downgrade():
    op.drop_index("ix_invoice_date", "invoice")
    op.execute("DROP TABLE job_log")
