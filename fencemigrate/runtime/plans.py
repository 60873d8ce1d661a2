"""The migration steps each fenced command runs, computed from the current heads, and what
refuses a plan.

A command that the database's current state makes invalid, run under a superseded token, is
FENCED rather than bad usage: the writer's news is that its lease is stale, not that its command
is wrong (``reapply r02`` after a newer holder rolled r02 back, ``downgrade r01`` below r01). A run
with nothing to do, which claims nothing, is refused here as its claim would refuse it: under a
superseded token, or a token its resource's lease service never issued.

A database whose heads the run's revision files do not have: a newer holder applied them, and
the run learns it as the news that the database moved on (FENCED, with who applied what, from the
ledger), before any grant when it plans from the heads read as env.py connects.

Each step Alembic runs is a :class:`FencedStep`, a proxy whose migration function runs under the
fence (the run's ``execute_step``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.exc import SQLAlchemyError

from ..alembic_internals import downgrade_steps, parent_revisions, stamp_steps, upgrade_steps
from ..connections import close, probe_connection
from ..dialects import installed_version
from ..dialects.statements import statement
from ..errors import (
    AppliedBy,
    AppliedTextNotRecorded,
    DatabaseAhead,
    FencemigrateError,
    RevisionFailed,
    TokenRequired,
    UsageError,
    refuse_token,
)
from ..fence.ledger import covered, purge_steps, read_applied_source
from .request import Claimant, Identity, Planner
from .revisions import declared_heads, has_revision_files

if TYPE_CHECKING:
    from .fenced_run import FencedRun
    from .precheck_run import PrecheckRun
    from .precheck_script import PrecheckScript
    from .request import Planner


class FencedStep:
    """Behaves as the wrapped ``RevisionStep``/``StampStep``; only ``migration_fn`` differs."""

    def __init__(self, step: Any, run: FencedRun | PrecheckRun | PrecheckScript) -> None:
        self._step = step
        original: Callable[..., None] = step.migration_fn

        @functools.wraps(original)
        def migration_fn(**kw: Any) -> None:
            run.execute_step(step, original, kw)

        self.migration_fn = migration_fn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._step, name)

    def __str__(self) -> str:
        return str(self._step)


def plan_or_fenced(
    planner: Planner, claimant: Claimant, heads: tuple[str, ...], context: MigrationContext
) -> tuple[list[Any], list[str]]:
    """``planner``'s steps; when it refuses the command, FENCED instead if a token newer than the
    run's has written to its resource (read only: the refusal rolls the transaction back anyway).
    FENCED before planning when the run's relative target was resolved from other heads."""
    claimant.require_resolved_heads(heads)
    try:
        return planner(heads, context)
    except TokenRequired:
        raise  # no token at all: the run's placeholder token says nothing about staleness
    except UsageError:
        refuse_if_superseded(claimant.identity, claimant.token, context)
        raise


def refuse_if_superseded(identity: Identity, token: int | None, context: MigrationContext) -> None:
    """FENCED when a token newer than the run's ``token`` has written to its resource, or when that
    token is above the fence of a resource whose lease service never issued it (as the claim refuses
    it); reads only (also with nothing to do, so that a stale or forged token is told so without writing)."""
    connection = context.connection
    if token is None or context.as_sql or connection is None:
        return  # a token not known yet is the run's own, newest grant; a script cannot read the fence
    quoted_schema = context.dialect.identifier_preparer.quote(identity.schema)
    version = installed_version(connection, quoted_schema)
    if version is None:
        return
    clause = statement("fence_source", quoted_schema, connection.dialect.name)
    row = connection.execute(clause, {"resource": identity.resource}).one_or_none()
    if row is not None:
        refuse_token(identity.resource, token, int(row.token), row.token_source)


def refusing_missing_heads(
    plan: Planner, script: ScriptDirectory, identity: Identity, token: Callable[[], int | None]
) -> Planner:
    """``plan``, with a refusal of heads the revision files do not have turned into DatabaseAhead
    (naming the run's ``token()``; None: not known yet).
    Checked only once ``plan`` has refused (Alembic cannot plan from a revision it cannot locate), so
    a plan that needs no revision map still loads none."""

    def planner(heads: tuple[str, ...], context: MigrationContext) -> tuple[list[Any], list[str]]:
        try:
            return plan(heads, context)
        except UsageError:
            missing = [head for head in heads if not _in_files(script, head)]
            if not missing:
                raise
            applied = _applied_by(context, identity.schema, missing)
            raise DatabaseAhead(identity.resource, token(), applied) from None

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
