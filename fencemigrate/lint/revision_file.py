"""One revision file read with ``ast``: never imported, so reading it is fast and a broken file
is a finding, not a crash."""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from .suppressions import Allow, BadAllow, read_allows

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
