"""Commands that run env.py with nothing to migrate, and Alembic's own commands that only read."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Any, TypeVar

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from ..connections import translated_errors
from ..errors import FencemigrateError
from .environment import FENCED_RUN_ATTRIBUTE, run_env
from .existing_databases import existing_sqlite_files_only
from .revision_targets import script_directory

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
