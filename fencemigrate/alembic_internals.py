"""Where fencemigrate reaches past Alembic's and SQLAlchemy's public API, one function each.

Each function says why no public hook serves. ``tests/test_alembic_internals.py`` fails, naming
the release and the name, when an Alembic or SQLAlchemy release changes what one relies on;
``tests/test_code_layout.py`` fails when any other module uses these names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext
from alembic.script import Script, ScriptDirectory
from alembic.script.revision import Revision
from sqlalchemy import Connection, Engine

MigrationsFn = Callable[[tuple[str, ...], MigrationContext], Iterable[Any]]
"""Alembic's migration function: given the current heads, the steps to run."""

BlockFactory = Callable[[], AbstractContextManager[None]]


# -- Alembic: env.py and the migration context -------------------------------------------------


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


def create_version_table(context: MigrationContext) -> None:
    """Create Alembic's version table, empty, unless it exists (``MigrationContext._ensure_version_table``).

    Why not public: Alembic creates it only as a side effect of ``run_migrations`` or ``stamp``;
    fencemigrate creates it in the transaction that guards it, before any version is written.
    """
    context._ensure_version_table()


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


# -- Alembic: the script directory and its revisions ---------------------------------------

# Alembic's command.py builds its migration functions from ScriptDirectory._upgrade_revs,
# _downgrade_revs and _stamp_revs; there is no public planner. They are annotated with str but
# command.py passes the heads tuple, as fencemigrate does.


def upgrade_steps(script: ScriptDirectory, destination: str, heads: str | tuple[str, ...]) -> list[Any]:
    """The steps ``alembic upgrade destination`` runs from ``heads`` (``ScriptDirectory._upgrade_revs``)."""
    return list(script._upgrade_revs(destination, heads))  # type: ignore[arg-type]


def downgrade_steps(script: ScriptDirectory, destination: str, heads: str | tuple[str, ...]) -> list[Any]:
    """The steps ``alembic downgrade destination`` runs from ``heads`` (``ScriptDirectory._downgrade_revs``)."""
    return list(script._downgrade_revs(destination, heads))  # type: ignore[arg-type]


def stamp_steps(script: ScriptDirectory, revisions: tuple[str, ...], heads: tuple[str, ...]) -> list[Any]:
    """The steps ``alembic stamp revisions`` takes from ``heads`` (``ScriptDirectory._stamp_revs``)."""
    return list(script._stamp_revs(revisions, heads))


def alembic_wording(script: ScriptDirectory) -> AbstractContextManager[None]:
    """Alembic's revision errors raised inside as the ``CommandError`` its commands report, in its
    words: ``Can't locate revision identified by 'x'``, ``Multiple head revisions are present ...``
    (``ScriptDirectory._catch_revision_errors``).

    Why not public: the revision map raises its own messages (``No such revision or branch 'x'``);
    Alembic rewords them only inside its commands and its planners.
    """
    return script._catch_revision_errors()


def relative_revision(script: ScriptDirectory, start: str, steps: int, branch: str | None) -> Any:
    """The revision ``steps`` away from ``start`` (``start+N``, ``start-N``), None past the end of
    the graph (``RevisionMap._walk``).

    Why not public: Alembic resolves relative revisions only inside its planners, which fail with
    a message that does not say the graph ended.
    """
    return script.revision_map._walk(start, steps, branch_label=branch)


def parent_revisions(revision: Revision) -> tuple[str, ...]:
    """The revisions right below ``revision`` as Alembic's planners walk them: its down revisions,
    and the dependencies no ancestor already has (``Revision._normalized_down_revisions``).

    Why not public: ``down_revision`` leaves dependencies out, and ``depends_on`` is as written
    (branch labels, partial ids); Alembic resolves and prunes them in private.
    """
    return tuple(revision._normalized_down_revisions)


def revisions_below(revision: Revision) -> tuple[str, ...]:
    """The revisions right below ``revision``: its down revisions and every dependency, resolved
    (``Revision._all_down_revisions``); what the version table moves to when stamped below it.
    Why not public: as for :func:`parent_revisions`."""
    return tuple(revision._all_down_revisions)


def listed_dependencies(revision: Revision) -> tuple[str, ...]:
    """``depends_on`` resolved to revision ids (``Revision._resolved_dependencies``).
    Why not public: ``depends_on`` is as written (branch labels, partial ids)."""
    return tuple(revision._resolved_dependencies)


def mark_current(script: Script, current: bool) -> None:
    """Have ``script.cmd_format()`` say ``(current)`` as ``alembic history -i`` does
    (``Script._db_current_indicator``). Why not public: Alembic's own command sets it the same way;
    ``cmd_format`` takes no such argument."""
    script._db_current_indicator = current


def script_by_id(script: ScriptDirectory, rev_id: str) -> Script | None:
    """The revision file whose id or branch label is exactly ``rev_id``, if there is one
    (``RevisionMap._revision_map``).

    Why not public: ``get_revision`` also resolves partial ids and ``head``, and raises when
    ``rev_id`` is ambiguous.
    """
    found = script.revision_map._revision_map.get(rev_id)
    return found if isinstance(found, Script) else None


def version_directories(script: ScriptDirectory) -> list[Path]:
    """The directories Alembic reads revision files from, resolved (``ScriptDirectory._version_locations``).

    Why not public: ``version_locations`` is the configured text (relative, or a package resource).
    """
    return list(script._version_locations)


# -- SQLAlchemy -------------------------------------------------------------------------------


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
