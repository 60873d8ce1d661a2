"""PostgreSQL: the fence schema's own functions, transactional DDL, offline scripts, two roles.

Install the fence schema on PostgreSQL from the same scripts ``CREATE EXTENSION`` would run.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy import URL, Connection, RootTransaction, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError

from ..config import sql_dir
from ..connections import one_off_connection
from ..errors import DatabaseError, LeaseBusy, read_only_words, sqlstate_of
from .base import (
    IN_FLIGHT,
    LEASE_ROW_WAIT_MS,
    PREEMPT_GRACE_MS,
    STUCK_LEASE_TRANSACTION_MS,
    SYNCHRONOUS_WAIT_FLOOR_MS,
    Dialect,
    FenceObject,
    GrantLocks,
    GuardedTable,
    SchemaScripts,
    ensure_installed,
    refuse_pre_release,
)
from .fence_calls import LOCK_NOT_AVAILABLE, FenceCalls, PostgresFenceCalls, wait_in_lock_timeout_slices
from .statements import scalar_on_driver, statement
from .waits import WaitBound, describe_holders, fence_holders, wait_in_slices

_EXTENSION = "fencemigrate"


@cache
def default_version() -> str:
    """``default_version`` from ``sql/fencemigrate.control``."""
    control = (sql_dir() / f"{_EXTENSION}.control").read_text(encoding="utf-8")
    match = re.search(r"^default_version\s*=\s*'([^']+)'", control, re.MULTILINE)
    if match is None:
        raise RuntimeError("fencemigrate.control has no default_version")
    return match.group(1)


def shipped_scripts() -> SchemaScripts:
    """The scripts in ``sql/``, at the control file's default version."""
    return SchemaScripts(sql_dir(), default_version())


def _script_text(paths: list[Path], quoted_schema: str) -> str:
    lines = (line for path in paths for line in path.read_text(encoding="utf-8").splitlines())
    return "\n".join(line for line in lines if not line.startswith("\\echo")).replace("@extschema@", quoted_schema)


def install_script(quoted_schema: str, version: str | None = None, scripts: SchemaScripts | None = None) -> str:
    """The SQL that installs the fence schema at ``version`` (the scripts' version) into ``quoted_schema``,
    for psql or the runner.

    As ``CREATE EXTENSION`` does: the version's own full install script when there is one, else an
    older full install script and the upgrade scripts from it (:class:`SchemaScripts`). Raises
    FileNotFoundError when neither exists.
    """
    paths = (scripts or shipped_scripts()).paths(None, version)
    if paths is None:
        raise FileNotFoundError(f"no PostgreSQL fence schema script leads to version {version}")
    return f"CREATE SCHEMA IF NOT EXISTS {quoted_schema};\n{_script_text(paths, quoted_schema)}"


def update_script(quoted_schema: str, start: str, scripts: SchemaScripts | None = None) -> str | None:
    """The SQL that brings a fence schema at version ``start`` to the scripts' version, or None."""
    paths = (scripts or shipped_scripts()).paths(start)
    return None if paths is None else _script_text(paths, quoted_schema)


def installed_version(connection: Connection, quoted_schema: str) -> str | None:
    """The fence schema version in the database, or None when it is not installed."""
    probe = connection.execute(statement("installed_probe", quoted_schema), {"quoted_schema": quoted_schema}).scalar()
    if probe is None:
        return None
    return str(connection.execute(statement("schema_version", quoted_schema)).scalar())


