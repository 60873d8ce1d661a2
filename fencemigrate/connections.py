"""Every engine and connection fencemigrate opens itself, how it lets go of them, and what their errors mean.

env.py opens the migration's own connection; everything else is opened here, by a function named
for what it is for: the lease service's connection (:func:`own_connection`), the read-only probe
of the heads (:func:`probe_connection`), a connection beside env.py's whose transaction is doomed
(:func:`separate_connection`), the synchronous engine of a lease taken through an async driver
(:func:`unpooled_engine`), and the demo's short-lived ones (:func:`one_off_connection`).
``tests/test_code_layout.py`` fails on any other module that opens one.

Connections whose server session may be gone are invalidated, never reset into the pool.
A session ends under a run when the server kills it (``KILL CONNECTION``, ``pg_terminate_backend``,
``--preempt``) or restarts. SQLAlchemy learns it from the statements it runs itself, and then
invalidates the connection: closing it only drops it. It cannot learn it from the statements
fencemigrate sends straight to the driver (:mod:`.dialects.statements`, the named locks, psycopg's wait for
notifications), nor for a connection that sat idle meanwhile (env.py's, while the run waits for its
lease). Closing such a connection makes the pool roll it back (its reset on return), which fails;
the pool logs "Exception during reset or similar" with a traceback, and the
``logging.config.fileConfig(alembic.ini)`` of Alembic's env.py templates prints it to stderr.

So fencemigrate invalidates a connection whose session it finds gone, and rolls back the ones it
hands back after a failure (and those it opened itself) before they are closed, invalidating any
whose rollback fails. Ending a session rolls back whatever it had open, on the server.

A session can also end after a run's last commit and before env.py closes its connection (the
process paused there while the server killed it): nothing is lost, the run succeeded, and no code
of fencemigrate's runs in between. The pool's failed rollback still logs its traceback; for env.py's
engines that record is dropped when the driver failed (:func:`quiet_lost_session_resets`): the
pool has invalidated the connection, which is all there is to do.

Database and Alembic errors are turned into fencemigrate's outcomes here too
(:func:`translated_errors`), for every layer that talks to a database (runs, the lease service,
read-only commands).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from alembic.util import CommandError
from sqlalchemy import Connection, Dialect, Engine, create_engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.log import InstanceLogger
from sqlalchemy.pool import NullPool

from .errors import DatabaseError, FencemigrateError, UsageError, from_database_error, sqlstate_of
from .scrub import scrub_secrets

_driver_errors: set[type[Exception]] = set()


def note_driver(dialect: Dialect) -> None:
    """Remember ``dialect``'s driver: its own exceptions are database errors (:func:`is_driver_error`)."""
    _driver_errors.add(dialect.loaded_dbapi.Error)


def is_driver_error(error: BaseException) -> bool:
    """Whether ``error`` is the own exception of a driver fencemigrate has connected through."""
    return isinstance(error, tuple(_driver_errors))


class _LostSessionResets(logging.Filter):
    """Drops the pool's "Exception during reset or similar" record when what failed is the driver
    (:func:`is_driver_error`): the session is gone, or unusable, and the pool invalidates the
    connection itself, which ends the session and whatever it had open."""

    RECORD = "Exception during reset or similar"

    def filter(self, record: logging.LogRecord) -> bool:
        failure = record.exc_info[1] if record.exc_info else None
        return not (record.msg == self.RECORD and failure is not None and is_driver_error(failure))


_lost_session_resets = _LostSessionResets()


def quiet_lost_session_resets(engine: Engine) -> None:
    """Keep the pool of ``engine`` (env.py's) from logging a traceback when it hands back a connection
    whose session the server has ended (see the module's docstring)."""
    note_driver(engine.dialect)
    logger = engine.pool.logger
    target = logger.logger if isinstance(logger, InstanceLogger) else logger
    if _lost_session_resets not in target.filters:
        target.addFilter(_lost_session_resets)


def roll_back_or_invalidate(connection: Connection) -> None:
    """Roll back what ``connection``'s session has open now, as the pool would when it is closed;
    when that fails (the session is gone), invalidate the connection instead."""
    if connection.closed or connection.invalidated:
        return
    try:
        connection.dialect.do_rollback(connection.connection)
    except Exception as error:  # noqa: BLE001 - whatever the driver says, the session is unusable
        connection.invalidate(error)


