"""Run the project's own env.py with a fenced migration function, and turn its failures into outcomes."""

from __future__ import annotations

import configparser
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, make_url

from ..alembic_internals import around_env_py_calls
from ..config import check_url_password
from ..connections import (
    cancel_statement_on_server,
    note_driver,
    quiet_lost_session_resets,
    roll_back_or_invalidate,
    translated_errors,
)
from ..dialects import dialect_for
from ..dialects.sqlite_transactions import sqlite_transactions
from ..errors import NotTransactional, refused_step
from ..process import close_at_exit
from ..scrub import remember_password
from .code_errors import env_py_code
from .request import TokenSource

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
    SQLite connections env.py opens get transactional DDL (:mod:`..dialects.sqlite_transactions`), and
    Alembic is told so. What env.py raises itself is :class:`.code_errors.EnvPyFailed`.
    When what fencemigrate runs inside env.py fails, env.py's connections are rolled back before
    env.py closes them, and invalidated if their sessions are gone (:mod:`..connections`).
    """
    check_configured_url(config)
    context = EnvironmentContext(config, script, fn=fn, **context_options)
    forced: list[bool] = []
    configured: list[tuple[Connection, int | None]] = []  # with the server's id of the session

    def guarded_configure(configure: Callable[..., None], *args: Any, **kw: Any) -> None:
        given = kw.get("connection", args[0] if args else None)
        if isinstance(given, Connection) and per_migration(given):
            kw["transaction_per_migration"] = True
        elif single_transaction and kw.get("transaction_per_migration"):
            kw["transaction_per_migration"] = False
            forced.append(True)
        if isinstance(given, Connection):
            for option, value in dialect_for(given).context_options.items():
                kw.setdefault(option, value)
        elif tokens is not None and context.is_offline_mode() and _offline_backend(kw) == "sqlite":
            # A fenced --sql script for the sqlite3 shell has the transactions an online run has
            # (not `revision --sql`'s environment run: Alembic writes nothing there).
            kw.setdefault("transactional_ddl", True)
        configure(*args, **kw)
        connection = context.get_context().connection
        if isinstance(connection, Connection):  # not --sql's mock connection
            close_at_exit(connection.engine)
            quiet_lost_session_resets(connection.engine)
            remember_password(connection.engine.url.password)  # env.py may have it from elsewhere
            note_driver(connection.dialect)
            configured.append((connection, dialect_for(connection).session_id(connection)))
        with _rolled_back_on_failure(configured):
            if writes and connection is not None and autocommits(connection):
                raise NotTransactional(
                    "refusing to migrate: the connection env.py gave Alembic is in autocommit mode, "
                    "so the fence claim could not share a transaction with the DDL; nothing was applied"
                )
            if on_connection is not None and connection is not None:
                on_connection(context.get_context())

    def guarded_run_migrations(run_migrations: Callable[..., None], **kw: Any) -> None:
        with _rolled_back_on_failure(configured):
            run_migrations(**kw)

    around_env_py_calls(context, guarded_configure, guarded_run_migrations)
    claim = refused_step("the fence claim") if writes else nullcontext()
    with (
        translated_errors(resource, tokens),
        claim,
        sqlite_transactions(),
        context,
        env_py_code(script.env_py_location),
    ):
        script.run_env()
    return bool(forced)


def _offline_backend(kw: dict[str, Any]) -> str | None:
    """The database an offline ``configure(url=... | dialect_name=...)`` writes its script for."""
    if kw.get("dialect_name"):
        return str(kw["dialect_name"])
    return None if kw.get("url") is None else make_url(kw["url"]).get_backend_name()


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
    """True when the DBAPI connection commits every statement on its own (:meth:`Dialect.autocommits`)."""
    return dialect_for(connection).autocommits(connection)
