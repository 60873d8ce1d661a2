"""Transactional DDL on SQLite (pysqlite) while env.py runs, and a number for each transaction.

pysqlite's legacy transaction control never BEGINs before DDL, so every ``CREATE TABLE``
commits on its own; Alembic's ``SQLiteImpl`` assumes as much (``transactional_ddl=False``).
While :func:`sqlite_transactions` is active, SQLAlchemy's recipe for pysqlite applies to every
new connection: pysqlite's own BEGIN is switched off (``isolation_level = None``) and
SQLAlchemy's begin emits ``BEGIN IMMEDIATE`` (the write lock at once, so concurrent writers
queue on the busy timeout instead of failing when they upgrade a read lock).

Each BEGIN on such a connection gets the next number (:func:`transaction_number`): the SQLite
stand-in for PostgreSQL's transaction id. A commit through SQLAlchemy starts the next
transaction, with a new number, at the next statement. A commit made behind SQLAlchemy's back
(``COMMIT`` as a statement, or the raw DBAPI connection's ``commit()``) leaves SQLite outside
any transaction while SQLAlchemy's goes on; the next statement SQLAlchemy runs opens a new one
first, as psycopg would, so it is numbered too and what follows stays transactional.
A ``COMMIT`` and a new ``BEGIN`` both sent through the raw DBAPI connection are not seen.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy import Connection, Engine, event
from sqlalchemy.pool import ConnectionPoolEntry, Pool

from ..alembic_internals import engines_dispatch_events, in_autocommit_isolation, set_engines_dispatch_events
from .statements import statement
from .waits import WaitBound, wait_in_slices

WRITE_LOCK = "SQLite's write lock"
_BEGIN = "BEGIN IMMEDIATE"
_STARTS_TRANSACTION = re.compile(r"\s*BEGIN\b", re.IGNORECASE)
_MIN_BUSY_TIMEOUT_MS = 60_000  # wait for another writer at least this long (pysqlite's default is 5 s)
_MANAGED = "fencemigrate.sqlite_managed"  # connection record info: the recipe applies
_TRANSACTIONS = "fencemigrate.sqlite_transactions"  # connection record info: BEGINs counted so far
_BEGIN_WAITS: ContextVar[tuple[str, WaitBound] | None] = ContextVar("fencemigrate_sqlite_begin_waits", default=None)


class _Listeners:
    """The recipe's process-wide listeners, there while at least one block needs them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._had_events = False

    def add(self) -> None:
        with self._lock:
            self._users += 1
            if self._users == 1:
                self._had_events = engines_dispatch_events()
                event.listen(Pool, "connect", _on_connect)
                event.listen(Engine, "begin", _on_begin)
                event.listen(Engine, "before_cursor_execute", _before_cursor_execute)

    def remove(self) -> None:
        with self._lock:
            self._users -= 1
            if not self._users:
                event.remove(Engine, "before_cursor_execute", _before_cursor_execute)
                event.remove(Engine, "begin", _on_begin)
                event.remove(Pool, "connect", _on_connect)
                set_engines_dispatch_events(self._had_events)  # listening on the class set it for every engine


_LISTENERS = _Listeners()


@contextmanager
def sqlite_transactions() -> Iterator[None]:
    """Apply the recipe to pysqlite connections opened inside the block (nested or concurrent
    blocks share the listeners); the last block to end removes them."""
    _LISTENERS.add()
    try:
        yield
    finally:
        _LISTENERS.remove()


def manages(connection: Connection) -> bool:
    """True when the recipe controls this connection's transactions (so DDL cannot autocommit)."""
    return bool(connection.connection.info.get(_MANAGED)) and not in_autocommit_isolation(connection)


def transaction_number(connection: Connection) -> int:
    """The number of the SQLite transaction that statements on ``connection`` run in now.

    Opens a transaction first if SQLAlchemy's is still going on but SQLite's was committed
    behind its back, so a number that differs from an earlier one means a commit in between.
    """
    if _left_behind(connection):
        connection.exec_driver_sql(_BEGIN)
    return int(connection.connection.info.get(_TRANSACTIONS, 0))


