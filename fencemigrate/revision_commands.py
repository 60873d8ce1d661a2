"""Alembic's commands that name revisions by what the database holds: ``current``, ``heads``,
``history``, ``show`` (printed by Alembic or in its format, or as a listing for ``--json``) and
``edit``. The revisions they name are resolved first (bad usage, in Alembic's words); the
database's heads are read through env.py without creating the version table."""

from __future__ import annotations

from alembic import command as alembic_command
from alembic.config import Config
from alembic.util import asbool

from .authoring import open_in_editor, revision_files
from .connections import translated_errors
from .errors import UsageError
from .revision_listing import (
    RevisionListing,
    current_listing,
    heads_listing,
    history_lines,
    history_listing,
    needs_database,
    require_history_range,
    show_lines,
    show_listing,
)
from .runtime.env_reads import alembic_read, database_heads, print_stdout
from .runtime.environment import check_configured_url
from .runtime.revision_targets import alembic_words, script_directory


def current(config: Config, check_heads: bool, verbose: bool, as_json: bool) -> RevisionListing | None:
    """See :func:`.api.current`."""
    if not as_json:
        check_configured_url(config)
        alembic_read(alembic_command.current, config, check_heads=check_heads, verbose=verbose)
        return None
    heads = database_heads(config)
    with translated_errors():
        return current_listing(script_directory(config), heads, check_heads)


def heads(config: Config, verbose: bool, resolve_dependencies: bool, as_json: bool) -> RevisionListing | None:
    """See :func:`.api.heads`."""
    if not as_json:
        alembic_read(alembic_command.heads, config, verbose=verbose, resolve_dependencies=resolve_dependencies)
        return None
    with translated_errors():
        return heads_listing(script_directory(config), resolve_dependencies)


def history(
    config: Config, rev_range: str | None, verbose: bool, indicate_current: bool, as_json: bool
) -> RevisionListing | None:
    """See :func:`.api.history`: the range resolved before the database is read (an unknown
    revision is bad usage, in Alembic's words)."""
    script = script_directory(config)
    with alembic_words(script):
        read = needs_database(rev_range, indicate_current)
        require_history_range(script, rev_range)
        if not as_json and not read and not asbool(config.get_alembic_option("revision_environment")):
            print_stdout(config, history_lines(script, rev_range, (), verbose, indicate_current))
            return None
    heads = database_heads(config) if read or not as_json else None
    with translated_errors():
        if as_json:
            return history_listing(script, rev_range, heads, indicate_current)
        print_stdout(config, history_lines(script, rev_range, heads or (), verbose, indicate_current))
    return None


def show(config: Config, rev: str, as_json: bool) -> RevisionListing | None:
    """See :func:`.api.show`: a revision other than ``current`` resolved before anything else (an
    unknown one is bad usage, in Alembic's words); ``current`` is the database's heads."""
    script = script_directory(config)
    heads = database_heads(config) if rev == "current" else None
    with alembic_words(script) if heads is None else translated_errors():
        if as_json:
            return show_listing(script, rev, heads)
        print_stdout(config, show_lines(script, rev if heads is None else heads))
    return None


def edit(config: Config, rev: str) -> list[str]:
    """See :func:`.api.edit`."""
    script = script_directory(config)
    if rev == "current":
        heads = database_heads(config)
        if not heads:
            raise UsageError("No current revisions")
        paths = [path for head in heads for path in revision_files(script, head)]
    else:
        paths = revision_files(script, rev)
    open_in_editor(paths)
    return paths
