"""The guard on Alembic's version table: once a database is fenced, the database itself refuses a
version-table write from a transaction that did not claim the fence (plain ``alembic``); a fenced
database gets an empty version table before its first write (:func:`guard_first_write`).

PostgreSQL: a trigger checks that the backend holds claim()'s advisory lock (the fence schema's
``guard_version_table()``). SQLite: triggers refuse the write unless a fenced run marked it in the
same transaction (:func:`mark_version_write`). MySQL and MariaDB: triggers refuse it unless the
session holds a fenced resource's named lock, and record the refused revision as dirty. Opting out (:func:`allow_tokenless_writes`) removes
the guard and is recorded, so no later run puts it back.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection

from .alembic_internals import create_version_table
from .dirty import utc_text
from .fence_schema import installed_version
from .queries import query_dialect, statement

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
    table = VersionTable.of(context)
    dialect = query_dialect(context.dialect.name)
    if dialect == "postgresql":
        params = {"version_table": table.name, "relation": table.relation(context)}
        clause = statement("guard_version_table", quoted_schema).bindparams(**params)
        if context.as_sql:
            compiled = clause.compile(dialect=context.dialect, compile_kwargs={"literal_binds": True})
            context.impl.static_output(str(compiled) + context.impl.command_terminator)
        else:
            assert context.connection is not None
            context.connection.execute(clause)
    elif dialect in ("sqlite", "mysql") and not context.as_sql:
        connection = context.connection
        assert connection is not None
        state = _prefixed_state(connection, quoted_schema, table)
        if state["table_exists"] and state["allowed_at"] is None and not state["guarded"]:
            _run_script(connection, _trigger_script("guard_version_table", quoted_schema, table, context))


def guard_first_write(context: MigrationContext, quoted_schema: str) -> None:
    """Create Alembic's version table (empty, as Alembic's first run would) and guard it, on a
    fenced database whose version table does not exist yet: otherwise plain ``alembic``'s first
    write would create it unguarded. Nothing when the fence schema is not installed or tokenless
    writes were allowed."""
    assert context.connection is not None
    if installed_version(context.connection, quoted_schema) is None:
        return
    state = guard_state(context, quoted_schema)
    if state is None or state.status == ALLOWED:
        return
    create_version_table(context)
    guard_version_table(context, quoted_schema)


def allow_tokenless_writes(context: MigrationContext, quoted_schema: str) -> None:
    """Opt out: record that the version table takes writes without a token and remove its guard."""
    connection = context.connection
    assert connection is not None
    table = VersionTable.of(context)
    dialect = query_dialect(context.dialect.name)
    if dialect == "postgresql":
        connection.execute(
            statement("allow_tokenless_writes", quoted_schema),
            {"version_table": table.name, "relation": table.relation(context)},
        )
    elif dialect in ("sqlite", "mysql"):
        connection.execute(statement("allow_tokenless_writes", quoted_schema, dialect), {"version_table": table.name})
        _run_script(connection, _trigger_script("unguard_version_table", quoted_schema, table, context))


def forbid_tokenless_writes(context: MigrationContext, quoted_schema: str) -> None:
    """Opt back in: forget the opt-out and guard the version table again (once it exists)."""
    connection = context.connection
    assert connection is not None
    table = VersionTable.of(context)
    dialect = query_dialect(context.dialect.name)
    if dialect == "postgresql":
        connection.execute(
            statement("forbid_tokenless_writes", quoted_schema),
            {"version_table": table.name, "relation": table.relation(context)},
        )
    elif dialect in ("sqlite", "mysql"):
        connection.execute(statement("forbid_tokenless_writes", quoted_schema, dialect), {"version_table": table.name})
        guard_version_table(context, quoted_schema)


def guard_state(context: MigrationContext, quoted_schema: str) -> GuardState | None:
    """Whether tokenless writes to the version table are refused, allowed on purpose, or unguarded
    (None on a database fencemigrate does not guard)."""
    connection = context.connection
    assert connection is not None
    table = VersionTable.of(context)
    dialect = query_dialect(context.dialect.name)
    if dialect == "postgresql":
        row = connection.execute(
            statement("version_guard_state", quoted_schema),
            {"version_table": table.name, "relation": table.relation(context)},
        ).one()
        allowed_at, guarded = row.allowed_at, bool(row.guarded)
    elif dialect in ("sqlite", "mysql"):
        found = _prefixed_state(connection, quoted_schema, table)
        allowed_at, guarded = found["allowed_at"], bool(found["guarded"])
    else:
        return None
    if allowed_at is not None:
        return GuardState(ALLOWED, utc_text(allowed_at))
    return GuardState(GUARDED if guarded else UNGUARDED)


def mark_version_write(connection: Connection, quoted_schema: str) -> None:
    """SQLite: the fenced run's transaction is about to write the version table (cleared after)."""
    connection.execute(statement("mark_version_write", quoted_schema, "sqlite"))


def clear_version_write(connection: Connection, quoted_schema: str) -> None:
    """SQLite: the version row is written; writes without a mark are refused again."""
    connection.execute(statement("clear_version_write", quoted_schema, "sqlite"))


def _trigger_names(table: VersionTable) -> dict[str, str]:
    return {f"{op}_guard": f"{table.table}_no_tokenless_{op}" for op in ("insert", "update", "delete")}


def _prefixed_state(connection: Connection, quoted_schema: str, table: VersionTable) -> dict[str, Any]:
    row = connection.execute(
        statement("version_guard_state", quoted_schema, connection.dialect.name),
        {
            "version_table": table.name,
            "table_name": table.table,
            "trigger_name": _trigger_names(table)["insert_guard"],
        },
    ).one()
    return dict(row._mapping)


def _trigger_script(name: str, quoted_schema: str, table: VersionTable, context: MigrationContext) -> str:
    preparer = context.dialect.identifier_preparer
    text = statement(name, quoted_schema, context.dialect.name).text
    text = text.replace("{version_table}", table.relation(context))
    text = text.replace("{version_table_name}", "'" + table.name.replace("\\", "\\\\").replace("'", "''") + "'")
    for placeholder, trigger in _trigger_names(table).items():
        text = text.replace("{" + placeholder + "}", preparer.quote(trigger))
    return text


def _run_script(connection: Connection, script: str) -> None:
    """Run a trigger script one statement at a time: on SQLite a trigger body's semicolons do not
    end a statement; on MySQL, statements end with ``//``."""
    if connection.dialect.name == "sqlite":
        pending = ""
        for line in script.splitlines(keepends=True):
            pending += line
            if sqlite3.complete_statement(pending):
                connection.exec_driver_sql(pending.strip(), execution_options={"no_parameters": True})
                pending = ""
        return
    for sql in script.split("//"):
        if sql.strip():
            connection.exec_driver_sql(sql.strip(), execution_options={"no_parameters": True})
