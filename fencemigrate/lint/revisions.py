"""The revision files as the lint reads them, never importing them: found the way Alembic finds
them, each read with ``ast`` (so reading is fast and a broken file is a finding, not a crash), the
graph they declare (ids, down_revisions, heads, cycles, order), and their
``# fencemigrate: allow RULE-ID because <reason>`` comments. A comment allows the rules it names
for the whole file; one without a reason (or naming no known rule) suppresses nothing and is
itself a finding."""

from __future__ import annotations

import ast
import hashlib
import io
import os
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from alembic.script import ScriptDirectory
from alembic.util import coerce_resource_to_filename

MARKER = "fencemigrate:"
_COMMENT = re.compile(r"#\s*fencemigrate:\s*(?P<body>.*)$")
_ALLOW = re.compile(r"allow\s+(?P<rules>[\w-]+(?:\s*,\s*[\w-]+)*)(?:\s+because\b(?P<reason>.*))?$", re.IGNORECASE)


@dataclass(frozen=True)
class Allow:
    """Rules (ids or names, as written) allowed in one file, with the reason and the comment's line."""

    rules: tuple[str, ...]
    reason: str
    line: int


@dataclass(frozen=True)
class BadAllow:
    """A ``fencemigrate:`` comment that suppresses nothing, and why."""

    line: int
    comment: str
    problem: str


def read_allows(source: str) -> tuple[list[Allow], list[BadAllow]]:
    """The allow comments of ``source`` (comments only: never text inside a string)."""
    allows: list[Allow] = []
    bad: list[BadAllow] = []
    if MARKER not in source:
        return allows, bad  # the common case, without tokenizing
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return allows, bad  # an unparsable file is reported as such
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        comment = _COMMENT.match(token.string)
        if comment is None:
            continue
        text, line = token.string.strip(), token.start[0]
        allow = _ALLOW.match(comment.group("body").strip())
        if allow is None:
            bad.append(BadAllow(line, text, "is not `# fencemigrate: allow RULE-ID because <reason>`"))
            continue
        rules = tuple(rule.strip() for rule in allow.group("rules").split(","))
        reason = (allow.group("reason") or "").strip()
        if not reason:
            bad.append(BadAllow(line, text, "gives no reason (`because <reason>`), so it suppresses nothing"))
            continue
        allows.append(Allow(rules, reason, line))
    return allows, bad


_LEADING_NUMBERS = re.compile(r"^[\W\d_]+")


@dataclass(frozen=True)
class RevisionFile:
    """A revision file and what the checks read from it.

    ``revision`` is None when the file cannot be read as a revision (``problem`` says why, at
    ``problem_line``); such a file takes no part in the revision graph.
    """

    path: Path
    display: str
    sha256: str
    module: ast.Module | None = None
    revision: str | None = None
    revision_line: int = 1
    down_revisions: tuple[str, ...] = ()
    down_revision_line: int = 1
    problem: str | None = None
    problem_line: int = 1
    allows: tuple[Allow, ...] = ()
    bad_allows: tuple[BadAllow, ...] = ()

    @property
    def slug(self) -> str:
        """The name the revision was given: the file name without its revision id and leading
        numbers or dates (``0043_add_invoice_currency.py`` -> ``add_invoice_currency``); empty
        when the file name has none (``file_template = %%(rev)s``)."""
        stem = self.path.stem
        if self.revision:
            stem = stem.replace(self.revision, "", 1)
        return _LEADING_NUMBERS.sub("", stem).strip("_-").lower()

    def function(self, name: str) -> ast.FunctionDef | None:
        """The module-level function ``name`` (``upgrade``, ``downgrade``), if any."""
        if self.module is None:
            return None
        for node in self.module.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return node
        return None


def read_revision_file(path: Path, display: str) -> RevisionFile:
    """Read ``path``; problems (bad encoding, syntax, no ``revision`` literal) are kept, not raised."""
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    try:
        source = data.decode("utf-8")
        module = ast.parse(source, filename=str(path))
    except UnicodeDecodeError:
        return RevisionFile(path, display, digest, problem="is not UTF-8 text")
    except SyntaxError as error:
        return RevisionFile(
            path, display, digest, problem=f"does not parse: {error.msg}", problem_line=error.lineno or 1
        )
    allows, bad_allows = read_allows(source)
    values = _module_assignments(module)
    revision, revision_line = values.get("revision", (None, 1))
    if not isinstance(revision, str) or not revision:
        return RevisionFile(
            path,
            display,
            digest,
            module,
            problem='has no `revision = "..."` string at module level',
            problem_line=revision_line,
            allows=tuple(allows),
            bad_allows=tuple(bad_allows),
        )
    down, down_line = values.get("down_revision", (None, revision_line))
    if down is None or down == "":
        down_revisions: tuple[str, ...] = ()
    elif isinstance(down, str):
        down_revisions = (down,)
    elif isinstance(down, (tuple, list)) and all(isinstance(item, str) and item for item in down):
        down_revisions = tuple(down)
    else:
        return RevisionFile(
            path,
            display,
            digest,
            module,
            problem="has a down_revision that is not a string, a tuple of strings or None",
            problem_line=down_line,
            allows=tuple(allows),
            bad_allows=tuple(bad_allows),
        )
    return RevisionFile(
        path,
        display,
        digest,
        module,
        revision=revision,
        revision_line=revision_line,
        down_revisions=down_revisions,
        down_revision_line=down_line,
        allows=tuple(allows),
        bad_allows=tuple(bad_allows),
    )