def install_or_update(connection: Connection, quoted_schema: str, scripts: SchemaScripts | None = None) -> bool:
    """Install (or update) the fence schema inside the caller's transaction unless current. True if it ran.

    Concurrent first runs serialise on a transaction-level advisory lock, so exactly one installs.
    """
    scripts = scripts or shipped_scripts()
    if installed_version(connection, quoted_schema) == scripts.version:
        return False
    connection.execute(statement("install_lock", quoted_schema))
    found = installed_version(connection, quoted_schema)
    if found == scripts.version:
        return False
    if found is not None:
        removal = (
            f"`DROP EXTENSION {_EXTENSION} CASCADE` if it was loaded with CREATE EXTENSION, then "
            f"`DROP SCHEMA {quoted_schema} CASCADE`"
        )
        refuse_pre_release(quoted_schema, found, scripts.version, removal)
    if found is None:
        script = install_script(quoted_schema, scripts=scripts)
    elif (
        connection.execute(statement("extension_version", quoted_schema), {"quoted_schema": quoted_schema}).scalar()
        is not None
    ):
        # Loaded with CREATE EXTENSION: update it as an extension, from the server's own files.
        script = f"ALTER EXTENSION {_EXTENSION} UPDATE TO '{scripts.version}'"
    else:
        update = update_script(quoted_schema, found, scripts)
        if update is None:
            raise DatabaseError(
                f"fence schema {quoted_schema} is at version {found}, but this fencemigrate "
                f"needs {scripts.version} and has no upgrade path from it"
            )
        script = update
    connection.exec_driver_sql(script, execution_options={"no_parameters": True})
    return True


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
        return shipped_scripts()

    def installed_version(self, connection: Connection, quoted_schema: str) -> str | None:
        return installed_version(connection, quoted_schema)

    def ensure_installed(
        self, connection: Connection, quoted_schema: str, scripts: SchemaScripts | None = None
    ) -> bool:
        return install_or_update(connection, quoted_schema, scripts)

    def offline_install_script(self, schema: str) -> str:
        """For psql."""
        quoted = postgresql.dialect().identifier_preparer.quote(schema)  # type: ignore[no-untyped-call]
        return install_script(quoted)

    def expected_fence_objects(self, quoted_schema: str, version: str) -> list[FenceObject] | None:
        """Tables, triggers and final function bodies of the script that installs ``version``."""
        try:
            script = install_script(quoted_schema, version)
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

    def grant_locks(self, connection: Connection, quoted_schema: str) -> GrantLocks:
        return PostgresGrantLocks(connection, quoted_schema)

    @contextmanager
    def scratch_database(self, server: URL, name: str) -> Iterator[str]:
        """Made and dropped on an autocommit connection to ``server``'s own database."""
        quoted = self._quote(name)
        try:
            with one_off_connection(server, autocommit=True) as admin:
                admin.execute(text(statement("create_scratch_database", "").text.replace("{database}", quoted)))
            yield server.set(database=name).render_as_string(hide_password=False)
        finally:
            with one_off_connection(server, autocommit=True) as admin:
                admin.execute(text(statement("drop_scratch_database", "").text.replace("{database}", quoted)))

    @staticmethod
    def _quote(name: str) -> str:
        return postgresql.dialect().identifier_preparer.quote_identifier(name)  # type: ignore[no-untyped-call]

    def fence_calls(self, context: MigrationContext, quoted_schema: str) -> FenceCalls:
        """The fence schema's functions, called online or written to a --sql script."""
        return PostgresFenceCalls(context, quoted_schema, self.schema_version())

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


