"""SQLite: one file, one writer at a time, transactional DDL once pysqlite is told so."""

from __future__ import annotations

import sqlite3
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any, ClassVar

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection
from sqlalchemy.dialects import sqlite

from ..errors import read_only_words
from . import sqlite_schema
from .base import PRECHECK, SchemaScripts
from .fence_calls import FenceCalls, SqliteFenceCalls, SqliteScriptCalls
from .prefixed import PrefixedDialect
from .sqlite_transactions import manages, sqlite_transactions, waiting_at_begins
from .statements import statement
from .waits import WaitBound


class SqliteDialect(PrefixedDialect):
    """Prefixed fence tables in the database file; every fenced transaction is ``BEGIN IMMEDIATE``
    (:mod:`.sqlite_transactions`); no pre-check mode, no ``--preempt``."""

    __dialect__ = "sqlite"
    display_name = "SQLite"
    identifier_quote = '"'
    refused_modes: ClassVar[dict[str, str]] = {
        PRECHECK: (
            "--mode precheck is not available on SQLite: its DDL is transactional and the default "
            "mode fences every revision atomically. Nothing was changed"
        )
    }
    can_preempt = False
    tracks_dirty = False  # pre-check mode, which leaves revisions dirty, is not for SQLite
    shell_scripts = True
    renews_in_migration_transaction = True
    context_options: ClassVar[dict[str, Any]] = {
        "transactional_ddl": True  # Alembic's SQLiteImpl assumes pysqlite's autocommit
    }

    @classmethod
    def read_only_reason(cls, error: BaseException) -> str | None:
        """SQLITE_READONLY ("attempt to write a readonly database"), told by its code or its text."""
        original = getattr(error, "orig", error)
        if getattr(original, "sqlite_errorcode", None) != sqlite3.SQLITE_READONLY and "readonly database" not in str(
            original
        ):
            return None
        args: tuple[Any, ...] = tuple(getattr(original, "args", ()))
        hint = "this process may not write the database file or its directory, or the URL opens it with mode=ro"
        return read_only_words(error, args[0] if args else original, hint)

    def schema_scripts(self) -> SchemaScripts:
        return sqlite_schema.shipped_scripts()

    def ensure_installed(
        self, connection: Connection, quoted_schema: str, scripts: SchemaScripts | None = None
    ) -> bool:
        return sqlite_schema.ensure_installed(connection, quoted_schema, scripts)

    def offline_install_script(self, schema: str) -> str:
        """For the ``sqlite3`` shell."""
        return sqlite_schema.install_script(sqlite.dialect().identifier_preparer.quote(schema))

    def install_statements(self, quoted_schema: str, version: str) -> list[str]:
        return sqlite_schema.install_statements(quoted_schema, version)

    def online_fence_calls(self, context: MigrationContext, quoted_schema: str) -> FenceCalls:
        return SqliteFenceCalls(context, quoted_schema)

    def script_fence_calls(self, context: MigrationContext, quoted_schema: str) -> FenceCalls:
        """A --sql script for the sqlite3 shell: its claims are TEMP triggers of its own session."""
        return SqliteScriptCalls(context, quoted_schema)

    def autocommits(self, connection: Connection) -> bool:
        """Unless :mod:`.sqlite_transactions` manages it: pysqlite's own transaction control commits
        every DDL statement on its own."""
        return not manages(connection)

    def managed_transactions(self) -> AbstractContextManager[None]:
        return sqlite_transactions()

    def wait_at_begins(self, resource: str, bound: WaitBound | None) -> None:
        """Every BEGIN waits for the write lock in slices (:func:`waiting_at_begins`). No ``--preempt``:
        the run refuses it on SQLite before it connects."""
        waiting_at_begins(resource, bound)

    def mark_version_write(self, connection: Connection, quoted_schema: str) -> None:
        """SQLite's guard has no claim to look for: the run marks each version write itself (cleared after)."""
        connection.execute(statement("mark_version_write", quoted_schema, self.name))

    def clear_version_write(self, connection: Connection, quoted_schema: str) -> None:
        connection.execute(statement("clear_version_write", quoted_schema, self.name))

    def run_script(self, connection: Connection, script: str) -> None:
        """A trigger body's semicolons do not end a statement."""
        pending = ""
        for line in script.splitlines(keepends=True):
            pending += line
            if sqlite3.complete_statement(pending):
                connection.exec_driver_sql(pending.strip(), execution_options={"no_parameters": True})
                pending = ""

    def time_param(self, moment: datetime) -> str:
        """``moment`` as SQLite stores every fence time: UTC text of the one form its own clock writes,
        ``strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`` (``2026-11-29T14:26:00.123Z``), so times sort as text."""
        utc = moment.astimezone(UTC)
        return f"{utc:%Y-%m-%dT%H:%M:%S}.{utc.microsecond // 1000:03d}Z"
