"""The revisions a command names, checked against the revision files before the database is touched;
and the heads a project's revision files declare, read as text: no revision module is imported.

Alembic learns the heads by importing every revision file. A run whose database already sits at
the heads has nothing to upgrade, and :func:`declared_heads` lets it find that out without the
imports: the runners that queued behind the one that did the work, and every deploy after the
first.

Only files as ``alembic revision`` writes them qualify: ``revision``, ``down_revision`` and
``depends_on`` each assigned once, at the start of a line, to a literal (``depends_on`` empty), and
those names found nowhere else but in comments and the module docstring. Anything else (another
binding or any other use of those names, ``globals()``, ``setattr``, ``exec``, ``import *``...), a
duplicate id, an unknown down revision, a cycle, ``sourceless`` or ``recursive_version_locations``:
the answer is None and the caller loads Alembic's revision map as usual.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from graphlib import CycleError, TopologicalSorter
from weakref import WeakKeyDictionary

from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util import CommandError

from ..alembic_internals import alembic_wording, relative_revision, version_directories
from ..errors import UsageError

# Alembic's own rule for which files of a version location are revisions
# (alembic.script.base._only_source_rev_file): *.py, but not __init__.py nor editor lock files.
_REVISION_FILE = re.compile(r"(?!\.\#|__init__)(.*\.py)$")
_NAME = re.compile(r"\b(revision|down_revision|depends_on)\b")
# name [: annotation] = value; a tuple or list value may span lines (merge revisions).
_DECLARATION = re.compile(
    r"^(revision|down_revision|depends_on)[ \t]*(?::[^=\n]*)?=(?!=)[ \t]*(\([^()]*\)|\[[^\[\]]*\]|[^\n]*)",
    re.MULTILINE,
)
_DOCSTRING_START = re.compile(r"\s*(?:#[^\n]*\n\s*)*(\"\"\"|\'\'\')")
_DYNAMIC = ("globals(", "setattr(", "exec(", "vars(", "__dict__", "sys.modules", "import *")

_already_read: WeakKeyDictionary[ScriptDirectory, dict[str, tuple[str, ...]] | None] = WeakKeyDictionary()


def declared_heads(script: ScriptDirectory) -> frozenset[str] | None:
    """The heads of the revision graph the files declare, or None when not sure (see the module)."""
    parents = _declared_parents(script)
    if parents is None:
        return None
    below = {parent for ids in parents.values() for parent in ids}
    return frozenset(revision for revision in parents if revision not in below)


def declared_revisions(script: ScriptDirectory) -> frozenset[str] | None:
    """The ids of every revision the files declare, or None when not sure (see the module)."""
    parents = _declared_parents(script)
    return None if parents is None else frozenset(parents)


def _declared_parents(script: ScriptDirectory) -> dict[str, tuple[str, ...]] | None:
    """Each declared revision's down revisions; read once per ScriptDirectory, as Alembic loads
    its revision map once."""
    if script not in _already_read:
        _already_read[script] = _read_parents(script)
    return _already_read[script]


def has_revision_files(script: ScriptDirectory) -> bool | None:
    """Whether a version location holds a file Alembic would load as a revision (none is read);
    None under ``sourceless`` or ``recursive_version_locations``."""
    paths = _revision_paths(script)
    return None if paths is None else bool(paths)


def _read_parents(script: ScriptDirectory) -> dict[str, tuple[str, ...]] | None:
    paths = _revision_paths(script)
    if not paths:
        return None
    parents: dict[str, tuple[str, ...]] = {}
    for path in paths:
        declared = _read(path)
        if declared is None or declared[0] in parents:
            return None
        parents[declared[0]] = declared[1]
    return parents if _is_acyclic_and_closed(parents) else None


def _revision_paths(script: ScriptDirectory) -> list[str] | None:
    """The files Alembic would load as revisions, in its order; None when not listed as plainly."""
    if script.sourceless or script.recursive_version_locations:
        return None
    paths: list[str] = []
    for location in version_directories(script):
        if location.is_dir():
            with os.scandir(location) as entries:
                paths += sorted(entry.path for entry in entries if _REVISION_FILE.match(entry.name) and entry.is_file())
    return paths


def _read(path: str) -> tuple[str, tuple[str, ...]] | None:
    """(revision, down revisions) as the file's text assigns them, or None."""
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if any(marker in text for marker in _DYNAMIC):
        return None
    declarations = list(_DECLARATION.finditer(text))
    if not _used_only_where_declared(text, {match.start() for match in declarations}):
        return None
    values: dict[str, object] = {}
    for match in declarations:
        name = match.group(1)
        if name in values:
            return None
        try:
            values[name] = ast.literal_eval(match.group(2).strip())  # a trailing comment is fine
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    # No down_revision at all is ``...``: Alembic fails on such a file, so this answer is None.
    revision, down, depends = values.get("revision"), values.get("down_revision", ...), values.get("depends_on")
    if not isinstance(revision, str) or not revision or depends not in (None, (), []):
        return None
    if down is None:
        return revision, ()
    if isinstance(down, str) and down:  # Alembic takes "" for the id of a revision
        return revision, (down,)
    if isinstance(down, (tuple, list)) and all(isinstance(item, str) and item for item in down):
        return revision, tuple(down)
    return None


def _used_only_where_declared(text: str, declared_at: set[int]) -> bool:
    """The names occur only as declarations, in the module docstring and in comments."""
    opening = _DOCSTRING_START.match(text)
    docstring_end = text.find(opening.group(1), opening.end()) if opening else -1
    for hit in _NAME.finditer(text):
        position = hit.start()
        if position in declared_at or position < docstring_end:
            continue
        before = text[text.rfind("\n", 0, position) + 1 : position]
        if "#" in before and not any(quote in before for quote in "'\""):
            continue
        return False
    return True


def _is_acyclic_and_closed(parents: dict[str, tuple[str, ...]]) -> bool:
    """Every down revision is a known revision and no revision is its own ancestor."""
    if any(parent not in parents for ids in parents.values() for parent in ids):
        return False
    try:
        TopologicalSorter(parents).prepare()
    except CycleError:
        return False
    return True


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
        return  # known from the files' text, no revision module imported (runtime/revisions.py)
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
