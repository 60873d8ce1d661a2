"""Run the project's own env.py with a fenced migration function: the one place connections open."""

from __future__ import annotations

import configparser
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from ..config import check_url_password
from ..errors import DatabaseError, FencemigrateError, NotTransactional, from_database_error, sqlstate_of
from ..process_exit import close_at_exit
from ..scrub import remember_password, scrub_secrets
from .code_errors import env_py_code
from .connections import (
    cancel_statement_on_server,
    is_driver_error,
    note_driver,
    roll_back_or_invalidate,
    server_session_id,
)
from .run_token import TokenSource
from .sqlite_transactions import manages, sqlite_transactions

FENCED_RUN_ATTRIBUTE = "fencemigrate.run"
"""``config.attributes`` key telling the fence-aware env.py template that fencing is on."""


def run_env(
    config: Config,
    script: ScriptDirectory,
    fn: Callable[..., Any],
    *,
    resource: str = "",
    tokens: TokenSource | None = None,
    writes: bool = False,
    single_transaction: bool = False,
    on_connection: Callable[[MigrationContext], None] | None = None,
    per_migration: Callable[[Connection], bool] = lambda connection: False,
    **context_options: Any,
) -> bool:
    """Run env.py with ``fn`` as Alembic's migration function; map failures to our outcomes.

    With ``writes``, a connection in autocommit mode is refused as soon as env.py configures
    it, before Alembic touches the database. With ``single_transaction``,
    ``transaction_per_migration=True`` from env.py is overridden; returns True when that happened.
    When ``per_migration(connection)`` is true, each revision gets a transaction of its own
    whatever env.py says (pre-check mode on PostgreSQL commits each revision's mark before it).
    ``on_connection`` gets env.py's migration context once configured with a connection, before
    Alembic uses it (the
    run's lease is acquired there, before Alembic creates its version table).
    SQLite connections env.py opens get transactional DDL (:mod:`.sqlite_transactions`), and
    Alembic is told so. What env.py raises itself is :class:`.code_errors.EnvPyFailed`.
    When what fencemigrate runs inside env.py fails, env.py's connections are rolled back before
    env.py closes them, and invalidated if their sessions are gone (:mod:`.connections`).
    """
    check_configured_url(config)
    context = EnvironmentContext(config, script, fn=fn, **context_options)
    forced: list[bool] = []
    configured: list[tuple[Connection, int | None]] = []  # with the server's id of the session
    configure, run_migrations = context.configure, context.run_migrations

    def guarded_configure(*args: Any, **kw: Any) -> None:
        given = kw.get("connection", args[0] if args else None)
        if isinstance(given, Connection) and per_migration(given):
            kw["transaction_per_migration"] = True
        elif single_transaction and kw.get("transaction_per_migration"):
            kw["transaction_per_migration"] = False
            forced.append(True)
        if isinstance(given, Connection) and given.dialect.name == "sqlite":
            kw.setdefault("transactional_ddl", True)  # Alembic's SQLiteImpl assumes pysqlite's autocommit
        configure(*args, **kw)
        connection = context.get_context().connection
        if isinstance(connection, Connection):  # not --sql's mock connection
            close_at_exit(connection.engine)
            remember_password(connection.engine.url.password)  # env.py may have it from elsewhere
            note_driver(connection.dialect)
            configured.append((connection, server_session_id(connection)))
        with _rolled_back_on_failure(configured):
            if writes and connection is not None and autocommits(connection):
                raise NotTransactional(
                    "refusing to migrate: the connection env.py gave Alembic is in autocommit mode, "
                    "so the fence claim could not share a transaction with the DDL; nothing was applied"
                )
            if on_connection is not None and connection is not None:
                on_connection(context.get_context())

    def guarded_run_migrations(**kw: Any) -> None:
        with _rolled_back_on_failure(configured):
            run_migrations(**kw)

    context.configure = guarded_configure  # type: ignore[method-assign]
    context.run_migrations = guarded_run_migrations  # type: ignore[method-assign]
    with translated_errors(resource, tokens), sqlite_transactions(), context, env_py_code(script.env_py_location):
        script.run_env()
    return bool(forced)


@contextmanager
def _rolled_back_on_failure(connections: list[tuple[Connection, int | None]]) -> Iterator[None]:
    """On a failure, roll back env.py's ``connections`` before env.py closes them, invalidating those
    whose sessions are gone: the pool's own rollback of those logs a traceback. A stop signal
    (SIGTERM, SIGINT) first cancels the statement in flight on the server."""
    try:
        yield
    except BaseException as failure:
        for connection, session_id in connections:
            if isinstance(failure, KeyboardInterrupt) and session_id is not None:
                cancel_statement_on_server(connection.engine, session_id)
            roll_back_or_invalidate(connection)
        raise


def check_configured_url(config: Config) -> None:
    """Refuse a ``sqlalchemy.url`` SQLAlchemy would misread, before env.py connects with it and the
    driver's error prints part of its password; a value configparser refuses is env.py's to read."""
    try:
        url = config.get_main_option("sqlalchemy.url")
    except configparser.Error:
        return
    check_url_password(url)


def autocommits(connection: Connection) -> bool:
    """True when the DBAPI connection commits every statement on its own.

    On SQLite: unless :mod:`.sqlite_transactions` manages it (pysqlite's own transaction control
    commits every DDL statement on its own).
    """
    if connection.dialect.name == "sqlite":
        return not manages(connection)
    dbapi_connection = connection.connection.dbapi_connection
    assert dbapi_connection is not None
    return bool(connection.dialect.detect_autocommit_setting(dbapi_connection))


@contextmanager
def translated_errors(resource: str = "", tokens: TokenSource | None = None) -> Iterator[None]:
    """Turn database and Alembic errors into fencemigrate outcomes (FENCED by its SQLSTATE); a FENCED
    without the claim's own detail names the token ``tokens`` holds when it is raised."""
    try:
        yield
    except FencemigrateError:
        raise
    except DBAPIError as error:
        mapped = from_database_error(error, resource, _fallback_token(tokens))
        if mapped is not None:
            raise mapped from None
        raise DatabaseError(_one_line(error)) from None
    except SQLAlchemyError as error:
        raise DatabaseError(_one_line(error)) from None
    except CommandError as error:
        raise FencemigrateError(scrub_secrets(str(error))) from None
    except Exception as error:
        # The fence calls and the named locks go straight to the driver: FENCED and the others are
        # told by their SQLSTATE; one without (a lost session, any on MySQL) is a database error.
        if sqlstate_of(error) is None and not is_driver_error(error):
            raise
        mapped = from_database_error(error, resource, _fallback_token(tokens))
        raise (mapped or DatabaseError(_one_line(error))) from None


def _fallback_token(tokens: TokenSource | None) -> int:
    """The token a FENCED error names when the database's detail does not (0: none is known)."""
    token = tokens.token if tokens is not None else None
    return 0 if token is None else token


def _one_line(error: BaseException) -> str:
    original = getattr(error, "orig", None) or error
    text = str(original).strip().splitlines()
    first = text[0] if text else type(original).__name__
    return "database error: " + scrub_secrets(first)
