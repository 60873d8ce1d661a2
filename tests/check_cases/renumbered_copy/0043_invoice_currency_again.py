"""invoice currency again

Revision ID: 0043
Revises: 0042
"""
from alembic import op
import sqlalchemy as sa

revision = '0043'
down_revision = '0042'


def upgrade():
    # the same migration, reformatted
    op.add_column(
        'invoice',
        sa.Column('currency', sa.String(3)),
    )
    op.execute('''update invoice
       set currency = 'EUR' ''')


def downgrade():
    op.drop_column("invoice", "currency")
