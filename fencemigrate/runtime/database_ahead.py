"""A database whose heads the run's revision files do not have: a newer holder applied them, and
the run learns it as the news that the database moved on (FENCED, with who applied what, from the
ledger), before any grant when it plans from the heads read as env.py connects."""

from __future__ import annotations

from typing import Any

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.exc import SQLAlchemyError

from ..connections import close, probe_connection
from ..errors import AppliedBy, DatabaseAhead, UsageError
from ..fence.ledger import read_applied_source
from .request import FenceSettings, Planner


def refusing_missing_heads(plan: Planner, script: ScriptDirectory, settings: FenceSettings) -> Planner:
    """``plan``, with a refusal of heads the revision files do not have turned into DatabaseAhead.
    Checked only once ``plan`` has refused (Alembic cannot plan from a revision it cannot locate), so
    a plan that needs no revision map still loads none."""

    def planner(heads: tuple[str, ...], context: MigrationContext) -> tuple[list[Any], list[str]]:
        try:
            return plan(heads, context)
        except UsageError:
            missing = [head for head in heads if not _in_files(script, head)]
            if not missing:
                raise
            applied = _applied_by(context, settings.schema, missing)
            raise DatabaseAhead(settings.resource, settings.tokens.token, applied) from None

    return planner


def _in_files(script: ScriptDirectory, revision: str) -> bool:
    try:
        return script.revision_map.get_revision(revision) is not None
    except Exception:  # alembic raises several resolution error types
        return False


def _applied_by(context: MigrationContext, schema: str, revisions: list[str]) -> tuple[AppliedBy, ...]:
    """Who applied each of ``revisions``, read from the ledger on a connection of its own (env.py's
    may be in a transaction the refusal rolls back, or not yet in one); nobody when it cannot be read."""
    unknown = tuple(AppliedBy(revision) for revision in revisions)
    if context.connection is None:
        return unknown  # --sql: no database to read
    connection = probe_connection(context.connection.engine)
    try:
        opts = {"version_table": context.version_table, "version_table_schema": context.version_table_schema}
        probe = MigrationContext.configure(connection, opts=opts)
        rows = [read_applied_source(probe, schema, revision) for revision in revisions]
    except SQLAlchemyError:
        return unknown
    finally:
        close(connection)
    return tuple(
        AppliedBy(revision) if row is None else AppliedBy(revision, row.holder, row.token, row.applied_at)
        for revision, row in zip(revisions, rows, strict=True)
    )
