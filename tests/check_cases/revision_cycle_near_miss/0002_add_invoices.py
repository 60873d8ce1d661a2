"""add invoices

Revision ID: 0002
Revises: 0001
"""
from alembic import op
import sqlalchemy as sa

revision = '0002'
down_revision = '0001'


def upgrade():
    op.execute("CREATE TABLE invoices (id int)")


def downgrade():
    op.execute("DROP TABLE invoices")