def close(connection: Connection) -> None:
    """Close a connection fencemigrate opened itself, rolled back (or invalidated) first."""
    roll_back_or_invalidate(connection)
    connection.close()


def probe_connection(engine: Engine) -> Connection:
    """A connection of its own on env.py's ``engine`` in autocommit mode, for reads that must
    neither wait for env.py's transaction nor take SQLite's write lock (close it with :func:`close`)."""
    return engine.connect().execution_options(isolation_level="AUTOCOMMIT")


def separate_connection(engine: Engine) -> Connection:
    """A connection of its own on env.py's ``engine``, beside env.py's (whose transaction is doomed
    after FENCED); use it in a ``with`` block."""
    return engine.connect()


def unpooled_engine(url: URL) -> Engine:
    """An engine on ``url`` without a pool: each connection ends with its use (the lease service's
    synchronous engine when env.py's driver is async, which outlives env.py's event loop)."""
    return create_engine(url, poolclass=NullPool)


@contextmanager
def one_off_connection(url: str | URL, autocommit: bool = False) -> Iterator[Connection]:
    """A connection on an engine of its own for ``url``, disposed of afterwards (the demo's: its
    scratch databases' admin connection, with ``autocommit``, and its look at a replay's schema)."""
    engine = create_engine(url, isolation_level="AUTOCOMMIT") if autocommit else create_engine(url)
    try:
        with engine.connect() as connection:
            yield connection
    finally:
        engine.dispose()


@contextmanager
def own_connection(engine: Engine) -> Iterator[Connection]:
    """A connection of fencemigrate's own on ``engine`` (the lease service's), closed by :func:`close`."""
    note_driver(engine.dialect)
    connection = engine.connect()
    try:
        yield connection
    finally:
        close(connection)


@contextmanager
def translated_errors(resource: str = "", token: Callable[[], int | None] | None = None) -> Iterator[None]:
    """Turn database and Alembic errors into fencemigrate outcomes (FENCED by its SQLSTATE); a FENCED
    without the claim's own detail names the run's ``token()`` when it is raised (0: none is known)."""
    try:
        yield
    except FencemigrateError:
        raise
    except DBAPIError as error:
        mapped = from_database_error(error, resource, _fallback_token(token))
        if mapped is not None:
            raise mapped from None
        raise DatabaseError(_one_line(error)) from None
    except NoSuchModuleError as error:
        raise UsageError(unknown_url_scheme(error)) from None
    except SQLAlchemyError as error:
        raise DatabaseError(_one_line(error)) from None
    except CommandError as error:
        raise FencemigrateError(scrub_secrets(str(error))) from None
    except Exception as error:
        # The fence calls and the named locks go straight to the driver: FENCED and the others are
        # told by their SQLSTATE; one without (a lost session, any on MySQL) is a database error.
        if sqlstate_of(error) is None and not is_driver_error(error):
            raise
        mapped = from_database_error(error, resource, _fallback_token(token))
        raise (mapped or DatabaseError(_one_line(error))) from None


def unknown_url_scheme(error: NoSuchModuleError) -> str:
    """Bad config: the database URL names a dialect or driver SQLAlchemy cannot load (its message
    names the plugin, ``sqlalchemy.dialects:postgres``, never the URL's password)."""
    plugin = str(error).rpartition(":")[2].strip()
    scheme = plugin.replace(".", "+")
    name, _, driver = plugin.partition(".")
    if name == "postgres":
        return (
            f"bad database URL: SQLAlchemy has no dialect {scheme}:// (it dropped the postgres spelling in 1.4); "
            f"write postgresql+{driver or 'psycopg'}:// instead"
        )
    return f"bad database URL: SQLAlchemy cannot load the dialect or driver of {scheme}:// (is its driver installed?)"


def _fallback_token(token: Callable[[], int | None] | None) -> int:
    """The token a FENCED error names when the database's detail does not (0: none is known)."""
    known = token() if token is not None else None
    return 0 if known is None else known


def _one_line(error: BaseException) -> str:
    original = getattr(error, "orig", None) or error
    text = str(original).strip().splitlines()
    first = text[0] if text else type(original).__name__
    return "database error: " + scrub_secrets(first)
