"""What SQLite and MySQL share: prefixed fence tables and a version row, no stored functions, the
guard as triggers.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection

from ..errors import DatabaseError, FencemigrateError, UsageError
from .base import Dialect, FenceObject, GuardedTable, SchemaScripts, refuse_pre_release
from .fence_calls import FenceCalls
from .statements import prefixed_table_name, statement


def installed_version(connection: Connection, quoted_schema: str, query: str = "schema_version") -> str | None:
    """The fence schema version in the database, or None when it is not installed.

    ``query``: the statement that reads the version row (MySQL has a locking and a plain one).
    """
    dialect = connection.dialect.name
    probe = connection.execute(
        statement("installed_probe", quoted_schema, dialect),
        {"table_name": prefixed_table_name(quoted_schema, "schema_version")},
    ).scalar()
    if probe is None:
        return None
    version = connection.execute(statement(query, quoted_schema, dialect)).scalar()
    return None if version is None else str(version)  # no row yet: an install in progress


VERSION = "1.0"
"""The fence schema version on SQLite and MySQL (PostgreSQL's is its control file's ``default_version``)."""


def require_no_other_version(found: str | None, quoted_schema: str, version: str) -> None:
    """Refuse a fence schema at another version: there is no upgrade path on this database."""
    if found is None or found == version:
        return
    removal = (
        "`DROP TRIGGER` the version table's guard triggers `<version_table>_no_tokenless_insert`, `_update` "
        f"and `_delete`, then `DROP TABLE` each `{prefixed_table_name(quoted_schema, '')}*` table"
    )
    refuse_pre_release(quoted_schema, found, version, removal)
    raise DatabaseError(
        f"fence schema {quoted_schema} is at version {found}, but this fencemigrate "
        f"needs {version} and has no upgrade path from it on this database"
    )


def run_install(
    connection: Connection,
    quoted_schema: str,
    found: str | None,
    scripts: SchemaScripts,
    install_statements: Callable[[str, str | None, str | None, SchemaScripts], list[str]],
) -> None:
    """Bring the fence schema from ``found`` (None: not installed) to the version of ``scripts``, one
    statement at a time; a version with no path from it is refused (:func:`require_no_other_version`)."""
    if found is not None and scripts.paths(found) is None:
        require_no_other_version(found, quoted_schema, scripts.version)
    statements = install_statements(quoted_schema, None, found, scripts)
    for sql in statements:
        connection.exec_driver_sql(sql, execution_options={"no_parameters": True})


class PrefixedDialect(Dialect):
    """A database whose fence tables are named ``<schema>_<table>`` beside the application's.

    The fence calls are plain statements run by the runner itself; offline scripts (``--sql``) are
    refused unless the dialect writes its own (:meth:`script_fence_calls`: SQLite). The version
    table's guard is a set of triggers; tokenless writes are allowed by dropping them.
    """

    prefixes_tables = True
    identifier_quote: ClassVar[str]
    """How the database quotes identifiers in its install scripts."""

    def installed_version(self, connection: Connection, quoted_schema: str) -> str | None:
        return installed_version(connection, quoted_schema)

    @abstractmethod
    def install_statements(self, quoted_schema: str, version: str) -> list[str]:
        """The statements of a fresh install at ``version``; FileNotFoundError when there is no such version."""

    def expected_fence_objects(self, quoted_schema: str, version: str) -> list[FenceObject] | None:
        """Tables and triggers of the install script for ``version``."""
        try:
            sql = self.install_statements(quoted_schema, version)
        except FileNotFoundError:
            return None
        quote = self.identifier_quote
        name = re.compile(rf"CREATE (TABLE|TRIGGER) (?:IF NOT EXISTS )?{quote}((?:[^{quote}]|{quote}{quote})+){quote}")
        objects: list[FenceObject] = []
        for text in sql:
            match = name.match(text)
            if match:
                kind, created = match.group(1).lower(), match.group(2).replace(quote * 2, quote)
                objects.append(FenceObject(kind, created, text if kind == "trigger" else None))
        return sorted(objects, key=lambda item: (item.kind, item.name))

    def fence_object_parameters(self, quoted_schema: str) -> dict[str, str]:
        return {"prefix": prefixed_table_name(quoted_schema, "")}

    def fence_calls(self, context: MigrationContext, quoted_schema: str) -> FenceCalls:
        """Offline, the dialect's script calls; refuses --sql before anything is written where a script
        could not claim the fence."""
        if context.as_sql:
            calls = self.script_fence_calls(context, quoted_schema)
            if calls is None:
                raise UsageError(
                    f"offline fencing (--sql) needs PostgreSQL or SQLite: on {self.display_name} the fence is "
                    "claimed by the runner itself, not by statements a script could carry; run the command "
                    "without --sql (nothing was written)"
                )
            return calls
        return self.online_fence_calls(context, quoted_schema)

    def script_fence_calls(self, context: MigrationContext, quoted_schema: str) -> FenceCalls | None:
        """The fence calls a --sql script carries (None: this database cannot fence a script)."""
        return None

    @abstractmethod
    def online_fence_calls(self, context: MigrationContext, quoted_schema: str) -> FenceCalls:
        """The fence calls of an online run."""

    # -- the version table's guard: triggers -----------------------------------------------

    def guard_version_table(self, context: MigrationContext, quoted_schema: str, table: GuardedTable) -> None:
        if context.as_sql:
            return
        connection = context.connection
        assert connection is not None
        state = self._guard_row(connection, quoted_schema, table)
        if state["allowed_at"] is not None or state["guarded"]:
            return
        if state["names_taken_by"] is not None:
            names = ", ".join(_trigger_names(table).values())
            raise FencemigrateError(
                f"cannot guard the version table {table.table}: table {state['names_taken_by']} has a trigger "
                f"named as one of its guards ({names}); a version table renamed or copied keeps its triggers. "
                "Drop or rename that trigger, then run again (no revision was applied)"
            )
        if state["table_exists"]:
            self.run_script(connection, self._trigger_script("guard_version_table", quoted_schema, table, context))

    def allow_tokenless_writes(self, context: MigrationContext, quoted_schema: str, table: GuardedTable) -> None:
        connection = context.connection
        assert connection is not None
        connection.execute(statement("allow_tokenless_writes", quoted_schema, self.name), {"version_table": table.name})
        self.run_script(connection, self._trigger_script("unguard_version_table", quoted_schema, table, context))

    def forbid_tokenless_writes(self, context: MigrationContext, quoted_schema: str, table: GuardedTable) -> None:
        connection = context.connection
        assert connection is not None
        connection.execute(
            statement("forbid_tokenless_writes", quoted_schema, self.name), {"version_table": table.name}
        )
        self.guard_version_table(context, quoted_schema, table)

    def guard_state(self, context: MigrationContext, quoted_schema: str, table: GuardedTable) -> tuple[Any, bool]:
        assert context.connection is not None
        found = self._guard_row(context.connection, quoted_schema, table)
        return found["allowed_at"], bool(found["guarded"])

    @abstractmethod
    def run_script(self, connection: Connection, script: str) -> None:
        """Run a trigger script one statement at a time."""

    def _guard_row(self, connection: Connection, quoted_schema: str, table: GuardedTable) -> dict[str, Any]:
        row = connection.execute(
            statement("version_guard_state", quoted_schema, self.name),
            {
                "version_table": table.name,
                "table_name": table.table,
                **{f"{op}_trigger": _trigger_names(table)[f"{op}_guard"] for op in ("insert", "update", "delete")},
            },
        ).one()
        return dict(row._mapping)

    def _trigger_script(self, name: str, quoted_schema: str, table: GuardedTable, context: MigrationContext) -> str:
        preparer = context.dialect.identifier_preparer
        text = statement(name, quoted_schema, self.name).text
        text = text.replace("{version_table}", table.relation(context))
        text = text.replace("{version_table_name}", "'" + table.name.replace("\\", "\\\\").replace("'", "''") + "'")
        for placeholder, trigger in _trigger_names(table).items():
            text = text.replace("{" + placeholder + "}", preparer.quote(trigger))
        return text


def _trigger_names(table: GuardedTable) -> dict[str, str]:
    return {f"{op}_guard": f"{table.table}_no_tokenless_{op}" for op in ("insert", "update", "delete")}
