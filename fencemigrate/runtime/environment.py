"""Run the project's own env.py: with a fenced migration function, or with nothing to migrate (the
commands that only read, Alembic's own among them); and turn its failures into outcomes.

Failures of the project's own code, a revision's or env.py's, are named with the file and line. A
revision that raises gives :class:`~fencemigrate.errors.RevisionFailed` (one for a database error,
which stays a :class:`~fencemigrate.errors.DatabaseError`), naming the revision and the innermost
line of its file on the traceback; env.py failing gives :class:`~fencemigrate.errors.EnvPyFailed`.
The original exception is the ``__cause__`` (``--raiseerr`` prints its traceback). FENCED and the
other outcomes fencemigrate's own SQL raises from inside a revision are left to
:func:`..connections.translated_errors`; the monotonic guard's is told which revision wrote.

Read commands never create a database: SQLite would create a missing file on connect. Inside
:func:`existing_sqlite_files_only`, a connection to a SQLite file that does not exist is refused
before the driver opens it (so no file is left behind), whoever opens it: env.py, Alembic or
fencemigrate. In-memory databases are let through.

A ``--sql`` script from base creates Alembic's version table only if it does not exist yet
(:func:`create_version_table_if_missing`): a fenced database already has it, empty and guarded
(``fencemigrate install`` and every lease grant create it, so that plain Alembic's first write is
refused too), and Alembic's plain ``CREATE TABLE`` of it would then fail in psql; the fenced script
writes it with ``IF NOT EXISTS`` instead (and guards the table right after it, as before).
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, event, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.schema import CreateTable

from ..alembic_internals import around_env_py_calls, rewrite_offline_output
from ..config import check_url_password
from ..connections import (
    is_driver_error,
    note_driver,
    quiet_lost_session_resets,
    roll_back_or_invalidate,
    translated_errors,
)
from ..dialects import dialect_for, dialect_named
from ..dialects.sqlite_transactions import sqlite_transactions
from ..errors import (
    CodeLocation,
    EnvPyFailed,
    FencemigrateError,
    MonotonicGuardRefused,
    NotTransactional,
    RevisionDatabaseFailed,
    RevisionFailed,
    from_database_error,
    refused_step,
    sqlstate_of,
)
from ..process import close_at_exit
from ..scrub import remember_password, scrub_secrets
from .revisions import script_directory


def describe(error: BaseException) -> str:
    """The error in one line: ``Type: message`` (a database error as fencemigrate words them)."""
    if is_database_error(error):
        original = getattr(error, "orig", None) or error
        lines = str(original).strip().splitlines()
        return "database error: " + scrub_secrets(lines[0] if lines else type(original).__name__)
    lines = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
    return scrub_secrets(text)


def is_database_error(error: BaseException) -> bool:
    """An error of SQLAlchemy or of the database driver."""
    return isinstance(error, SQLAlchemyError) or sqlstate_of(error) is not None or is_driver_error(error)


def locate(error: BaseException, path: str) -> CodeLocation | None:
    """The innermost frame of ``error``'s traceback in the file ``path``, if it passed there."""
    wanted = os.path.realpath(path)
    found: CodeLocation | None = None
    trace = error.__traceback__
    while trace is not None:
        code = trace.tb_frame.f_code
        if os.path.realpath(code.co_filename) == wanted:
            found = CodeLocation(shown_path(path), trace.tb_lineno, code.co_name)
        trace = trace.tb_next
    return found