class PostgresGrantLocks(GrantLocks):
    """Row and advisory locks, bounded by ``lock_timeout``; ``--preempt`` terminates stale writers."""

    def install(self) -> None:
        with self._connection.begin():
            ensure_installed(self._connection, self._schema)

    @contextmanager
    def transaction(self, resource: str, wait_ms: int | None = None) -> Iterator[RootTransaction]:
        """A transaction whose every lock wait is bounded from its first statement: ``wait_ms``
        (what is left of ``--wait``), else :data:`LEASE_ROW_WAIT_MS`; and its COMMIT's wait for a
        synchronous standby too (at least :data:`SYNCHRONOUS_WAIT_FLOOR_MS`), which
        :attr:`commit_cut_short` then reports."""
        bound_ms = LEASE_ROW_WAIT_MS if wait_ms is None else wait_ms
        watch = CommitWatch(self._connection)
        try:
            with self._connection.begin() as transaction:
                self._run("lock_timeout", timeout_ms=str(max(bound_ms, 1)))
                yield transaction
                if transaction.is_active:
                    watch.arm(max(bound_ms, SYNCHRONOUS_WAIT_FLOOR_MS))
        finally:
            watch.disarm()
            self.commit_cut_short = watch.cut_short

    def record_redis_grant(self, resource: str, token: int) -> None:
        """Nothing: the fence advance itself (``advance_fence()``) records the Redis grant."""

    def cancel_stuck_lease_transactions(self, resource: str, remaining_ms: int) -> tuple[int, ...]:
        return self._terminate_stuck("preempt_lease_transactions", resource, remaining_ms)

    def cancel_stuck_grants(self, resource: str, remaining_ms: int) -> tuple[int, ...]:
        return self._terminate_stuck("preempt_grant_transactions", resource, remaining_ms)

    def _terminate_stuck(self, name: str, resource: str, remaining_ms: int) -> tuple[int, ...]:
        """Run the ``preempt_*`` statement ``name`` on sessions idle for :data:`STUCK_LEASE_TRANSACTION_MS`;
        the pids it terminated."""
        rows = self._run(
            name, resource=resource, idle_ms=STUCK_LEASE_TRANSACTION_MS, wait_ms=max(remaining_ms, PREEMPT_GRACE_MS)
        )
        return tuple(int(row.pid) for row in rows if row.terminated)

    def serialise_grants(self, resource: str, remaining_ms: int) -> None:
        self._run("lock_timeout", timeout_ms=str(max(remaining_ms, 1)))
        try:
            self._run("grant_lock", resource=resource)
        except DBAPIError as error:
            if sqlstate_of(error) == LOCK_NOT_AVAILABLE:
                raise LeaseBusy(resource, None, "another grant of this resource is in progress") from None
            raise

    def lock_fence(self, resource: str, remaining_ms: int, preempt: bool) -> tuple[int | None, tuple[int, ...]]:
        self._run("lock_timeout", timeout_ms=str(max(remaining_ms, 1)))
        preempted: tuple[int, ...] = ()
        if preempt:
            grace = max(remaining_ms, PREEMPT_GRACE_MS)
            rows = self._run("preempt_writers", resource=resource, wait_ms=grace)
            preempted = tuple(int(row.pid) for row in rows if row.terminated)

        started = time.monotonic()
        wait_in_slices(
            resource,
            "the fence",
            WaitBound(remaining_ms, progress=self.progress),
            lambda slice_ms: self._lock_fence_within(resource, slice_ms),
            lambda: fence_holders(self._connection, self._schema, resource),
            busy=lambda holders: f"{IN_FLIGHT} (held by {describe_holders(holders)})",
        )
        left_ms = remaining_ms - round((time.monotonic() - started) * 1000)
        self._run("lock_timeout", timeout_ms=str(max(left_ms, 1)))  # the slices' own ended with them
        token = self._run("fence_lock", resource=resource).scalar()
        return (None if token is None else int(token)), preempted

    def _lock_fence_within(self, resource: str, slice_ms: int) -> bool:
        """One slice of :meth:`lock_fence`, in a savepoint: every claim holds the claim lock (shared)
        until its transaction ends; waiting for it exclusively covers a resource whose fence row does
        not exist yet, and keeps new claims out until the grant has advanced the fence. False when
        it was still held after ``slice_ms``."""
        self._run("fence_wait_savepoint")
        try:
            self._run("lock_timeout", timeout_ms=str(slice_ms))
            self._run("claim_lock", resource=resource)
            self._run("fence_lock", resource=resource)
        except DBAPIError as error:
            if sqlstate_of(error) != LOCK_NOT_AVAILABLE:
                raise
            self._run("fence_wait_rollback")
            return False
        self._run("fence_wait_release")
        return True


class CommitWatch:
    """Around one transaction: :meth:`arm` right before its COMMIT; after it, :attr:`cut_short`."""

    def __init__(self, connection: Connection) -> None:
        self._driver: Any = connection.connection.driver_connection
        self._listening = False
        self._timer: threading.Timer | None = None
        self._notices_before = 0
        self.cut_short = False
        """Whether the COMMIT's wait for a standby may have been cut short: the server sent a
        WARNING during it, or the bound ran out before it returned."""

    def arm(self, limit_ms: int) -> None:
        """Listen for WARNINGs from now on, and cancel the statement in flight (the COMMIT) after
        ``limit_ms``. A cancel that arrives after the COMMIT finds the session idle and does nothing
        (the COMMIT then counts as cut short all the same: the safe side)."""
        if hasattr(self._driver, "add_notice_handler"):
            self._driver.add_notice_handler(self._on_notice)
            self._listening = True
        elif hasattr(self._driver, "notices"):
            self._notices_before = len(self._driver.notices)
        self._timer = threading.Timer(limit_ms / 1000, self._cancel)
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        """After the COMMIT: stop the timer (waiting for a cancel already being sent, so that it is
        not sent during a later statement) and the listener; :attr:`cut_short` is final."""
        if self._timer is None:
            return
        self._timer.cancel()
        self._timer.join()
        self._timer = None
        if self._listening:
            self._driver.remove_notice_handler(self._on_notice)
            self._listening = False
        elif hasattr(self._driver, "notices") and len(self._driver.notices) > self._notices_before:
            self.cut_short = True  # psycopg2 keeps notices as localised text: any one means cut short

    def _on_notice(self, diagnostic: Any) -> None:
        if getattr(diagnostic, "severity_nonlocalized", None) == "WARNING":
            self.cut_short = True

    def _cancel(self) -> None:
        self.cut_short = True  # the bound ran out: whatever the COMMIT says, no standby confirmed it in time
        try:
            self._driver.cancel()
        except Exception:  # noqa: BLE001 - the session may be gone; the COMMIT's own outcome decides
            return
