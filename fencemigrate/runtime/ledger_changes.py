"""Which ledger rows a migration step adds and removes."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

from alembic.runtime.migration import MigrationContext, RevisionStep
from alembic.script import ScriptDirectory

from .purge import PurgeStep

LedgerMethod = Literal["upgrade", "stamp"]
"""How a revision came to be recorded: it ran, or it was stamped."""


@dataclass(frozen=True)
class LedgerChange:
    """Revisions that become applied, and revisions that stop being applied, with a step."""

    method: LedgerMethod
    added: tuple[str, ...]
    removed: tuple[str, ...]
    paths: dict[str, str] = field(default_factory=dict)  # revision files already at hand
    detail: dict[str, Any] | None = None  # the ROLLBACK event's, of a downgrade that ran the applied text


def version_table_name(context: MigrationContext) -> str:
    """Alembic's version table as the ledger keys its rows: ``schema.table``, or ``table``."""
    schema = context.version_table_schema
    return f"{schema}.{context.version_table}" if schema else context.version_table


@dataclass(frozen=True)
class RevisionFile:
    """A revision file as the ledger records it: its sha256 and its text, from one read of its bytes."""

    sha256: str
    text: str | None  # the bytes decoded as UTF-8; None when they are not UTF-8 text (nothing to show then)


def read_revision_file(path: str) -> RevisionFile:
    """Read a revision file once, as it is on disk now: the sha256 of its bytes and their text."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and "\x00" in text:  # not text (a sourceless .pyc); PostgreSQL's text cannot hold it
        text = None
    return RevisionFile(hashlib.sha256(data).hexdigest(), text)


def covered(script: ScriptDirectory, revisions: tuple[str, ...]) -> set[str]:
    """``revisions`` and all their ancestors."""
    if not revisions:
        return set()
    return {sc.revision for sc in script.revision_map.iterate_revisions(revisions, "base")}


def ledger_change(script: ScriptDirectory, step: Any, detail: dict[str, Any] | None = None) -> LedgerChange:
    """The ledger rows that ``step`` adds and removes (``detail``: its ROLLBACK event's)."""
    if isinstance(step, RevisionStep):
        revision = (step.revision.revision,)
        if step.is_upgrade:
            return LedgerChange("upgrade", added=revision, removed=(), paths={revision[0]: step.revision.path})
        return LedgerChange("upgrade", added=(), removed=revision, detail=detail)
    if isinstance(step, PurgeStep):  # its version row may name no revision file
        return LedgerChange("stamp", added=(), removed=step.ledger_removed())
    before = covered(script, step.from_)
    after = covered(script, step.to_)
    return LedgerChange("stamp", added=tuple(sorted(after - before)), removed=tuple(sorted(before - after)))
