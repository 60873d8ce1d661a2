"""The guard on Alembic's version table: once a database is fenced, the database itself refuses a
version-table write from a transaction that did not claim the fence (plain ``alembic``); a fenced
database gets an empty version table before its first write (:func:`guard_first_write`).

PostgreSQL: a trigger checks that this transaction claimed the fence, or that the backend holds
claim()'s advisory lock (the fence schema's ``guard_version_table()``). SQLite: triggers refuse the
write unless a fenced run marked it in the same transaction (``Dialect.mark_version_write``). MySQL
and MariaDB: triggers refuse it unless the session holds a fenced resource's named lock, and record
the refused revision as dirty. Opting out (:func:`allow_tokenless_writes`) removes the guard and is
recorded, so no later run puts it back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from alembic.runtime.migration import MigrationContext

from ..alembic_internals import create_version_table
from ..dialects import dialect_for, installed_version

GUARDED = "refused"
ALLOWED = "allowed"
UNGUARDED = "unguarded"


@dataclass(frozen=True)
class VersionTable:
    """Alembic's version table: its ledger name (``schema.table`` or ``table``) and its parts."""

    name: str
    schema: str | None
    table: str

    @classmethod
    def of(cls, context: MigrationContext) -> VersionTable:
        """The version table env.py configured."""
        schema = context.version_table_schema
        table = context.version_table
        return cls(f"{schema}.{table}" if schema else table, schema, table)

    def relation(self, context: MigrationContext) -> str:
        """The table's quoted, schema-qualified name."""
        preparer = context.dialect.identifier_preparer
        return ".".join(preparer.quote(part) for part in (self.schema, self.table) if part)


@dataclass(frozen=True)
class GuardState:
    """How the database treats writes without a token on the version table."""

    status: str  # GUARDED, ALLOWED (opted out) or UNGUARDED (not fenced yet, or the trigger is gone)
    allowed_at: str | None = None

    def as_json(self) -> dict[str, Any]:
        """JSON form, in ``state --json``."""
        return {"status": self.status, "allowed_at": self.allowed_at}


def guard_version_table(context: MigrationContext, quoted_schema: str) -> None:
    """Put the guard on the version table unless it is there, the table does not exist yet, or
    tokenless writes were allowed. In the caller's transaction; offline, written to the script."""
    dialect, connection = dialect_for(context), context.connection
    if context.as_sql or connection is None:
        dialect.guard_version_table(context, quoted_schema, VersionTable.of(context))
        return
    with dialect.guarding_turns(connection, quoted_schema):
        dialect.guard_version_table(context, quoted_schema, VersionTable.of(context))


def guard_first_write(context: MigrationContext, quoted_schema: str) -> None:
    """Create Alembic's version table (empty, as Alembic's first run would) and guard it, on a
    fenced database whose version table does not exist yet: otherwise plain ``alembic``'s first
    write would create it unguarded. Nothing when the fence schema is not installed or tokenless
    writes were allowed."""
    assert context.connection is not None
    if installed_version(context.connection, quoted_schema) is None:
        return
    with dialect_for(context).guarding_turns(context.connection, quoted_schema):
        if guard_state(context, quoted_schema).status == ALLOWED:
            return
        create_version_table(context)
        guard_version_table(context, quoted_schema)


def allow_tokenless_writes(context: MigrationContext, quoted_schema: str) -> None:
    """Opt out: record that the version table takes writes without a token and remove its guard."""
    dialect_for(context).allow_tokenless_writes(context, quoted_schema, VersionTable.of(context))


def forbid_tokenless_writes(context: MigrationContext, quoted_schema: str) -> None:
    """Opt back in: forget the opt-out and guard the version table again (once it exists)."""
    dialect_for(context).forbid_tokenless_writes(context, quoted_schema, VersionTable.of(context))


def guard_state(context: MigrationContext, quoted_schema: str) -> GuardState:
    """Whether tokenless writes to the version table are refused, allowed on purpose, or unguarded."""
    dialect = dialect_for(context)
    allowed_at, guarded = dialect.guard_state(context, quoted_schema, VersionTable.of(context))
    if allowed_at is not None:
        return GuardState(ALLOWED, dialect.time_text(allowed_at))
    return GuardState(GUARDED if guarded else UNGUARDED)
