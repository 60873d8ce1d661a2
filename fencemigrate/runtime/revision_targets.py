"""The revisions a command names, checked against the revision files before the database is touched."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError

from ..alembic_internals import alembic_wording, relative_revision
from ..errors import UsageError
from .declared_heads import declared_heads, declared_revisions

RELATIVE = re.compile(r"[+-]\d+$")
_RELATIVE_TARGET = re.compile(r"(?:(?P<branch>.+?)@)?(?P<start>\w+)?(?P<steps>[+-]\d+)")  # as Alembic reads it


def script_directory(config: Config) -> ScriptDirectory:
    """The project's revision files; a configuration Alembic refuses is a UsageError."""
    try:
        return ScriptDirectory.from_config(config)
    except CommandError as error:
        raise UsageError(str(error)) from None


def require_known(script: ScriptDirectory, revision: str | None, stamp: bool = False) -> None:
    """Reject an unknown revision, or a relative one that walks off the revision graph, before
    the database is touched, in Alembic's words (``Can't locate revision identified by 'x'``;
    ``head`` among several heads too, whatever the database has, but for ``stamp``, which Alembic
    words otherwise: its plan refuses it, still before any grant, install or lock)."""
    if revision in (None, "base", "heads") or (stamp and revision == "head"):
        return
    if _declared(script, revision):
        return  # known from the files' text, no revision module imported (runtime/declared_heads.py)
    with alembic_words(script):
        if RELATIVE.search(revision or ""):
            _require_walkable(script, revision or "")
        else:
            script.get_revisions(revision)


def _declared(script: ScriptDirectory, revision: str | None) -> bool:
    """``head`` with a single head, or a full revision id, as the revision files declare them."""
    if revision == "head":
        heads = declared_heads(script)
        return heads is not None and len(heads) == 1
    revisions = declared_revisions(script)
    return revisions is not None and revision in revisions


@contextmanager
def alembic_words(script: ScriptDirectory) -> Iterator[None]:
    """Alembic's refusal of a revision a command names (unknown, ambiguous, several heads, a
    range that is no range) as a UsageError, in the words Alembic's own command prints."""
    try:
        with alembic_wording(script):
            yield
    except CommandError as error:
        raise UsageError(str(error)) from None


def _require_walkable(script: ScriptDirectory, revision: str) -> None:
    """``X+N`` / ``X-N`` from a named revision (``head``, ``base``, an id): the N steps must exist.
    Relative to the database's own heads (``+N``), it is known only once the heads are read."""
    match = _RELATIVE_TARGET.fullmatch(revision)
    if match is None or match["start"] is None:
        return
    steps = int(match["steps"])
    walked = relative_revision(script, match["start"], steps, match["branch"])
    if walked is None:
        raise UsageError(
            f"relative revision {revision!r} goes past the end of the revision graph: there are not "
            f"{abs(steps)} revisions {'above' if steps > 0 else 'below'} {match['start']}"
        )


def relative_to_heads(revision: str | tuple[str, ...]) -> bool:
    """Whether ``revision`` counts from the database's heads (``-1``, ``+2``, ``main@-1``), not
    from a revision it names (``head-1``, ``base+2``)."""
    match = _RELATIVE_TARGET.fullmatch(revision) if isinstance(revision, str) else None
    return match is not None and match["start"] is None


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
