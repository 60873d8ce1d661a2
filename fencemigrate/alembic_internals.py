"""Where fencemigrate reaches past Alembic's and SQLAlchemy's public API, one function each.

Each function says why no public hook serves. ``tests/test_alembic_internals.py`` fails, naming
the release and the name, when an Alembic or SQLAlchemy release changes what one relies on;
``tests/test_code_layout.py`` fails when any other module uses these names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any

from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine

MigrationsFn = Callable[[tuple[str, ...], MigrationContext], Iterable[Any]]
"""Alembic's migration function: given the current heads, the steps to run."""

BlockFactory = Callable[[], AbstractContextManager[None]]


def around_env_py_calls(
    context: EnvironmentContext,
    configure: Callable[..., None],
    run_migrations: Callable[..., None],
) -> None:
    """Have env.py's ``context.configure(...)`` call ``configure(original, *args, **kw)`` and its
    ``context.run_migrations(**kw)`` call ``run_migrations(original, **kw)``.

    Why not public: Alembic has no hook between env.py configuring its connection and Alembic's
    first use of it (the version table is created before the migration function runs), and a
    subclass of :class:`EnvironmentContext` would not be what ``from alembic import context``
    reaches (``ModuleClsProxy`` installs proxies for the exact class only). The proxy functions
    look the method up on the instance at each call, so the instance's methods are replaced.
    """
    original_configure, original_run = context.configure, context.run_migrations

    def configured(*args: Any, **kw: Any) -> None:
        configure(original_configure, *args, **kw)

    def ran(**kw: Any) -> None:
        run_migrations(original_run, **kw)

    context.configure = configured  # type: ignore[method-assign]
    context.run_migrations = ran  # type: ignore[method-assign]


def migration_function(context: MigrationContext) -> MigrationsFn | None:
    """The migration function Alembic's command gave the context (``MigrationContext._migrations_fn``).

    Why not public: under plain ``alembic``, the command (``upgrade``, ``downgrade``...) builds its
    function before env.py runs; the fence-aware env.py only has the configured context. Its
    ``opts["fn"]`` is a copy taken at construction, not what ``run_migrations`` calls.
    """
    return context._migrations_fn


def replace_migration_function(context: MigrationContext, fn: MigrationsFn) -> None:
    """Make ``context.run_migrations()`` plan with ``fn`` instead (see :func:`migration_function`).

    Why not public: env.py cannot hand Alembic another function once it has configured the context.
    """
    context._migrations_fn = fn


def per_migration_transaction(context: MigrationContext) -> AbstractContextManager[Any]:
    """The transaction Alembic opens around each step (``begin_transaction(_per_migration=True)``):
    a real one unless env.py's outer ``begin_transaction()`` already opened it, also on databases
    without transactional DDL.

    Why not public: work done from the migration function rather than in a step (``install``,
    ``ensure_version``) needs the step's transaction; the public ``begin_transaction()`` is the
    outer one, which env.py has already entered (or skipped, with ``transaction_per_migration``).
    """
    return context.begin_transaction(_per_migration=True)


def around_autocommit_blocks(
    context: MigrationContext, block: Callable[[BlockFactory], AbstractContextManager[None]]
) -> None:
    """Make every ``autocommit_block()`` a revision opens on ``context`` be ``block(original)``.

    Why not public: Alembic has no hook for a revision leaving its transaction, and SQLAlchemy's
    events come too late or too early (the commit of the step's transaction, then the change of
    isolation level) to claim again between them.
    """
    original = context.autocommit_block

    def autocommit_block() -> Any:  # Alembic's annotation names contextlib's private generator class
        return block(original)

    context.autocommit_block = autocommit_block  # type: ignore[method-assign]


def rewrite_offline_output(context: MigrationContext, rewrite: Callable[[str], str]) -> Callable[[], None]:
    """From now on, every text Alembic writes to a ``--sql`` script goes through ``rewrite``
    (``impl.static_output``); returns what undoes it.

    Why not public: the output buffer is fixed when env.py configures the context (under plain
    ``alembic`` fencemigrate is not there then), and no hook sees the statements written.
    """
    impl = context.impl
    write = impl.static_output

    def output(text: str) -> None:
        write(rewrite(text))

    def restore() -> None:
        impl.static_output = write  # type: ignore[method-assign]

    impl.static_output = output  # type: ignore[method-assign]
    return restore


def in_autocommit_isolation(connection: Connection) -> bool:
    """Whether ``connection`` runs at SQLAlchemy's ``AUTOCOMMIT`` isolation level, set on the
    connection or the engine (``Connection._is_autocommit_isolation``).

    Why not public: ``Connection.get_isolation_level()`` never reports ``AUTOCOMMIT``, and on
    pysqlite the driver's autocommit setting is the same whether SQLAlchemy or fencemigrate's
    transactional DDL turned pysqlite's own transactions off.
    """
    return bool(connection._is_autocommit_isolation())


def engines_dispatch_events() -> bool:
    """Whether every engine runs its event dispatch (``Engine._has_events`` on the class)."""
    return bool(Engine._has_events)


def set_engines_dispatch_events(dispatch: bool) -> None:
    """Put back :func:`engines_dispatch_events` after listeners on the :class:`Engine` class are removed.

    Why not public: listening on the class sets the flag for every engine, and ``event.remove``
    leaves it set, so every later engine would take the slower event path for good.
    """
    Engine._has_events = dispatch