def waiting_at_begins(resource: str, bound: WaitBound | None) -> None:
    """From now on, in this thread's context, every BEGIN of a managed connection waits for the write
    lock in slices of the busy timeout (:func:`~fencemigrate.dialects.waits.wait_in_slices`): reported,
    bounded by ``bound`` (busy after it), a SIGTERM handled between two slices (SQLite waits inside
    its busy handler, where no Python signal handler runs). None: as before, up to the busy timeout.
    A fenced run sets it when it chooses its mode and clears it when it finishes."""
    _BEGIN_WAITS.set(None if bound is None else (resource, bound))


def _begin_in_slices(connection: Connection, resource: str, bound: WaitBound) -> None:
    """``BEGIN IMMEDIATE`` on the driver, in slices; the connection's busy timeout restored after.
    PRAGMAs go to the driver (through SQLAlchemy they would BEGIN). SQLite does not say which
    process holds its write lock: a report names no holder."""
    driver = _dbapi(connection)
    (usual,) = driver.execute(str(statement("busy_timeout", "", "sqlite"))).fetchone()

    def attempt(slice_ms: int) -> bool:
        driver.execute(busy_timeout_statement(connection, slice_ms))
        try:
            driver.execute(_BEGIN)
        except sqlite3.OperationalError as error:
            if is_busy(error):
                return False
            raise
        return True

    try:
        wait_in_slices(resource, WRITE_LOCK, bound, attempt, lambda: ())
    finally:
        driver.execute(busy_timeout_statement(connection, int(usual)))


def is_busy(error: BaseException) -> bool:
    """Whether ``error`` (the driver's, or SQLAlchemy's around it) is SQLITE_BUSY: another writer
    held the write lock for the whole busy timeout."""
    code = getattr(getattr(error, "orig", error), "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_BUSY


def busy_timeout_statement(connection: Connection, milliseconds: int) -> str:
    """The ``lock_timeout`` statement with the value written in (PRAGMA takes no bound parameters)."""
    clause = statement("lock_timeout", "", "sqlite").bindparams(timeout_ms=int(milliseconds))
    return str(clause.compile(dialect=connection.dialect, compile_kwargs={"literal_binds": True}))


def _on_connect(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return
    dbapi_connection.isolation_level = None  # BEGIN comes from SQLAlchemy's begin, below
    (busy_timeout_ms,) = dbapi_connection.execute("PRAGMA busy_timeout").fetchone()
    if busy_timeout_ms < _MIN_BUSY_TIMEOUT_MS:
        dbapi_connection.execute(f"PRAGMA busy_timeout = {_MIN_BUSY_TIMEOUT_MS}")
    record.info[_MANAGED] = True


def _on_begin(connection: Connection) -> None:
    if not manages(connection) or _dbapi(connection).in_transaction:
        return
    waits = _BEGIN_WAITS.get()
    if waits is None:
        connection.exec_driver_sql(_BEGIN)  # counted by _before_cursor_execute
        return
    _begin_in_slices(connection, *waits)
    _count(connection)


def _before_cursor_execute(connection: Connection, cursor: Any, statement: str, *_: Any) -> None:
    if not manages(connection) or _dbapi(connection).in_transaction:
        return
    if not _STARTS_TRANSACTION.match(statement):
        # SQLAlchemy's transaction goes on; SQLite's was committed under it.
        waits = _BEGIN_WAITS.get()
        if waits is None:
            cursor.execute(_BEGIN)
        else:
            _begin_in_slices(connection, *waits)
    _count(connection)


def _count(connection: Connection) -> None:
    info = connection.connection.info
    info[_TRANSACTIONS] = info.get(_TRANSACTIONS, 0) + 1


def _left_behind(connection: Connection) -> bool:
    return manages(connection) and connection.in_transaction() and not _dbapi(connection).in_transaction


def _dbapi(connection: Connection) -> sqlite3.Connection:
    dbapi_connection = connection.connection.dbapi_connection
    assert isinstance(dbapi_connection, sqlite3.Connection)
    return dbapi_connection
