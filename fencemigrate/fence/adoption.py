"""Adopting a database that plain Alembic migrated: when it is first fenced, the revisions its
version table applies (its heads and every revision below them) go into the ledger as adopted.

An adopted row says the revision was applied before fencing, by no token: ``method`` 'adopt',
``applied_token`` 0, with its file's sha256 and text when the file is there (a later downgrade can
run what was applied). One ADOPT event tells it, with the revisions in its detail. It happens in the
transaction that fences the database (``install``, or the first fenced run's own), under a lock
(the ``adoption_lock`` statement, taken only while the ledger has no row of the version table, which is
checked again under it): concurrent first runs adopt once, and a run that finds ledger rows takes
no lock at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

from ..alembic_internals import revisions_below, script_by_id
from ..dialects import dialect_for, installed_version
from ..dialects.statements import statement
from .ledger import Ledger, version_table_name


@dataclass(frozen=True)
class Adoption:
    """What a first fenced run (or ``install``) adopted: ``revisions``, base first; ``missing``, those
    of them whose revision file is gone (nothing is known below them, so nothing below them was adopted)."""

    version_table: str
    revisions: list[str]
    missing: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """JSON form: in ``--json`` outputs and the ADOPT event's detail."""
        return {"version_table": self.version_table, "revisions": self.revisions, "missing_files": self.missing}

    def lines(self) -> list[str]:
        """What the command prints about it."""
        lines = [
            f"adopted {len(self.revisions)} revision{'s' if len(self.revisions) != 1 else ''} that "
            f"{self.version_table} applied before fencing (ledger rows with no token): {', '.join(self.revisions)}"
        ]
        if self.missing:
            lines.append(
                f"  no revision file for {', '.join(self.missing)}: adopted without its text; the revisions "
                "below it are not known and were not adopted"
            )
        return lines


def adopt_applied_history(context: MigrationContext, quoted_schema: str, resource: str, holder: str) -> Adoption | None:
    """Adopt what the version table applies, in the caller's transaction, if the ledger has no row of
    it yet; None when there is nothing to adopt (no fence schema, an empty version table, or a ledger
    that has rows of it already)."""
    connection = context.connection
    assert connection is not None and context.script is not None
    if installed_version(connection, quoted_schema) is None:
        return None
    heads = context.get_current_heads()
    if not heads:
        return None
    dialect = connection.dialect.name
    version_table = version_table_name(context)
    if _ledger_has_rows(connection, quoted_schema, dialect, version_table, "ledger_seen"):
        return None  # the usual case, every run after the first: no lock taken, none waited for
    connection.execute(statement("adoption_lock", quoted_schema, dialect))
    if _ledger_has_rows(connection, quoted_schema, dialect, version_table, "ledger_exists"):
        return None  # a concurrent first run adopted while this one waited for the lock
    revisions, missing = applied_history(context.script, heads)
    adoption = Adoption(version_table, [revision for revision, _ in revisions], missing)
    calls = dialect_for(context).fence_calls(context, quoted_schema)
    Ledger(context, quoted_schema, calls, resource, holder).record_adopted(revisions, adoption.as_json())
    return adoption


def _ledger_has_rows(connection: Connection, quoted_schema: str, dialect: str, version_table: str, query: str) -> bool:
    found = connection.execute(statement(query, quoted_schema, dialect), {"version_table": version_table})
    return found.first() is not None


def applied_history(script: ScriptDirectory, heads: tuple[str, ...]) -> tuple[list[tuple[str, str | None]], list[str]]:
    """The revisions ``heads`` apply, base first, each with its file's path (None: no file), and the
    ids among them that have no file (whose own ancestors cannot be known)."""
    found: dict[str, str | None] = {}
    order: list[str] = []
    missing: list[str] = []
    # Depth first, each revision listed after everything below it; a stack, not recursion: a long
    # history is deeper than Python's recursion limit.
    stack: list[tuple[str, bool]] = [(head, False) for head in sorted(heads, reverse=True)]
    while stack:
        revision_id, below_done = stack.pop()
        if below_done:
            order.append(revision_id)
            continue
        if revision_id in found:
            continue
        try:
            revision = script_by_id(script, revision_id)
        except Exception:  # noqa: BLE001 - a revision map Alembic cannot build (a file gone from below a revision)
            revision = None
        found[revision_id] = None if revision is None else revision.path
        stack.append((revision_id, True))
        if revision is None:
            missing.append(revision_id)
        else:
            stack.extend((below, False) for below in reversed(revisions_below(revision)) if below not in found)
    return [(revision, found[revision]) for revision in order], sorted(missing)
