"""The revisions a command names, checked against the revision files before the database is touched."""

from __future__ import annotations

import re

from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError

from ..alembic_internals import relative_revision
from ..errors import UsageError

RELATIVE = re.compile(r"[+-]\d+$")
_RELATIVE_TARGET = re.compile(r"(?:(?P<branch>.+?)@)?(?P<start>\w+)?(?P<steps>[+-]\d+)")  # as Alembic reads it


def script_directory(config: Config) -> ScriptDirectory:
    """The project's revision files; a configuration Alembic refuses is a UsageError."""
    try:
        return ScriptDirectory.from_config(config)
    except CommandError as error:
        raise UsageError(str(error)) from None


def require_known(script: ScriptDirectory, revision: str | None) -> None:
    """Reject an unknown revision, or a relative one that walks off the revision graph, before
    the database is touched."""
    if revision in (None, "base", "head", "heads"):
        return
    if RELATIVE.search(revision or ""):
        _require_walkable(script, revision or "")
        return
    try:
        script.revision_map.get_revisions(revision)
    except Exception as error:  # alembic raises several resolution error types
        raise UsageError(f"unknown revision {revision!r}: {error}") from None


def _require_walkable(script: ScriptDirectory, revision: str) -> None:
    """``X+N`` / ``X-N`` from a named revision (``head``, ``base``, an id): the N steps must exist.
    Relative to the database's own heads (``+N``), it is known only once connected."""
    match = _RELATIVE_TARGET.fullmatch(revision)
    if match is None or match["start"] is None:
        return
    steps = int(match["steps"])
    try:
        walked = relative_revision(script, match["start"], steps, match["branch"])
    except Exception as error:  # alembic raises several resolution error types
        raise UsageError(f"unknown revision {revision!r}: {error}") from None
    if walked is None:
        raise UsageError(
            f"relative revision {revision!r} goes past the end of the revision graph: there are not "
            f"{abs(steps)} revisions {'above' if steps > 0 else 'below'} {match['start']}"
        )


def split_range(revision: str, sql: bool, command: str) -> tuple[str | None, str]:
    """``FROM:TO`` as (FROM or None, TO); a range only with --sql."""
    if ":" not in revision:
        return None, revision
    if not sql:
        raise UsageError(f"a revision range ({revision}) is only allowed with --sql for {command}")
    start, _, destination = revision.partition(":")
    return start or None, destination


def stamp_range(revisions: str | tuple[str, ...], sql: bool) -> tuple[str | None, tuple[str, ...]]:
    """A stamp's revisions as (the --sql starting revision or None, the destinations)."""
    start: str | None = None
    destinations: list[str] = []
    for target in (revisions,) if isinstance(revisions, str) else tuple(revisions):
        first, destination = split_range(target, sql, "stamp")
        if first is not None and start not in (None, first):
            raise UsageError("stamp with --sql takes a single starting revision")
        start = first or start
        destinations.append(destination)
    return start, tuple(destinations)
