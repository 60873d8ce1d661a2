"""functions

Revision ID: 0001
Revises: None
"""
from alembic import op
import sqlalchemy as sa

revision = '0001'
down_revision = None


def upgrade():
    op.execute("""
        CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            NEW.updated_at := now();  -- COMMIT is not allowed here anyway
            RETURN NEW;
        END
        $$
    """)
    op.execute("CREATE FUNCTION one() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END")
    op.execute("INSERT INTO audit (action) VALUES ('COMMIT')")


def downgrade():
    op.execute("DROP FUNCTION one()")
    op.execute("DROP FUNCTION touch()")
