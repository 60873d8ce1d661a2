"""A ``--sql`` script from base creates Alembic's version table only if it does not exist yet.

A fenced database already has the version table, empty and guarded: ``fencemigrate install`` and
every lease grant create it, so that plain Alembic's first write is refused too. Alembic's offline
script from base begins with a plain ``CREATE TABLE`` of it, which would then fail in psql; the
fenced script writes the same statement with ``IF NOT EXISTS`` instead (and guards the table right
after it, as before).
"""

from __future__ import annotations

from alembic.runtime.migration import MigrationContext
from sqlalchemy.schema import CreateTable

from ..alembic_internals import rewrite_offline_output


def create_version_table_if_missing(context: MigrationContext) -> None:
    """From now on, write Alembic's ``CREATE TABLE`` of its version table to the script as
    ``CREATE TABLE IF NOT EXISTS`` (the same table, compiled the way Alembic compiles it)."""
    impl = context.impl
    table = impl.version_table_impl(
        version_table=context.version_table,
        version_table_schema=context.version_table_schema,
        version_table_pk=context.opts.get("version_table_pk", True),
    )

    def as_script(statement: CreateTable) -> str:
        compiled = statement.compile(dialect=context.dialect)
        return str(compiled).replace("\t", "    ").strip() + impl.command_terminator

    plain = as_script(CreateTable(table))
    if_not_exists = as_script(CreateTable(table, if_not_exists=True))
    rewrite_offline_output(context, lambda text: if_not_exists if text == plain else text)
