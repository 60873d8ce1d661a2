"""SQLite: one file, one writer at a time, transactional DDL once pysqlite is told so.

Install the fence schema on SQLite from ``sql/sqlite/``: prefixed tables, no stored functions.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any, ClassVar

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, RootTransaction
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import OperationalError

from ..config import sql_dir
from ..errors import ImplausibleClock, LeaseBusy, read_only_words
from .base import PRECHECK, GrantLocks, SchemaScripts, ensure_installed
from .fence_calls import FenceCalls, SqliteFenceCalls, SqliteScriptCalls
from .prefixed import VERSION, PrefixedDialect, installed_version, run_install
from .sqlite_transactions import (
    WRITE_LOCK,
    busy_timeout_statement,
    is_busy,
    manages,
    sqlite_transactions,
    waiting_at_begins,
)
from .statements import statement, with_fence_names
from .waits import SLICE_MS, WAIT_REPORT_INTERVAL_S, LockWait, WaitBound


def shipped_scripts() -> SchemaScripts:
    """The scripts in ``sql/sqlite/``."""
    return SchemaScripts(sql_dir() / "sqlite", VERSION)


def install_statements(
    quoted_schema: str, version: str | None = None, start: str | None = None, scripts: SchemaScripts | None = None
) -> list[str]:
    """The statements that bring the SQLite fence schema from ``start`` (None: nothing) to ``version``
    (the scripts' version).

    pysqlite runs one statement per call (its ``executescript`` would COMMIT first). Raises
    FileNotFoundError when there is no such path.
    """
    texts = (scripts or shipped_scripts()).texts(start, version)
    if texts is None:
        raise FileNotFoundError(f"no SQLite fence schema script leads from {start} to {version}")
    statements: list[str] = []
    for source in texts:
        body = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("--"))
        pending = ""
        for line in with_fence_names(body, "@extschema@", quoted_schema, "sqlite").splitlines(keepends=True):
            pending += line
            if sqlite3.complete_statement(pending):  # a trigger body's own semicolons do not end it
                statements.append(pending.strip())
                pending = ""
        assert not pending.strip(), f"incomplete statement at the end of a SQLite fence script: {pending!r}"
    return statements


def install_script(quoted_schema: str) -> str:
    """The install script to run by hand (the ``sqlite3`` shell), in one transaction."""
    return "\n".join(["BEGIN IMMEDIATE;", *install_statements(quoted_schema), "COMMIT;"])


def install_or_update(connection: Connection, quoted_schema: str, scripts: SchemaScripts | None = None) -> bool:
    """Install (or update) the fence schema inside the caller's transaction unless current. True if it ran.

    SQLite lets one writer at a time in (fenced runs begin with ``BEGIN IMMEDIATE``), so
    concurrent first runs install it once, one after the other.
    """
    scripts = scripts or shipped_scripts()
    found = installed_version(connection, quoted_schema)
    if found == scripts.version:
        return False
    run_install(connection, quoted_schema, found, scripts, install_statements)
    return True


_LARGEST_CLOCK_LEAD_DAYS = 366  # a grant this long after the newest logged event is a clock set wrong
_UNCONTENDED_BEGIN_S = 0.01  # an uncontended BEGIN IMMEDIATE takes well under a millisecond
_BUSY_SLICE_MS = 250  # a grant waits for SQLite's write lock in slices this long (signals between)
_WRITER_IN_FLIGHT = (
    "another writer holds the SQLite database (a migration in flight, or another grant); "
    "wait for it with a longer --wait (--preempt is not available on SQLite)"
)


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
        return shipped_scripts()

    def ensure_installed(
        self, connection: Connection, quoted_schema: str, scripts: SchemaScripts | None = None
    ) -> bool:
        return install_or_update(connection, quoted_schema, scripts)

    def offline_install_script(self, schema: str) -> str:
        """For the ``sqlite3`` shell."""
        return install_script(sqlite.dialect().identifier_preparer.quote(schema))

    def install_statements(self, quoted_schema: str, version: str) -> list[str]:
        return install_statements(quoted_schema, version)

    def grant_locks(self, connection: Connection, quoted_schema: str) -> GrantLocks:
        return SqliteGrantLocks(connection, quoted_schema)

    def online_fence_calls(self, context: MigrationContext, quoted_schema: str) -> FenceCalls:
        return SqliteFenceCalls(context, quoted_schema)

    def script_fence_calls(self, context: MigrationContext, quoted_schema: str) -> FenceCalls:
        """A --sql script for the sqlite3 shell: its claims are TEMP triggers of its own session."""
        return SqliteScriptCalls(context, quoted_schema, self.schema_version())

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


class SqliteGrantLocks(GrantLocks):
    """One writer at a time: every transaction is ``BEGIN IMMEDIATE``; a grant's waits for it are bounded."""

    def install(self) -> None:
        """Nothing at open: on SQLite every transaction takes the write lock, so installing now would
        wait for a migration in flight beyond ``--wait``. Each :meth:`transaction` installs instead."""

    @contextmanager
    def transaction(self, resource: str, wait_ms: int | None = None) -> Iterator[RootTransaction]:
        """``BEGIN IMMEDIATE``, waiting at most ``wait_ms`` for the write lock (else the connection's
        busy timeout), then the fence schema installed unless current, in the same transaction."""
        with self._begin(resource, wait_ms) as transaction:
            ensure_installed(self._connection, self._schema)
            yield transaction

    def check_before_grant(self, resource: str, check: Callable[[Connection], None]) -> None:
        """Nothing before the grant: its ``BEGIN IMMEDIATE`` waits for the only writer (which a run
        queued behind another must see, :attr:`waited_for_writer`), and ``--preempt`` is refused on
        SQLite, so the check the grant makes under that lock is the first to matter."""

    def check_clock(self) -> None:  # noqa: B027 (a hook: most dialects have nothing to check)
        """SQLite's clock is the clock of whichever machine writes the file: refuse to grant when it
        reads more than :data:`_LARGEST_CLOCK_LEAD_DAYS` after the newest event in the fence event
        log, as a clock set years ahead does (its lease would look live to everyone until then)."""
        row = self._run("clock_lead").one()
        if row.days_ahead is not None and row.days_ahead > _LARGEST_CLOCK_LEAD_DAYS:
            raise ImplausibleClock(
                f"grant refused: SQLite's clock ({row.now}, this machine's) is {int(row.days_ahead)} days ahead "
                f"of the newest event in the fence event log ({row.newest}): a lease granted by it would look "
                "live to every other client until then. Fix this machine's clock; nothing was changed"
            )

    def serialise_grants(self, resource: str, remaining_ms: int) -> None:
        """Nothing to do: the grant's ``BEGIN IMMEDIATE`` already made every other grant wait."""

    def lock_fence(self, resource: str, remaining_ms: int, preempt: bool) -> tuple[int | None, tuple[int, ...]]:
        """The fence token: the grant's ``BEGIN IMMEDIATE`` already waited for the in-flight migration."""
        assert not preempt, "check_preempt refuses --preempt on SQLite before a grant starts"
        token = self._run("fence_lock", resource=resource).scalar()
        return (None if token is None else int(token)), ()

    def _begin(self, resource: str, wait_ms: int | None) -> RootTransaction:
        """Begin, waiting at most ``wait_ms`` for the write lock (COMMIT may still wait for readers
        as usual). SQLite waits inside its busy handler, where no Python signal handler runs, so the
        wait is taken in slices of :data:`_BUSY_SLICE_MS`: a SIGTERM stops it within one slice.
        PRAGMAs go to the driver: through SQLAlchemy they would BEGIN first."""
        if wait_ms is None:
            return self._connection.begin()
        driver = self._connection.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        (usual,) = driver.execute(str(statement("busy_timeout", self._schema, "sqlite"))).fetchone()
        started = time.monotonic()
        deadline = started + wait_ms / 1000
        next_report = started + SLICE_MS / 1000
        try:
            while True:
                left_ms = max(0, int((deadline - time.monotonic()) * 1000))
                driver.execute(busy_timeout_statement(self._connection, min(left_ms, _BUSY_SLICE_MS)))
                try:
                    transaction = self._connection.begin()
                except OperationalError as error:
                    if not is_busy(error):
                        raise
                    if left_ms <= _BUSY_SLICE_MS:
                        raise LeaseBusy(resource, None, _WRITER_IN_FLIGHT) from None
                    if (now := time.monotonic()) >= next_report:
                        waited_ms, remaining_ms = round((now - started) * 1000), round((deadline - now) * 1000)
                        self.progress.waiting_for_lock(
                            LockWait(resource, WRITE_LOCK, (), waited_ms, max(remaining_ms, 0))
                        )
                        next_report = now + WAIT_REPORT_INTERVAL_S
                    continue
                self.waited_for_writer = time.monotonic() - started > _UNCONTENDED_BEGIN_S
                return transaction
        finally:
            driver.execute(busy_timeout_statement(self._connection, int(usual)))
