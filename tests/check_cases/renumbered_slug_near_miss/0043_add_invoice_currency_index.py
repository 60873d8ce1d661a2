"""add invoice currency index

Revision ID: 0043
Revises: 0042
"""
from alembic import op
import sqlalchemy as sa

revision = '0043'
down_revision = '0042'


def upgrade():
    op.create_index("ix_invoice_currency", "invoice", ["currency"])


def downgrade():
    op.drop_index("ix_invoice_currency", "invoice")
