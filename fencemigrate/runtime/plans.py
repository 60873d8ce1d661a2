"""The migration steps each fenced command runs, computed from the current heads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.exc import SQLAlchemyError

from ..alembic_internals import downgrade_steps, parent_revisions, stamp_steps, upgrade_steps
from ..connections import close, probe_connection
from ..errors import AppliedTextNotRecorded, DatabaseAhead, FencemigrateError, RevisionFailed, UsageError
from ..fence.ledger import covered, purge_steps
from .request import Planner
from .revisions import declared_heads, has_revision_files


class NothingToDoProbe:
    """Answers "is there nothing left to do?" before a run takes its lease (or, in pre-check mode,
    the named lock), and while it waits for the lease, as often as asked.

    Reads the heads on one autocommit connection of its own, kept for the whole wait (never the
    migration's connection, whose transaction env.py has yet to begin; never taking SQLite's
    write lock), under the run's version table. False when they cannot be read: keep waiting (and
    read on a new connection the next time).
    ``settled(heads)`` answers first when it can (True or False), without planning.
    """

    def __init__(
        self,
        plan: Planner,
        context: MigrationContext,
        settled: Callable[[tuple[str, ...]], bool | None] | None = None,
    ) -> None:
        assert context.connection is not None
        self._plan = plan
        self._settled = settled
        self._context = context
        self._engine = context.connection.engine
        self._probe: MigrationContext | None = None
        self.resolved_from: tuple[str, ...] | None = None  # the heads the first question planned from

    def __call__(self) -> bool:
        return self._answer(resolve=False)

    def _answer(self, resolve: bool) -> bool:
        """Nothing left to do at the heads read now; with ``resolve``, the plan is made even when
        ``settled`` says there is work, so that its target is resolved."""
        try:
            heads = self.reads().get_current_heads()
        except SQLAlchemyError:
            self.close()  # a lost connection (killed, server restarted): open a new one next time
            return False
        settled = self._settled(tuple(heads)) if self._settled is not None else None
        if settled or (settled is False and not resolve):
            return settled
        steps = self._plan(tuple(heads), self._context)[0]
        if resolve:
            self.resolved_from = tuple(heads)
        return not steps

    def reads(self) -> MigrationContext:
        """The probe's own migration context (opened on first need), on its autocommit connection."""
        if self._probe is None:
            connection = probe_connection(self._engine)
            opts = {
                "version_table": self._context.version_table,
                "version_table_schema": self._context.version_table_schema,
            }
            self._probe = MigrationContext.configure(connection, opts=opts)
        return self._probe

    def nothing_to_do_now(self) -> bool:
        """The first question, before anything is written: True only when the plan from the heads
        read now has no steps. The plan is made whenever there may be work (also for a database
        without heads yet), so a target it refuses as bad usage (an unknown revision, ``head``
        among several heads, an ambiguous walk, a relative revision past the end of the graph, one
        not above the heads) is refused now, before any grant, install or lock (UsageError), and
        so are heads the revision files do not have (DatabaseAhead: the database moved on) and a
        rollback no known downgrade() can make (AppliedTextNotRecorded, or RevisionFailed: the
        applied text cannot be loaded); another refusal is not answered here: the run goes on as
        with work to do, and is refused as before."""
        try:
            return self._answer(resolve=True)
        except (UsageError, DatabaseAhead, AppliedTextNotRecorded, RevisionFailed):
            raise
        except FencemigrateError:
            return False

    def close(self) -> None:
        """Close the probe's connection (invalidated when its session is gone: :mod:`..connections`)."""
        if self._probe is not None and self._probe.connection is not None:
            close(self._probe.connection)
        self._probe = None


def _as_usage_errors(plan: Planner) -> Planner:
    """Alembic's resolution errors (unknown or unreachable revisions) are bad input."""

    def planner(heads: tuple[str, ...], context: MigrationContext) -> tuple[list[Any], list[str]]:
        try:
            return plan(heads, context)
        except CommandError as error:
            raise UsageError(str(error)) from None

    return planner


def upgrade_settled(script: ScriptDirectory, revision: str, heads: tuple[str, ...]) -> bool | None:
    """Whether upgrading a database at ``heads`` to ``revision`` has nothing to do, as far as the
    revision files tell without being imported (:func:`.revisions.declared_heads`): False with no heads yet
    (when there are revision files), True at the heads the files declare, else None (only
    Alembic's revision map can tell)."""
    if revision not in ("head", "heads"):
        return None
    if not heads:
        return False if has_revision_files(script) else None
    declared = declared_heads(script)
    if declared is None or (revision == "head" and len(declared) != 1):
        return None
    return True if declared == set(heads) else None


def upgrade_plan(script: ScriptDirectory, revision: str) -> Planner:
    """Steps from the current heads up to ``revision``; none, without loading the revision map,
    when the database is at the heads the files declare (a database without heads yet never
    reads them: it has everything to do)."""

    def plan(heads: tuple[str, ...], _: MigrationContext) -> tuple[list[Any], list[str]]:
        if heads and upgrade_settled(script, revision, heads):
            return [], []
        try:
            return upgrade_steps(script, revision, heads), []
        except AssertionError:  # Alembic's is_revision(): the target resolved to nothing above base
            raise UsageError(
                f"{revision!r} is not above the current heads ({', '.join(heads) or 'none'}): "
                "nothing to upgrade to (use downgrade to go down)"
            ) from None

    return _as_usage_errors(plan)


def downgrade_plan(script: ScriptDirectory, revision: str) -> Planner:
    """Steps from the current heads down to ``revision``."""

    def plan(heads: tuple[str, ...], _: MigrationContext) -> tuple[list[Any], list[str]]:
        return downgrade_steps(script, revision, heads), []

    return _as_usage_errors(plan)


def stamp_plan(script: ScriptDirectory, revisions: tuple[str, ...], purge_schema: str | None = None) -> Planner:
    """Stamp steps that move the version table to ``revisions`` without running them; with
    ``purge_schema`` (``stamp --purge``; the fence schema), first steps that empty the version
    table and the ledger (:mod:`.purge`), then the stamp from base."""

    def plan(heads: tuple[str, ...], context: MigrationContext) -> tuple[list[Any], list[str]]:
        if purge_schema is None:
            return stamp_steps(script, revisions, heads), []
        return [*purge_steps(heads, context, purge_schema), *stamp_steps(script, revisions, ())], []

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
        parents = parent_revisions(target)
        if len(parents) > 1:
            raise UsageError(f"cannot reapply {target.revision}: it is a merge point; downgrade and upgrade explicitly")
        head = branch_heads[0]
        below = parents[0] if parents else "base"
        down = downgrade_steps(script, below, head)
        up = upgrade_steps(script, head, parents)
        return down + up, [step.revision.revision for step in down]

    return _as_usage_errors(plan)
