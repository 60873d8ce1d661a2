"""``--expect-heads``: the heads a writer planned from, which the database must have when it claims.

A plan is made from the heads the writer last read; the claim's transaction reads them again
(one SELECT of the version table, through the connection that claimed) and refuses with FENCED
unless they are exactly the expected ones, so no other fenced writer can move them between the
check and the DDL. Revisions are given as full ids or unique prefixes, resolved against the
revision files as Alembic resolves them; ``base`` means no revision applied.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from alembic.script import ScriptDirectory
from alembic.util import CommandError

from ..errors import Fenced, UsageError
from .revisions import declared_revisions

BASE = "base"
_PREFIX_MIN_ID = 4  # Alembic matches a prefix only against ids of at least four characters


@dataclass(frozen=True)
class ExpectedHeads:
    """The exact set of version-table rows a run requires when it claims (empty: base)."""

    revisions: frozenset[str]

    def require(self, heads: Iterable[str], resource: str, token: int) -> None:
        """FENCED (reason "heads are X, you planned from Y") unless ``heads`` are the expected ones."""
        found = frozenset(heads)
        if found != self.revisions:
            reason = f"heads are {listed(found)}, you planned from {listed(self.revisions)}"
            raise Fenced(resource, token, None, reason)


class ResolvedFrom:
    """The heads a revision relative to the database's own (``-1``, ``+2``, ``main@-1``) was
    resolved from, read before the run's lease or lock; the run writes only from those heads
    (FENCED otherwise, as with ``--expect-heads``): the same words from other heads would name
    another revision. Kept across the run's attempts: the first resolution is the one the caller made."""

    def __init__(self) -> None:
        self.heads: ExpectedHeads | None = None

    def pin(self, heads: Iterable[str]) -> None:
        """Resolved from ``heads`` (once: a later attempt keeps the first)."""
        if self.heads is None:
            self.heads = ExpectedHeads(frozenset(heads))


def listed(revisions: Iterable[str]) -> str:
    """Revision ids sorted and comma-separated, as ``--expect-heads`` takes them; ``base`` for none."""
    return ",".join(sorted(revisions)) or BASE


def expected_heads(script: ScriptDirectory, given: Sequence[str]) -> ExpectedHeads:
    """``given`` (ids, unique prefixes, or ``base`` alone) as full revision ids of ``script``;
    a UsageError for an empty, unknown or ambiguous one, before anything is touched."""
    if isinstance(given, str):
        raise TypeError(f"expect_heads takes a sequence of revision ids, not the string {given!r}")
    names = [name.strip() for name in given]
    if not names or not all(names):
        raise UsageError("--expect-heads takes revision ids separated by commas, or base; an empty one was given")
    if BASE in names:
        if len(names) > 1:
            raise UsageError("--expect-heads base means no revision applied: it cannot be given with revisions")
        return ExpectedHeads(frozenset())
    known = _revision_ids(script)
    return ExpectedHeads(frozenset(_resolved(known, name) for name in names))


def _resolved(known: frozenset[str], name: str) -> str:
    """The id ``name`` names: itself, or the one id it is a prefix of (Alembic's rule)."""
    if name in known:
        return name
    matches = sorted(revision for revision in known if len(revision) >= _PREFIX_MIN_ID and revision.startswith(name))
    if not matches:
        raise UsageError(f"--expect-heads: no revision {name!r} in the revision files (nor one that starts with it)")
    if len(matches) > 1:
        shown = ", ".join(matches[:3]) + (", ..." if len(matches) > 3 else "")
        raise UsageError(f"--expect-heads: {name!r} is ambiguous, several revisions start with it ({shown})")
    return matches[0]


def _revision_ids(script: ScriptDirectory) -> frozenset[str]:
    """Every revision id of the files: read as text when they allow it (no revision module is
    imported), from Alembic's revision map otherwise."""
    declared = declared_revisions(script)
    if declared is not None:
        return declared
    try:
        return frozenset(revision.revision for revision in script.walk_revisions())
    except CommandError as error:
        raise UsageError(str(error)) from None
