"""PostgreSQL: the fence schema's own functions, transactional DDL, offline scripts, two roles."""

from __future__ import annotations

import re
import sys
from typing import Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql

from ..errors import read_only_words, sqlstate_of
from . import postgresql_schema
from .base import Dialect, FenceObject, GuardedTable, SchemaScripts
from .fence_calls import LOCK_NOT_AVAILABLE, FenceCalls, PostgresFenceCalls, wait_in_lock_timeout_slices
from .statements import scalar_on_driver, statement
from .waits import WaitBound

READ_ONLY_SQLSTATE = "25006"  # read_only_sql_transaction (also on a hot standby)
_CONTENDED_SQLSTATES = {LOCK_NOT_AVAILABLE, "40P01"}  # lock_not_available, deadlock_detected


class PostgresqlDialect(Dialect):
    """The fence schema is a schema of its own (or the ``fencemigrate`` extension); claims and ledger
    writes are calls of its functions, so a --sql script can carry them; the version table's guard
    is a trigger that checks for the claim's advisory lock."""

    __dialect__ = "postgresql"
    display_name = "PostgreSQL"
    replication_known = True
    returning_updates = True
    grants_to_roles = True

    @classmethod
    def read_only_reason(cls, error: BaseException) -> str | None:
        """SQLSTATE 25006. MySQL's error 1792 carries it too (PyMySQL): its first argument is the
        error number, which no PostgreSQL driver's is."""
        args: tuple[Any, ...] = tuple(getattr(getattr(error, "orig", error), "args", ()))
        if sqlstate_of(error) != READ_ONLY_SQLSTATE or (args and isinstance(args[0], int)):
            return None
        hint = "default_transaction_read_only is on for this role or database, or the server is a hot standby"
        return read_only_words(error, args[0] if args else getattr(error, "orig", error), hint)

    @classmethod
    def is_lock_contention(cls, error: BaseException) -> bool:
        return sqlstate_of(error) in _CONTENDED_SQLSTATES

    @classmethod
    def refusal_words(cls, error: BaseException) -> tuple[str | None, str | None]:
        """The server's primary message and DETAIL (psycopg's ``diag``; ``detail``, asyncpg's)."""
        diag = getattr(error, "diag", None)
        message = getattr(diag, "message_primary", None) or None
        detail = getattr(diag, "message_detail", None) or getattr(error, "detail", None)
        return message, detail if isinstance(detail, str) else None

    def schema_scripts(self) -> SchemaScripts:
        return postgresql_schema.shipped_scripts()

    def installed_version(self, connection: Connection, quoted_schema: str) -> str | None:
        return postgresql_schema.installed_version(connection, quoted_schema)

    def ensure_installed(
        self, connection: Connection, quoted_schema: str, scripts: SchemaScripts | None = None
    ) -> bool:
        return postgresql_schema.ensure_installed(connection, quoted_schema, scripts)

    def offline_install_script(self, schema: str) -> str:
        """For psql."""
        quoted = postgresql.dialect().identifier_preparer.quote(schema)  # type: ignore[no-untyped-call]
        return postgresql_schema.install_script(quoted)

    def expected_fence_objects(self, quoted_schema: str, version: str) -> list[FenceObject] | None:
        """Tables, triggers and final function bodies of the script that installs ``version``."""
        try:
            script = postgresql_schema.install_script(quoted_schema, version)
        except FileNotFoundError:
            return None
        schema = re.escape(quoted_schema)
        objects: dict[tuple[str, str], FenceObject] = {}
        pattern = re.compile(
            rf"CREATE TABLE {schema}\.(?P<table>\w+)"
            rf"|(?P<trigger_sql>CREATE (?:CONSTRAINT )?TRIGGER (?P<trigger>\w+)\b[^;]*)"
            rf"|CREATE (?:OR REPLACE )?FUNCTION {schema}\.(?P<function>\w+)\(.*?\bAS \$\$(?P<body>.*?)\$\$",
            re.DOTALL,
        )
        for match in pattern.finditer(script):
            if match.group("table"):
                objects[("table", match.group("table"))] = FenceObject("table", match.group("table"))
            elif match.group("trigger"):
                name = match.group("trigger")
                objects[("trigger", name)] = FenceObject("trigger", name, match.group("trigger_sql"))
            else:
                name = match.group("function")
                objects[("function", name)] = FenceObject("function", name, match.group("body"))
        return sorted(objects.values(), key=lambda item: (item.kind, item.name))

    def fence_object_parameters(self, quoted_schema: str) -> dict[str, str]:
        return {"quoted_schema": quoted_schema}

    def enable_disabled_triggers(self, connection: Connection, quoted_schema: str, triggers: set[str]) -> list[str]:
        """``ALTER TABLE ... ENABLE TRIGGER`` for those of ``triggers`` that were disabled."""
        disabled = connection.execute(
            statement("enable_trigger_statements", quoted_schema), {"quoted_schema": quoted_schema}
        ).all()
        enabled: list[str] = []
        for row in disabled:
            if row.name in triggers:
                connection.exec_driver_sql(row.statement, execution_options={"no_parameters": True})
                enabled.append(row.name)
        return enabled

    def register_resource(
        self, connection: Connection, quoted_schema: str, resource: str, bound: WaitBound | None, token: int
    ) -> None:
        """Registering waits for a first claim of ``resource`` still in flight (a paused writer's):
        within ``bound``, in reported slices, preempting it as a claim under ``token`` does."""
        clause = statement("register_resource", quoted_schema)
        if bound is None:
            connection.execute(clause, {"resource": resource})
            return
        lock_timeout = wait_in_lock_timeout_slices(
            connection,
            quoted_schema,
            resource,
            bound,
            lambda: scalar_on_driver(connection, clause, {"resource": resource}),
            token,
        )
        scalar_on_driver(connection, statement("lock_timeout", quoted_schema), {"timeout_ms": lock_timeout})

    def notifying_driver(self, connection: Connection) -> Any:
        """The psycopg 3 connection under ``connection``."""
        psycopg = sys.modules.get("psycopg")
        driver = connection.connection.driver_connection
        if psycopg is None or not isinstance(driver, psycopg.Connection):
            return None  # psycopg2, asyncpg, pg8000: no notification wait here, poll
        return driver

    def fence_calls(self, context: MigrationContext, quoted_schema: str) -> FenceCalls:
        """The fence schema's functions, called online or written to a --sql script."""
        return PostgresFenceCalls(context, quoted_schema)

    # -- the version table's guard: a trigger that looks for the claim ---------------------

    def guard_version_table(self, context: MigrationContext, quoted_schema: str, table: GuardedTable) -> None:
        params = {"version_table": table.name, "relation": table.relation(context)}
        clause = statement("guard_version_table", quoted_schema).bindparams(**params)
        if context.as_sql:
            compiled = clause.compile(dialect=context.dialect, compile_kwargs={"literal_binds": True})
            context.impl.static_output(str(compiled) + context.impl.command_terminator)
        else:
            assert context.connection is not None
            context.connection.execute(clause)

    def allow_tokenless_writes(self, context: MigrationContext, quoted_schema: str, table: GuardedTable) -> None:
        self._run_guard_statement("allow_tokenless_writes", context, quoted_schema, table)

    def forbid_tokenless_writes(self, context: MigrationContext, quoted_schema: str, table: GuardedTable) -> None:
        self._run_guard_statement("forbid_tokenless_writes", context, quoted_schema, table)

    def guard_state(self, context: MigrationContext, quoted_schema: str, table: GuardedTable) -> tuple[Any, bool]:
        row = self._run_guard_statement("version_guard_state", context, quoted_schema, table).one()
        return row.allowed_at, bool(row.guarded)

    def _run_guard_statement(
        self, name: str, context: MigrationContext, quoted_schema: str, table: GuardedTable
    ) -> Any:
        assert context.connection is not None
        return context.connection.execute(
            statement(name, quoted_schema), {"version_table": table.name, "relation": table.relation(context)}
        )
