"""The migration steps each fenced command runs, computed from the current heads."""

from __future__ import annotations

from typing import Any

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.exc import SQLAlchemyError

from ..errors import UsageError
from .fenced_run import Planner
from .ledger_changes import covered


class NothingToDoProbe:
    """Answers "is there nothing left to do?" while a run waits for its lease, as often as asked.

    Reads the heads on one autocommit connection of its own, kept for the whole wait (never the
    migration's connection, whose transaction env.py has yet to begin; never taking SQLite's
    write lock), under the run's version table. False when they cannot be read: keep waiting.
    """

    def __init__(self, plan: Planner, context: MigrationContext) -> None:
        assert context.connection is not None
        self._plan = plan
        self._context = context
        self._engine = context.connection.engine
        self._probe: MigrationContext | None = None

    def __call__(self) -> bool:
        try:
            if self._probe is None:
                connection = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
                opts = {
                    "version_table": self._context.version_table,
                    "version_table_schema": self._context.version_table_schema,
                }
                self._probe = MigrationContext.configure(connection, opts=opts)
            heads = self._probe.get_current_heads()
        except SQLAlchemyError:
            return False
        return not self._plan(tuple(heads), self._context)[0]

    def close(self) -> None:
        """Close the probe's connection."""
        if self._probe is not None and self._probe.connection is not None:
            self._probe.connection.close()
        self._probe = None


def _as_usage_errors(plan: Planner) -> Planner:
    """Alembic's resolution errors (unknown or unreachable revisions) are bad input."""

    def planner(heads: tuple[str, ...], context: MigrationContext) -> tuple[list[Any], list[str]]:
        try:
            return plan(heads, context)
        except CommandError as error:
            raise UsageError(str(error)) from None

    return planner


# ScriptDirectory._upgrade_revs/_downgrade_revs are annotated with str, but alembic's own
# command.py passes the heads tuple, as we do.


def upgrade_plan(script: ScriptDirectory, revision: str) -> Planner:
    """Steps from the current heads up to ``revision``."""

    def plan(heads: tuple[str, ...], _: MigrationContext) -> tuple[list[Any], list[str]]:
        return list(script._upgrade_revs(revision, heads)), []  # type: ignore[arg-type]

    return _as_usage_errors(plan)


def downgrade_plan(script: ScriptDirectory, revision: str) -> Planner:
    """Steps from the current heads down to ``revision``."""

    def plan(heads: tuple[str, ...], _: MigrationContext) -> tuple[list[Any], list[str]]:
        return list(script._downgrade_revs(revision, heads)), []  # type: ignore[arg-type]

    return _as_usage_errors(plan)


def stamp_plan(script: ScriptDirectory, revisions: tuple[str, ...]) -> Planner:
    """Stamp steps that move the version table to ``revisions`` without running them."""

    def plan(heads: tuple[str, ...], _: MigrationContext) -> tuple[list[Any], list[str]]:
        return list(script._stamp_revs(revisions, heads)), []

    return _as_usage_errors(plan)


def reapply_plan(script: ScriptDirectory, revision: str) -> Planner:
    """Roll back ``revision`` and whatever sits above it on its branch, then apply them again."""

    def plan(heads: tuple[str, ...], _: MigrationContext) -> tuple[list[Any], list[str]]:
        target = script.get_revision(revision)
        if target is None:
            raise UsageError(f"cannot reapply {revision!r}: it names no revision")
        branch_heads = [head for head in heads if target.revision in covered(script, (head,))]
        if not branch_heads:
            raise UsageError(f"cannot reapply {target.revision}: it is not applied to this database")
        if len(branch_heads) > 1:
            raise UsageError(
                f"cannot reapply {target.revision}: more than one applied head sits above it "
                f"({', '.join(branch_heads)}); downgrade and upgrade each branch explicitly"
            )
        parents = target._normalized_down_revisions
        if len(parents) > 1:
            raise UsageError(
                f"cannot reapply {target.revision}: it is a merge point; "
                "downgrade and upgrade explicitly"
            )
        head = branch_heads[0]
        below = parents[0] if parents else "base"
        down = list(script._downgrade_revs(below, head))
        up = list(script._upgrade_revs(head, tuple(parents)))  # type: ignore[arg-type]
        return down + up, [step.revision.revision for step in down]

    return _as_usage_errors(plan)
