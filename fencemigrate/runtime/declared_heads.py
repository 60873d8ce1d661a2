"""The heads a project's revision files declare, read as text: no revision module is imported.

Alembic learns the heads by importing every revision file. A run whose database already sits at
the heads has nothing to upgrade, and this lets it find that out without the imports: the runners
that queued behind the one that did the work, and every deploy after the first.

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
from graphlib import CycleError, TopologicalSorter
from weakref import WeakKeyDictionary

from alembic.script import ScriptDirectory

from ..alembic_internals import version_directories

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