def shown_path(path: str) -> str:
    """``path`` relative to the working directory when it is under it, else absolute."""
    absolute = Path(path).resolve()
    try:
        return str(absolute.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(absolute)


@contextmanager
def revision_code(revision: str, path: str, aftermath: Callable[[], str], resource: str, token: int) -> Iterator[None]:
    """Run a revision's own code: what it raises becomes :class:`RevisionFailed` (``aftermath()``
    says what happened to the run's writes), except fencemigrate's own outcomes (FENCED, ...)."""
    try:
        yield
    except FencemigrateError:
        raise
    except Exception as error:
        if not is_database_error(error):
            raise RevisionFailed(revision, locate(error, path), describe(error), aftermath()) from error
        if (guarded := guard_refusal(error, revision, path, resource, token, aftermath)) is not None:
            raise guarded from error
        if from_database_error(error, resource, token) is not None:
            raise  # FENCED and the other refusals of fencemigrate's SQL, translated as ever
        raise RevisionDatabaseFailed(revision, locate(error, path), describe(error), aftermath()) from error


def guard_refusal(
    error: Exception, revision: str, path: str, resource: str, token: int, aftermath: Callable[[], str]
) -> MonotonicGuardRefused | None:
    """The monotonic guard's refusal of a write revision ``revision`` made (naming the revision and
    its line, then ``aftermath()``); None for any other error."""
    refused = from_database_error(error, resource, token) if is_database_error(error) else None
    if not isinstance(refused, MonotonicGuardRefused):
        return None
    writer = f"revision {revision}" + (f" ({where})" if (where := locate(error, path)) else "")
    return refused.written_by(writer, aftermath())


@contextmanager
def env_py_code(path: str) -> Iterator[None]:
    """Run env.py: what it raises itself becomes :class:`EnvPyFailed`; fencemigrate's outcomes,
    database and Alembic errors pass on unchanged (to :func:`..error_translation.translated_errors`)."""
    from alembic.util import CommandError

    try:
        yield
    except FencemigrateError:
        raise
    except Exception as error:
        if is_database_error(error) or isinstance(error, CommandError) or not _raised_by(error, path):
            raise
        raise EnvPyFailed(locate(error, path), describe(error)) from error


def _raised_by(error: BaseException, path: str) -> bool:
    """The file ``path`` is on ``error``'s traceback, and what it called last there is not Alembic
    (whose own errors, raised while env.py runs the migrations, are not env.py's)."""
    import alembic

    wanted, alembic_dir = os.path.realpath(path), os.path.dirname(os.path.realpath(alembic.__file__))
    called: str | None = None
    trace = error.__traceback__
    seen = False
    while trace is not None:
        filename = os.path.realpath(trace.tb_frame.f_code.co_filename)
        if filename == wanted:
            seen, called = True, None
        elif seen and called is None:
            called = filename
        trace = trace.tb_next
    return seen and (called is None or not called.startswith(alembic_dir + os.sep))


_ONLY_EXISTING: ContextVar[bool] = ContextVar("fencemigrate_only_existing_sqlite_files", default=False)
_listening = False


class MissingDatabase(FencemigrateError):
    """A read command was pointed at a SQLite file that does not exist (exit 1)."""


@contextmanager
def existing_sqlite_files_only() -> Iterator[None]:
    """Refuse, inside the block (this thread or task), to open a SQLite file that does not exist."""
    # Imported here: a fenced run on another database never loads SQLAlchemy's SQLite dialect.
    from sqlalchemy.dialects.sqlite.base import SQLiteDialect

    global _listening
    if not _listening:
        event.listen(SQLiteDialect, "do_connect", _refuse_missing_file)
        _listening = True
    reset = _ONLY_EXISTING.set(True)
    try:
        yield
    finally:
        _ONLY_EXISTING.reset(reset)


def _refuse_missing_file(dialect: Any, record: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
    if not _ONLY_EXISTING.get():
        return
    path = database_file(cargs, cparams)
    if path is not None and not os.path.exists(path):
        raise MissingDatabase(
            f"no SQLite database at {path}: read commands never create one; check sqlalchemy.url "
            "(a fenced upgrade creates the file)"
        )


def database_file(cargs: list[Any], cparams: dict[str, Any]) -> str | None:
    """The file a SQLite driver is asked to open (``sqlite3.connect``'s arguments); None in memory."""
    name = str(cargs[0]) if cargs else str(cparams.get("database", ""))
    if cparams.get("uri"):
        parts = urlsplit(name)
        if parse_qs(parts.query).get("mode", [""])[-1] == "memory":
            return None
        name = unquote(parts.path) if parts.scheme == "file" else name
    return None if name in ("", ":memory:") else name


FENCED_RUN_ATTRIBUTE = "fencemigrate.run"
"""``config.attributes`` key telling the fence-aware env.py template that fencing is on."""


def run_env(
    config: Config,
    script: ScriptDirectory,
    fn: Callable[..., Any],
    *,
    resource: str = "",
    token: Callable[[], int | None] | None = None,
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
    Alembic is told so. What env.py raises itself is :class:`~fencemigrate.errors.EnvPyFailed`.
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
        elif token is not None and context.is_offline_mode() and _writes_shell_scripts(kw):
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
        translated_errors(resource, token),
        claim,
        sqlite_transactions(),
        context,
        env_py_code(script.env_py_location),
    ):
        script.run_env()
    return bool(forced)


def _writes_shell_scripts(kw: dict[str, Any]) -> bool:
    """An offline ``configure(url=... | dialect_name=...)`` writes its script for a database shell
    that runs it as written, transactions included (SQLite's)."""
    if kw.get("dialect_name"):
        name: str | None = str(kw["dialect_name"])
    else:
        name = None if kw.get("url") is None else make_url(kw["url"]).get_backend_name()
    dialect = dialect_named(name)
    return dialect is not None and dialect.shell_scripts


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
                dialect_for(connection).cancel_statement(connection.engine, session_id)
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


_T = TypeVar("_T")


def read_through_env(
    config: Config,
    script: ScriptDirectory,
    fn: Callable[[tuple[str, ...], MigrationContext], list[Any]],
    **context_options: Any,
) -> None:
    """Run env.py with ``fn`` and nothing to migrate: Alembic does not even create its version
    table (a fence-aware env.py passes straight through)."""
    config.attributes[FENCED_RUN_ATTRIBUTE] = fn
    try:
        run_env(config, script, fn, dont_mutate=True, **context_options)
    finally:
        config.attributes.pop(FENCED_RUN_ATTRIBUTE, None)


def run_without_steps(
    config: Config,
    fn: Callable[[tuple[str, ...], MigrationContext], list[Any]],
    on_connection: Callable[[MigrationContext], None] | None = None,
    reads_only: bool = False,
) -> None:
    """Run env.py with ``fn`` and no migration steps; with ``reads_only``, a missing SQLite file is
    an error, not created."""
    with existing_sqlite_files_only() if reads_only else nullcontext():
        read_through_env(config, script_directory(config), fn, on_connection=on_connection)


def read_once(
    config: Config,
    read: Callable[[tuple[str, ...], MigrationContext], _T],
    cannot: str,
    reads_only: bool = True,
    script: ScriptDirectory | None = None,
    **context_options: Any,
) -> _T:
    """What ``read`` returns from env.py's migration context, run with nothing to migrate (see
    :func:`run_without_steps`; with ``script``, through it as it is, e.g. --sql's). ``cannot``
    says what is missing when env.py never ran the migration context."""
    found: list[_T] = []

    def fn(heads: tuple[str, ...], context: MigrationContext) -> list[Any]:
        found.append(read(heads, context))
        return []

    if script is not None:
        read_through_env(config, script, fn, **context_options)
    else:
        run_without_steps(config, fn, reads_only=reads_only)
    if not found:
        raise FencemigrateError(f"env.py did not run the migration context; {cannot}")
    return found[0]


def database_heads(config: Config) -> tuple[str, ...]:
    """The version table's rows, read through env.py without creating the table."""
    return read_once(config, lambda heads, context: tuple(heads), "cannot read the current revision")


def alembic_read(fn: Callable[..., None], config: Config, *args: Any, **kw: Any) -> None:
    """An Alembic command that only reads: it never creates a missing SQLite file."""
    with existing_sqlite_files_only(), translated_errors():
        fn(config, *args, **kw)


def print_stdout(config: Config, lines: list[str]) -> None:
    """Print Alembic-formatted ``lines`` as Alembic's commands do (silent with ``-q``)."""
    for line in lines:
        config.print_stdout(line)


def create_version_table_if_missing(context: MigrationContext) -> None:
    """From now on, write Alembic's ``CREATE TABLE`` of its version table to the script as
    ``CREATE TABLE IF NOT EXISTS`` (the same table, compiled the way Alembic compiles it)."""
    impl = context.impl
    table = impl.version_table_impl(
        version_table=context.version_table,
        version_table_schema=context.version_table_schema,
        version_table_pk=context.opts.get("version_table_pk", True),
    )

    def as_script(statement: CreateTable) -> str:
        compiled = statement.compile(dialect=context.dialect)
        return str(compiled).replace("\t", "    ").strip() + impl.command_terminator

    plain = as_script(CreateTable(table))
    if_not_exists = as_script(CreateTable(table, if_not_exists=True))
    rewrite_offline_output(context, lambda text: if_not_exists if text == plain else text)
