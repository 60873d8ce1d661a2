"""One run in pre-check mode: MySQL and MariaDB (which commit DDL on their own), or ``--mode precheck``.

The claim cannot share a transaction with the DDL there, so the run:

1. installs the fence schema if needed, then takes the resource's named lock on the migration's
   connection (:class:`NamedLock`), waiting at most ``--wait`` (busy, exit 4) in slices that
   report who holds it (``--preempt`` ends a holder under an older token), and holds it to the
   end: fencemigrate writers never overlap, and a grant of the lease waits for it too;
2. refuses to start while a revision is dirty (DIRTY, exit 5), and claims the fence in its own
   committed transaction (FENCED, exit 3), before Alembic creates its version table; with
   ``--expect-heads``, that transaction also reads the heads (FENCED unless they are the expected);
3. before each revision: checks that the fence still holds its token and marks the revision's
   ledger row 'applying' ('rolling_back'), committed before the DDL (:meth:`~fencemigrate.fence.ledger.Ledger.mark`);
4. after the revision's DDL, in the transaction that writes Alembic's version row: settles the
   mark, and checks and marks the next revision. A revision that fails or dies midway stays dirty.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from alembic.runtime.migration import MigrationContext, RevisionStep
from sqlalchemy import Connection

from ..dialects import dialect_for, ensure_installed
from ..dialects.waits import NamedLock, WaitBound
from ..errors import FencemigrateError, RevisionFailed
from ..fence.adoption import adopt_applied_history
from ..fence.guard import guard_first_write, guard_version_table
from ..fence.ledger import Ledger, ledger_change, refuse_if_dirty, version_table_name
from ..progress import SILENT, Progress
from .applied_downgrades import applied_text_of, code_path, rollback_detail
from .environment import describe, guard_refusal, locate
from .fenced_run import step_direction, step_start
from .outcome import RunOutcome, StepOutcome
from .plans import FencedStep, plan_or_fenced, refuse_if_superseded
from .request import Claimant, Planner


class PrecheckRun:
    """Wraps Alembic's migration function for pre-check mode (see the module's docstring)."""

    def __init__(
        self,
        claimant: Claimant,
        planner: Planner,
        outcome: RunOutcome,
        waits: WaitBound,
        renew_lease: Callable[[Connection | None], None],
        progress: Progress = SILENT,
    ) -> None:
        """``waits``: how the run waits for the named lock (``--wait``, ``--preempt``, reports);
        ``renew_lease`` after each step: the runner's lease, when it renews one."""
        self.claimant = claimant
        self.planner = planner
        self.outcome = outcome
        self._progress = progress
        self._waits = waits
        self._renew_lease = renew_lease
        self._lock: NamedLock | None = None
        self._quoted_schema = ""
        self._context: MigrationContext | None = None
        self._external = False  # env.py began a transaction of its own: it commits, not this run
        self._ledger: Ledger | None = None
        self._next_step: Any = None  # the step after the one running
        self._premarked: Any = None  # a step whose mark the previous step's transaction wrote
        self._guarded = False  # the version table's guard is on (or was allowed off on purpose)

    # -- once env.py has connected, before Alembic touches the database -----------------------

    def connected(self, context: MigrationContext) -> None:
        """Fence schema and guarded version table, named lock, dirty check and the claim, committed on
        their own."""
        connection = context.connection
        assert connection is not None
        self._quoted_schema = context.dialect.identifier_preparer.quote(self.claimant.schema)
        self._external = connection.in_transaction()
        # Installed first: the named lock is a function of the fence schema on PostgreSQL. Concurrent
        # first runs install it once (an install lock of its own on both databases).
        self.outcome.installed_fence_schema = ensure_installed(connection, self._quoted_schema)
        if not self._external:
            # With the version table, guarded: a first revision that fails leaves plain alembic refused.
            guard_first_write(context, self._quoted_schema)
            dialect_for(context).register_resource(
                connection, self._quoted_schema, self.claimant.resource, self._waits, self.claimant.token
            )
            connection.commit()  # the install, and its lock, are not held while waiting below
        lock = NamedLock(connection, self._quoted_schema, self.claimant.resource)
        lock.take(self._waits, self.claimant.token)
        self._lock = lock
        refuse_if_dirty(connection, self._quoted_schema, self.claimant.resource)
        # Committed with the claim below: what the version table applied before fencing, adopted.
        self.outcome.adopted = adopt_applied_history(
            context, self._quoted_schema, self.claimant.resource, self.claimant.holder
        )
        calls = dialect_for(context).fence_calls(context, self._quoted_schema)
        _, reapplied = plan_or_fenced(self.planner, self.claimant, tuple(context.get_current_heads()), context)
        if reapplied:  # before the claim: a refused reapply leaves the fence as it was
            calls.check_reapply(version_table_name(context), self.claimant.resource, reapplied, self.claimant.token)
        calls.claim(self.claimant.resource, self.claimant.token)
        # In the claim's transaction, under the named lock: no fenced writer moves the heads now.
        self.claimant.require_expected_heads(context.get_current_heads())
        self._ledger = Ledger(context, self._quoted_schema, calls, self.claimant.resource, self.claimant.holder)
        if not self._external:
            connection.commit()

    def finish(self) -> None:
        """Release the named lock (at the end of the run, also on failure)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # -- the function Alembic calls with the current heads ------------------------------------

    def migrations_fn(self, heads: tuple[str, ...], context: MigrationContext) -> Iterator[Any]:
        """Plan the steps; each is checked and marked before Alembic begins it."""
        claimant = self.claimant
        steps, _ = plan_or_fenced(self.planner, claimant, heads, context)
        if not steps:
            refuse_if_superseded(
                claimant.identity, claimant.token, context
            )  # a stale token learns it, with nothing written
        self.outcome.heads = sorted(heads)
        self._context = context
        context.on_version_apply_callbacks = (*context.on_version_apply_callbacks, self._note_heads)
        return self._checked_steps(steps, context)

    def _note_heads(self, *, heads: set[str], **_: Any) -> None:
        self.outcome.heads = sorted(heads)

    def _checked_steps(self, steps: list[Any], context: MigrationContext) -> Iterator[Any]:
        for index, step in enumerate(steps):
            self._before_step(step)
            if not context.as_sql:  # checked and marked: the step's own code starts now
                self._progress.step_started(step_start(step, index + 1, len(steps), self.claimant.token))
            self._next_step = steps[index + 1] if index + 1 < len(steps) else None
            yield FencedStep(step, self)

    def _before_step(self, step: Any) -> None:
        """The fence must still hold our token; the revision's ledger row is marked before its DDL
        (unless the previous step's transaction marked it already)."""
        if isinstance(step, RevisionStep) and self._premarked is not step:
            assert self._ledger is not None
            self._ledger.mark_or_fenced(step, self.claimant.token, rollback_detail(step))
            connection = self._ledger.connection
            if not self._external and not dialect_for(connection).commits_ddl:
                # PostgreSQL: the mark commits before the DDL (on MySQL the first DDL statement commits it).
                dbapi_connection = connection.connection.dbapi_connection
                assert dbapi_connection is not None
                dbapi_connection.commit()
        self._premarked = None

    # -- one step, inside Alembic's transaction for it ----------------------------------------

    def execute_step(self, step: Any, migration_fn: Callable[..., None], kw: dict[str, Any]) -> None:
        """Run the revision's DDL; then settle its ledger row beside Alembic's version row."""
        if not self._guarded and self._context is not None:
            # Alembic has created its version table by now: from here on, only fenced writes reach it.
            guard_version_table(self._context, self._quoted_schema)
            self._guarded = True
        try:
            migration_fn(**kw)
        except Exception as error:
            if not isinstance(step, RevisionStep):
                raise
            raise self._failure(step, error) from error
        context, ledger, claimant = self._context, self._ledger, self.claimant
        assert context is not None and ledger is not None and context.script is not None
        detail = rollback_detail(step)
        change = ledger_change(context.script, step, detail)
        if isinstance(step, RevisionStep):
            ledger.settle(step, claimant.token, detail)
        else:  # a stamp: no DDL, nothing to mark
            ledger.record(ledger.rows(change), claimant.token)
        self.outcome.steps.append(
            StepOutcome(
                revisions=change.added or change.removed,
                direction=step_direction(step, change),
                token=claimant.token,
                atomic=not isinstance(step, RevisionStep),
                applied_text=applied_text_of(step),
            )
        )
        following = self._next_step
        if isinstance(following, RevisionStep) and ledger.mark(following, claimant.token, rollback_detail(following)):
            # The next revision's mark commits with this step's version row: one commit, not two.
            self._premarked = following
        self._renew_lease(context.connection)

    def _failure(self, step: RevisionStep, error: Exception) -> FencemigrateError:
        """A revision failing in pre-check mode: part of its DDL may be committed; it is now dirty.
        A write the monotonic guard refused stays that refusal (exit 3), with the same aftermath."""
        revision, path = step.revision.revision, code_path(step)
        aftermath = (
            f"; in pre-check mode a revision's statements can commit before it "
            f"finishes, so part of it may be in the database: {revision} is now marked dirty and fenced "
            f"writes are refused. "
            f"Compare the schema with the revision, finish or undo it by hand, then run "
            f"`fencemigrate resolve {revision} --token N --as applied|rolled-back`"
        )
        claimant = self.claimant
        refused = guard_refusal(error, revision, path, claimant.resource, claimant.token, lambda: aftermath)
        if refused is not None:
            return refused
        return RevisionFailed(revision, locate(error, path), describe(error), aftermath, how=" in pre-check mode")

    # -- helpers ------------------------------------------------------------------------------
