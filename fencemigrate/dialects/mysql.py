"""MySQL and MariaDB: DDL commits on its own, so runs are pre-check runs under a named lock.

Install the fence schema on MySQL and MariaDB from ``sql/mysql/``: prefixed tables, guard triggers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any, ClassVar

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine, RootTransaction
from sqlalchemy.dialects import mysql
from sqlalchemy.exc import SQLAlchemyError

from ..config import sql_dir
from ..connections import own_connection
from ..errors import DatabaseError, read_only_words
from .base import (
    IN_FLIGHT,
    LEASE_ROW_WAIT_MS,
    PRECHECK,
    PREEMPT_GRACE_MS,
    STUCK_LEASE_TRANSACTION_MS,
    TRANSACTIONAL,
    GrantLocks,
    SchemaScripts,
    ensure_installed,
)
from .fence_calls import FenceCalls, PlainStatementCalls
from .prefixed import VERSION, PrefixedDialect, installed_version, run_install
from .statements import statement, with_fence_names
from .waits import NamedLock, WaitBound, describe_holders

_INSTALL_WAIT_S = 60


def shipped_scripts() -> SchemaScripts:
    """The scripts in ``sql/mysql/``."""
    return SchemaScripts(sql_dir() / "mysql", VERSION)


def install_script(
    quoted_schema: str, version: str | None = None, start: str | None = None, scripts: SchemaScripts | None = None
) -> str:
    """The script that brings the MySQL fence schema from ``start`` (None: nothing) to ``version`` (the
    scripts' version), to run by hand with the mysql (or mariadb) client, ``DELIMITER`` lines included.

    Raises FileNotFoundError when there is no such path.
    """
    texts = (scripts or shipped_scripts()).texts(start, version)
    if texts is None:
        raise FileNotFoundError(f"no MySQL fence schema script leads from {start} to {version}")
    return with_fence_names("\n".join(texts), "@extschema@", quoted_schema, "mysql")


def install_statements(
    quoted_schema: str, version: str | None = None, start: str | None = None, scripts: SchemaScripts | None = None
) -> list[str]:
    """The statements of :func:`install_script`, one by one.

    Split as the mysql client does: at the current delimiter (``;``, or what a ``DELIMITER`` line sets).
    """
    body = install_script(quoted_schema, version, start, scripts)
    statements: list[str] = []
    delimiter, pending = ";", ""
    for line in body.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("--") or (not stripped and not pending):
            continue
        if stripped.upper().startswith("DELIMITER "):
            delimiter = stripped.split(None, 1)[1]
            continue
        pending += line
        if stripped.endswith(delimiter):
            statements.append(pending.rstrip()[: -len(delimiter)].strip())
            pending = ""
    assert not pending.strip(), f"incomplete statement at the end of the MySQL install script: {pending!r}"
    return statements


def install_or_update(connection: Connection, quoted_schema: str, scripts: SchemaScripts | None = None) -> bool:
    """Install the fence schema unless present. True if installed now.

    MySQL commits each DDL statement on its own, so concurrent first runs take turns on a named
    lock (the ``install_lock`` statement): otherwise one could read the version table another has just
    created, before its row is in.
    """
    # A plain read first: a locking one would hold the version row while this run waits for the
    # install lock, and the installer's version UPDATE would wait for this run (a deadlock that
    # only the lock timeouts end). A stale snapshot only means taking the install lock for nothing.
    scripts = scripts or shipped_scripts()
    if installed_version(connection, quoted_schema, "schema_version_unlocked") == scripts.version:
        return False
    with install_turns(connection, quoted_schema):
        found = installed_version(connection, quoted_schema)
        if found == scripts.version:
            return False
        run_install(connection, quoted_schema, found, scripts, install_statements)
        # MySQL has committed every DDL statement of the install on its own: commit the version row
        # with them, or a rollback of the caller's transaction would leave an update's DDL in at the
        # old version, and the next run would run that update again (ADD COLUMN is not idempotent).
        connection.exec_driver_sql("COMMIT")
        return True


@contextmanager
def install_turns(connection: Connection, quoted_schema: str) -> Iterator[None]:
    """Hold the install lock (the ``install_lock`` statement), waited for at most a minute: concurrent first
    runs take turns installing the fence schema and guarding the version table (whose triggers are
    DDL; information_schema refuses to read a table under another session's DDL, error 1684)."""
    taken = connection.execute(statement("install_lock", quoted_schema, "mysql"), {"timeout_s": _INSTALL_WAIT_S})
    if taken.scalar() != 1:
        raise DatabaseError(
            f"could not install the fence schema: another run held the install lock for {_INSTALL_WAIT_S} s"
        )
    try:
        yield
    finally:
        connection.execute(statement("install_unlock", quoted_schema, "mysql"))


_SIGNAL = 1644  # the error number of SIGNAL SQLSTATE '...'
_READ_ONLY_ERRORS = {1290, 1792, 1836}  # --read-only / super_read_only, READ ONLY transaction, read-only mode
_CONTENDED_ERRORS = {1205, 1213}  # lock wait timeout exceeded, deadlock found


def _numbered(error: BaseException) -> tuple[int, str] | None:
    """A MySQL driver's error as its number and message (its two arguments), else None."""
    args: tuple[Any, ...] = tuple(getattr(getattr(error, "orig", error), "args", ()))
    return (args[0], args[1]) if len(args) == 2 and isinstance(args[0], int) and isinstance(args[1], str) else None


class MysqlDialect(PrefixedDialect):
    """Prefixed fence tables in the application's database, guard triggers that record refused
    writes, the writers' named lock (:class:`.waits.NamedLock`); MariaDB speaks the same SQL."""

    __dialect__ = "mysql"
    aliases = ("mariadb",)
    display_name = "MySQL/MariaDB"
    identifier_quote = "`"
    default_mode = PRECHECK
    refused_modes: ClassVar[dict[str, str]] = {
        TRANSACTIONAL: (
            "--mode transactional is impossible on MySQL/MariaDB: they commit every DDL statement on "
            "their own, so the fence claim cannot share a transaction with the migration; leave "
            "--mode out (pre-check mode is the default there). Nothing was changed"
        )
    }
    commits_ddl = True
    records_tokenless_writes = True
    writes_precheck_scripts = True

    @classmethod
    def read_only_reason(cls, error: BaseException) -> str | None:
        numbered = _numbered(error)
        if numbered is None or numbered[0] not in _READ_ONLY_ERRORS:
            return None
        hint = "the server runs with read_only (or super_read_only), or the transaction is READ ONLY"
        return read_only_words(error, numbered[1], hint)

    @classmethod
    def is_lock_contention(cls, error: BaseException) -> bool:
        args: tuple[Any, ...] = tuple(getattr(getattr(error, "orig", error), "args", ()))
        return len(args) > 0 and args[0] in _CONTENDED_ERRORS

    @classmethod
    def refusal_words(cls, error: BaseException) -> tuple[str | None, str | None]:
        """A ``SIGNAL``'s message: the second argument of error 1644 (PyMySQL's text is ``(1644, '...')``)."""
        numbered = _numbered(error)
        return (numbered[1] if numbered is not None and numbered[0] == _SIGNAL else None), None

    def schema_scripts(self) -> SchemaScripts:
        return shipped_scripts()

    def ensure_installed(
        self, connection: Connection, quoted_schema: str, scripts: SchemaScripts | None = None
    ) -> bool:
        return install_or_update(connection, quoted_schema, scripts)

    def guarding_turns(self, connection: Connection, quoted_schema: str) -> AbstractContextManager[None]:
        return install_turns(connection, quoted_schema)

    def offline_install_script(self, schema: str) -> str:
        """For the mysql (or mariadb) client, ``DELIMITER`` lines included."""
        return install_script(mysql.dialect().identifier_preparer.quote(schema))

    def install_statements(self, quoted_schema: str, version: str) -> list[str]:
        return install_statements(quoted_schema, version)

    def grant_locks(self, connection: Connection, quoted_schema: str) -> GrantLocks:
        return MysqlGrantLocks(connection, quoted_schema)

    def online_fence_calls(self, context: MigrationContext, quoted_schema: str) -> FenceCalls:
        """The plain statements as they are: DDL commits on its own, so no transaction id is compared."""
        return PlainStatementCalls(context, quoted_schema)

    def session_id(self, connection: Connection) -> int | None:
        """What ``KILL`` takes, read from the driver without a round trip (PyMySQL's and
        mysqlclient's ``thread_id()``); None with another driver."""
        thread_id = getattr(connection.connection.dbapi_connection, "thread_id", None)
        return int(thread_id()) if callable(thread_id) else None

    def cancel_statement(self, engine: Engine, session_id: int) -> None:
        """``KILL QUERY``, from a connection of our own. SQLAlchemy has invalidated the interrupted
        connection by then, so its id was read before."""
        try:
            with own_connection(engine) as killer:
                killer.execute(statement("kill_query", "", self.__dialect__), {"connection_id": session_id})
        except SQLAlchemyError:
            pass  # the session is gone already (or the server is): there is nothing left to cancel

    def run_script(self, connection: Connection, script: str) -> None:
        """Statements end with ``//``."""
        for sql in script.split("//"):
            if sql.strip():
                connection.exec_driver_sql(sql.strip(), execution_options={"no_parameters": True})

    def time_param(self, moment: datetime) -> datetime:
        """MySQL's DATETIME columns hold UTC without a zone."""
        return moment.astimezone(UTC).replace(tzinfo=None)


class MysqlGrantLocks(GrantLocks):
    """The resource's named lock, held by every pre-check writer for its whole run; ``--preempt``
    kills the session holding it."""

    def __init__(self, connection: Connection, quoted_schema: str) -> None:
        super().__init__(connection, quoted_schema)
        self._lock: NamedLock | None = None
        self._lease_lock: NamedLock | None = None

    def install(self) -> None:
        ensure_installed(self._connection, self._schema)
        self._connection.commit()

    @contextmanager
    def transaction(self, resource: str, wait_ms: int | None = None) -> Iterator[RootTransaction]:
        """A transaction whose row lock waits are bounded from its first statement (``wait_ms``, what
        is left of ``--wait``, else :data:`LEASE_ROW_WAIT_MS`, in whole seconds); the named lock a
        grant took in it, and the lease lock of :meth:`enter_lease`, are released once it has ended
        (or with the connection, when it dies)."""
        try:
            with self._connection.begin() as transaction:
                wait = LEASE_ROW_WAIT_MS if wait_ms is None else wait_ms
                self._run("lock_timeout", timeout_s=max(1, -(-wait // 1000)))
                yield transaction
        finally:
            for lock in (self._lock, self._lease_lock):
                if lock is not None:
                    lock.release()
            self._lock = self._lease_lock = None

    def enter_lease(self, resource: str, remaining_ms: int, preempt: bool) -> tuple[int, ...] | None:
        """Take the resource's lease lock (``lease_lock_name.sql``), at most ``remaining_ms``, before
        the writers' named lock: every lease transaction holds it, so ``IS_USED_LOCK`` names the
        session inside one. With ``preempt``, that session is killed first when it has been idle for
        1 s and the lease has no live holder (``stuck_lease_session.sql``)."""
        lock = NamedLock(self._connection, self._schema, resource, "lease_lock_name")
        killed: tuple[int, ...] = ()
        wait_ms = remaining_ms
        if preempt:
            stuck = self._run(
                "stuck_lease_session",
                lock_name=lock.name,
                resource=resource,
                idle_s=STUCK_LEASE_TRANSACTION_MS // 1000,
            ).scalar()
            if stuck is not None:
                self._run("preempt_writer", connection_id=int(stuck))
                killed = (int(stuck),)
                wait_ms = max(remaining_ms, PREEMPT_GRACE_MS)  # the server ends the killed session
        if not lock.acquire(wait_ms):
            return None
        self._lease_lock = lock
        return killed

    def serialise_grants(self, resource: str, remaining_ms: int) -> None:
        """Nothing to do: :meth:`lock_fence` takes the resource's named lock, which every grant takes."""

    def lock_fence(self, resource: str, remaining_ms: int, preempt: bool) -> tuple[int | None, tuple[int, ...]]:
        lock = NamedLock(self._connection, self._schema, resource)
        preempted: tuple[int, ...] = ()
        wait_ms = remaining_ms
        if preempt:
            writer = lock.holder()
            if writer is not None:
                self._run("preempt_writer", connection_id=writer)
                preempted = (writer,)
                wait_ms = max(remaining_ms, PREEMPT_GRACE_MS)  # the server ends the killed session
        lock.take(
            WaitBound(wait_ms, progress=self.progress),
            busy=lambda holders: IN_FLIGHT + (f" (held by {describe_holders(holders)})" if holders else ""),
        )
        self._lock = lock
        self._run("lock_timeout", timeout_s=max(1, -(-remaining_ms // 1000)))
        token = self._run("fence_lock", resource=resource).scalar()
        return (None if token is None else int(token)), preempted