def _module_assignments(module: ast.Module) -> dict[str, tuple[object, int]]:
    """Literal values assigned to module-level names (``x = ...`` or ``x: T = ...``), with their lines.

    A value that is not a literal is kept as the marker ``...`` (Ellipsis).
    """
    found: dict[str, tuple[object, int]] = {}
    for node in module.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name):
            try:
                found[target.id] = (ast.literal_eval(value), node.lineno)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                found[target.id] = (..., node.lineno)
    return found


@dataclass(frozen=True)
class RevisionGraph:
    """Revisions by id (the first file by path when an id is used twice) and how they connect.

    ``generation`` is the length of the longest chain of known down_revisions below a revision:
    the later of two revisions is the one with the higher (generation, path).
    """

    files: dict[str, RevisionFile]
    parents: dict[str, tuple[str, ...]]
    heads: tuple[str, ...]
    generation: dict[str, int]
    cycles: tuple[tuple[str, ...], ...]

    def order_key(self, revision: RevisionFile) -> tuple[int, str]:
        """Sorts earlier revisions first."""
        return self.generation.get(revision.revision or "", 0), revision.display

    def ancestors(self, revisions: Iterable[str]) -> set[str]:
        """``revisions`` and every revision below them, through known down_revisions."""
        found: set[str] = set()
        pending = [revision for revision in revisions if revision in self.files]
        while pending:
            revision = pending.pop()
            if revision not in found:
                found.add(revision)
                pending += self.parents[revision]
        return found


def build_graph(files: Iterable[RevisionFile]) -> RevisionGraph:
    """The graph of the readable revision files."""
    by_id: dict[str, RevisionFile] = {}
    for revision_file in sorted(files, key=lambda item: item.display):
        if revision_file.revision is not None:
            by_id.setdefault(revision_file.revision, revision_file)
    parents = {
        revision: tuple(parent for parent in item.down_revisions if parent in by_id) for revision, item in by_id.items()
    }
    children = {parent for item in by_id.values() for parent in item.down_revisions}
    heads = tuple(sorted(revision for revision in by_id if revision not in children))
    generation, cycles = _generations(parents)
    return RevisionGraph(by_id, parents, heads, generation, cycles)


def _generations(parents: dict[str, tuple[str, ...]]) -> tuple[dict[str, int], tuple[tuple[str, ...], ...]]:
    """Longest known chain below each revision, and the cycles met on the way (depth-first, no recursion)."""
    generation: dict[str, int] = {}
    visiting: set[str] = set()
    cycles: list[tuple[str, ...]] = []
    for root in sorted(parents):
        if root in generation:
            continue
        path = [root]
        stack = [iter(parents[root])]
        visiting.add(root)
        while stack:
            parent = next(stack[-1], None)
            if parent is None:
                node = path.pop()
                stack.pop()
                visiting.discard(node)
                generation[node] = 1 + max((generation.get(p, -1) for p in parents[node]), default=-1)
            elif parent in visiting:
                cycles.append(tuple(path[path.index(parent) :]))
            elif parent not in generation:
                visiting.add(parent)
                path.append(parent)
                stack.append(iter(parents[parent]))
    return generation, tuple(cycles)


# Alembic's own pattern for source revision files (sourceless .pyc files are not read).
_REVISION_FILE = re.compile(r"(?!\.\#|__init__)(.*\.py)$")


@dataclass(frozen=True)
class RevisionDirectory:
    """The revision files found, and the version locations they were looked for in (for messages)."""

    files: tuple[RevisionFile, ...]
    locations: tuple[str, ...]


def read_directory(script: ScriptDirectory) -> RevisionDirectory:
    """Every revision file in the version locations (recursively with ``recursive_version_locations``)."""
    if script.version_locations:
        locations = [coerce_resource_to_filename(location) for location in script.version_locations]
    else:
        locations = [Path(script.dir, "versions")]
    seen: set[Path] = set()
    files: list[RevisionFile] = []
    for location in locations:
        for path in _python_files(location, script.recursive_version_locations):
            real = path.resolve()
            if real not in seen:
                seen.add(real)
                files.append(read_revision_file(real, display_path(real)))
    return RevisionDirectory(tuple(files), tuple(display_path(location.resolve()) for location in locations))


def display_path(path: Path) -> str:
    """``path`` relative to the current directory when it is inside it (as CI annotations need)."""
    try:
        return path.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def _python_files(location: Path, recursive: bool) -> list[Path]:
    if not location.is_dir():
        return []
    found: list[Path] = []
    for root, directories, names in os.walk(location):
        directories[:] = sorted(name for name in directories if name != "__pycache__") if recursive else []
        found += [Path(root, name) for name in sorted(names) if _REVISION_FILE.match(name)]
    return found
