"""One fenced run in transactional mode: claim before each step's DDL, ledger rows after it, in the
claim's transaction; and, through SQLAlchemy, notice when a revision may end that transaction
(:class:`TransactionEndWatch`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from alembic.runtime.migration import MigrationContext, RevisionStep
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, event

from ..alembic_internals import BlockFactory, around_autocommit_blocks, rewrite_offline_output
from ..dialects import dialect_for, ensure_installed
from ..dialects.fence_calls import FenceCalls
from ..dialects.waits import WaitBound, claimant_name
from ..errors import HeadsMoved, NotTransactional
from ..fence.adoption import adopt_applied_history
from ..fence.guard import VersionTable, guard_first_write, guard_version_table
from ..fence.ledger import Ledger, LedgerChange, ledger_change, refuse_if_dirty, version_table_name
from ..progress import SILENT, Progress, StepStart
from .applied_downgrades import applied_text_of, code_path, require_applied_file, rollback_detail
from .environment import autocommits, create_version_table_if_missing, revision_code
from .outcome import RunOutcome, StepOutcome
from .plans import FencedStep, plan_or_fenced, refuse_if_superseded
from .request import Claimant, Planner, listed

# Statements that end a transaction; a false positive (END in a function body) only costs
# an early ledger write and one verification round trip.
_TRANSACTION_END = re.compile(r"\b(COMMIT|END|ROLLBACK|ABORT|PREPARE\s+TRANSACTION)\b", re.IGNORECASE)

# In a --sql script only a statement that is exactly one of these ends the transaction.
_SCRIPT_TRANSACTION_ENDS = {"COMMIT", "COMMIT TRANSACTION", "COMMIT WORK", "END", "END TRANSACTION", "ROLLBACK"}


def ends_transaction_in_script(text: str) -> bool:
    """True when a statement written to a --sql script is a bare COMMIT/END/ROLLBACK."""
    return text.strip().rstrip(";").strip().upper() in _SCRIPT_TRANSACTION_ENDS


class TransactionEndWatch:
    """Calls ``before_end`` before a statement or commit that may end the transaction runs.

    Listens on one SQLAlchemy connection for a whole run; ``seen`` tells whether it fired since
    the last ``reset()``. A commit through the raw DBAPI connection is not seen here; the
    transaction-id check when ledger rows are written catches it.
    """

    def __init__(self, connection: Connection, before_end: Callable[[], object]) -> None:
        self.seen = False
        self._connection = connection
        self._before_end = before_end
        event.listen(connection, "before_cursor_execute", self._before_execute)
        event.listen(connection, "commit", self._before_commit)

    def reset(self) -> None:
        """Start watching a new step."""
        self.seen = False

    def close(self) -> None:
        """Stop listening."""
        event.remove(self._connection, "before_cursor_execute", self._before_execute)
        event.remove(self._connection, "commit", self._before_commit)

    def _before_execute(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if _TRANSACTION_END.search(statement):
            self._fire()

    def _before_commit(self, _conn: Any) -> None:
        self._fire()

    def _fire(self) -> None:
        self.seen = True
        self._before_end()


class FencedRun:
    """Wraps Alembic's migration function so every step it yields is fenced."""

    def __init__(
        self,
        claimant: Claimant,
        planner: Planner,
        outcome: RunOutcome,
        progress: Progress = SILENT,
        waits: WaitBound | None = None,
        renew_lease: Callable[[Connection | None], None] = lambda migration: None,
    ) -> None:
        """``waits``: how a transaction's first claim waits for another writer's transaction holding
        the fence (:meth:`FenceCalls.wait_for_fence`); None: it waits as long as that transaction
        lasts, silently. ``renew_lease`` after each step: the runner's lease, when it renews one."""
        self.claimant = claimant
        self.outcome = outcome
        self.planner = planner
        self._progress = progress
        self._waits = waits
        self._renew_lease = renew_lease
        self._steps_total = 0
        self._context: MigrationContext | None = None
        self._calls: FenceCalls | None = None
        self._reapplied: list[str] = []
        self._first_step = True
        self._escaped = False
        self._held: tuple[object, int | None] | None = None
        self._planned_heads: list[str] = []
        self._quoted_schema = ""
        self._ledger: Ledger | None = None
        self._steps_left = 0
        self._batching = False
        self._unverified: list[int] = []  # outcome.steps whose ledger rows are not yet proven
        self._end_watch: TransactionEndWatch | None = None
        self._claim_xact: int | None = None  # the current step's claim
        self._early: LedgerChange | None = None  # written with the claim, not yet settled
        self._step_revisions: tuple[str, ...] = ()  # the revisions of the step running now
        self._prepared = False  # fence schema and guarded version table committed before the run

    def connected(self, context: MigrationContext) -> None:
        """Once env.py has connected, before it begins its transaction: when the run has steps to run,
        install the fence schema, create and guard Alembic's version table and register the resource
        (:meth:`~fencemigrate.dialects.Dialect.register_resource`), committed on their own, so that a
        first revision that fails (its transaction rolled back) leaves the database fenced against
        plain ``alembic``. A plan refused here changes nothing. Nothing when env.py
        began a transaction of its own (the first step's transaction does it then)."""
        connection = context.connection
        if context.as_sql and dialect_for(context).shell_scripts:
            self._start_sqlite_script(context)
        if context.as_sql or connection is None or connection.in_transaction():
            return
        quoted = context.dialect.identifier_preparer.quote(self.claimant.schema)
        dialect = dialect_for(context)
        with connection.begin():
            if not plan_or_fenced(self.planner, self.claimant, tuple(context.get_current_heads()), context)[0]:
                return
            self.outcome.installed_fence_schema = ensure_installed(connection, quoted)
            guard_first_write(context, quoted)
            self._adopt(context, quoted)
            dialect.register_resource(connection, quoted, self.claimant.resource, self._waits, self.claimant.token)
        self._prepared = True

    def _start_sqlite_script(self, context: MigrationContext) -> None:
        """A SQLite --sql script for the sqlite3 shell starts, ahead of Alembic's first ``BEGIN``, with
        what it is and ``.bail on`` (the shell stops at the first error, whatever its flags: a refusal
        leaves the transaction open and the shell rolls it back as it exits) and ``.timeout`` (``--wait``); every
        transaction begins ``IMMEDIATE``, taking SQLite's write lock first as a fenced run does."""
        claimant, grant = self.claimant, self.claimant.script_lease
        wait_ms = grant.wait_ms if grant is not None else (self._waits.wait_ms if self._waits else 0)
        if grant is None:
            what = f"fenced by token {claimant.token} on resource {claimant.resource!r}"
        else:
            what = (
                f"when it runs, this script takes its own lease of resource {claimant.resource!r} from the "
                f"database's lease service, as {claimant.holder!r}, and is fenced by the token it is granted"
            )
        preamble = (
            f"-- fencemigrate: {what}; needs the fence schema (fencemigrate install); run it with the sqlite3 "
            "shell (sqlite3 -bail DB < script): its .bail on stops the shell at the first error, and the shell "
            "rolls back the transaction left open\n.bail on\n"
            f".timeout {wait_ms}\n"
        )
        plain_begin = "BEGIN" + context.impl.command_terminator
        immediate = "BEGIN IMMEDIATE" + context.impl.command_terminator
        started: list[bool] = []

        def begin_immediately(text: str) -> str:
            first = not started
            started.append(True)
            return (preamble if first else "") + (immediate if text == plain_begin else text)

        rewrite_offline_output(context, begin_immediately)

    # -- the function Alembic calls with the current heads ------------------------------

    def migrations_fn(self, heads: tuple[str, ...], context: MigrationContext) -> list[Any]:
        """Plan the steps, then hand Alembic fenced proxies of them."""
        claimant = self.claimant
        steps, self._reapplied = plan_or_fenced(self.planner, claimant, heads, context)
        if not steps:
            # A stale token learns it, with nothing written.
            refuse_if_superseded(claimant.identity, claimant.token, context)
        self._planned_heads = sorted(heads)
        self.outcome.heads = sorted(heads)
        self._context = context
        self._quoted_schema = context.dialect.identifier_preparer.quote(self.claimant.schema)
        self._calls = dialect_for(context).fence_calls(context, self._quoted_schema)
        self._ledger = Ledger(context, self._quoted_schema, self._calls, self.claimant.resource, self.claimant.holder)
        self._steps_left = self._steps_total = len(steps)
        # In one transaction for all steps, ledger rows wait for the last step (or for anything
        # that may end the transaction) and go in one round trip, proven by one transaction id.
        self._batching = not context.as_sql and not context.opts.get("transaction_per_migration", False)
        if not context.as_sql and context.connection is not None and steps:
            self._end_watch = TransactionEndWatch(context.connection, lambda: self._before_early_commit(context))
        self._guard_autocommit_blocks(context)
        context.on_version_apply_callbacks = (
            *context.on_version_apply_callbacks,
            self._note_heads,
        )
        if context.as_sql and steps:
            self._open_offline_script(context, self._calls)
            if not heads:
                create_version_table_if_missing(context)
        return [FencedStep(step, self) for step in steps]

    def _open_offline_script(self, context: MigrationContext, calls: FenceCalls) -> None:
        """Start a --sql script with the claim, ahead of every statement Alembic writes.

        Alembic creates its version table before the first step; a stale script must stop
        before that too. Each step still claims before its own DDL.
        """
        self._require_transaction(context)
        claimant = self.claimant
        grant = claimant.script_lease
        version_table = context.dialect.identifier_preparer.quote(context.version_table)
        if calls.open_script(claimant.resource, None if grant is None else version_table, self._planned_heads):
            # The grant and the first claim go into the first step's transaction (:meth:`_grant_in_script`).
            self.outcome.script_heads = self._planned_heads if grant is not None else None
            return
        if grant is None:
            context.impl.static_output(
                f"-- fencemigrate: fenced by token {claimant.token} on resource {claimant.resource!r}; needs the "
                "fence schema (fencemigrate install, or CREATE EXTENSION fencemigrate)"
            )
        else:
            context.impl.static_output(
                f"-- fencemigrate: when it runs, this script takes its own lease of resource {claimant.resource!r} "
                f"from the database's lease service, as {claimant.holder!r}, and is fenced by the token it is "
                f"granted; it refuses to run unless the heads are {listed(self._planned_heads)}; needs the fence "
                "schema (fencemigrate install, or CREATE EXTENSION fencemigrate); run it with psql -v ON_ERROR_STOP=1"
            )
            self.outcome.script_heads = self._planned_heads
            calls.grant_for_script(
                claimant.resource,
                claimant.holder,
                (grant.ttl_ms, grant.wait_ms),
                VersionTable.of(context).relation(context),
                self._planned_heads,
            )
        calls.claim(claimant.resource, claimant.token)

    def _note_heads(self, *, heads: set[str], **_: Any) -> None:
        self.outcome.heads = sorted(heads)
        context = self._context
        if context is not None and context.as_sql and self._calls is not None:
            self._calls.clear_version_write()
        if context is not None and context.as_sql and self.claimant.script_lease and not self._steps_left:
            # The last version write of a script that takes its own lease: release it in that transaction.
            assert self._calls is not None
            self._calls.release_for_script()
        if self._marks_version_writes(self._context):
            assert self._context is not None and self._context.connection is not None
            dialect_for(self._context).clear_version_write(self._context.connection, self._quoted_schema)

    @staticmethod
    def _marks_version_writes(context: MigrationContext | None) -> bool:
        """Online: where the guard has no claim to look for (SQLite), the run marks each version write itself."""
        return context is not None and not context.as_sql

    # -- one step ------------------------------------------------------------------------

    def execute_step(self, step: Any, migration_fn: Callable[..., None], kw: dict[str, Any]) -> None:
        """Claim, run the step's DDL, re-claim if it escaped its transaction, write or defer its ledger rows."""
        try:
            self._execute_step(step, migration_fn, kw)
            if self._marks_version_writes(self._context):
                # Alembic writes the version row next; the guard lets it through (cleared after).
                assert self._context is not None and self._context.connection is not None
                dialect_for(self._context).mark_version_write(self._context.connection, self._quoted_schema)
            # Progress: keep the run's own lease alive (on SQLite, renewed in this transaction).
            assert self._context is not None
            self._renew_lease(self._context.connection)
        except BaseException:
            self._stop_watching()  # the run is over; env.py may still use its connection
            raise

    def _stop_watching(self) -> None:
        if self._end_watch is not None:
            self._end_watch.close()
            self._end_watch = None

    def _execute_step(self, step: Any, migration_fn: Callable[..., None], kw: dict[str, Any]) -> None:
        context, calls = self._context, self._calls
        assert context is not None and calls is not None
        claimant = self.claimant
        self._require_transaction(context)
        if self._first_step and not context.as_sql:
            if not self._prepared:
                self._install_fence_schema(context)
                self._adopt(context, self._quoted_schema)
            assert context.connection is not None
            dialect = dialect_for(context)
            if dialect.tracks_dirty:
                # A revision pre-check mode left unfinished blocks transactional runs too.
                refuse_if_dirty(context.connection, self._quoted_schema, claimant.resource)
        if self._first_step and self._reapplied:
            calls.check_reapply(version_table_name(context), claimant.resource, self._reapplied, claimant.token)
        change = ledger_change(self._script(context), step, rollback_detail(step))
        if self._first_step:
            self._grant_in_script(context, calls)
        claim_xact = self._held_claim(context)
        if claim_xact is None and self._records_with_claim(context, step):
            claim_xact = self._claim_and_record(change, calls)
        elif claim_xact is None:
            if self._waits is not None and not context.as_sql:
                calls.wait_for_fence(claimant.resource, claimant.token, claimant.holder, self._waits)
            claim_xact = calls.claim(claimant.resource, claimant.token)
        if self._first_step and not context.as_sql:
            self._require_unmoved_heads(context)
        if self._first_step and not self._prepared:
            # Alembic has created its version table by now: from here on, only fenced writes reach it.
            guard_version_table(context, self._quoted_schema)
        self._first_step = False

        connection = None if context.as_sql else context.connection  # offline: a mock, no transaction
        claim_transaction = None if connection is None else connection.get_transaction()

        if not context.as_sql:  # claimed: the step's own code starts now
            position = self._steps_total - self._steps_left + 1
            self._progress.step_started(step_start(step, position, self._steps_total, claimant.token))
        self._escaped = False
        self._claim_xact = claim_xact
        self._step_revisions = change.added or change.removed
        if self._end_watch is not None:
            self._end_watch.reset()
        revision = step.revision if isinstance(step, RevisionStep) else None
        if context.as_sql and revision is not None and not step.is_upgrade:
            require_applied_file(calls, context, step)
        with self._watching_offline_commits(context):
            if revision is None:
                migration_fn(**kw)
            else:
                with revision_code(
                    revision.revision,
                    code_path(step),
                    lambda: self._aftermath(context),
                    claimant.resource,
                    claimant.token,
                ):
                    migration_fn(**kw)
        recorded_with_claim = self._early is not None  # not taken back by an early commit
        self._early = None
        self._steps_left -= 1
        ended = self._end_watch is not None and self._end_watch.seen
        if not self._steps_left:
            self._stop_watching()

        if self._escaped or calls.offline:
            # Offline, psql may run the rest of the step outside the claim's transaction in
            # ways no script text shows: always claim again before the ledger and version rows
            # (a repeated claim under the same token changes nothing).
            if not calls.claim_version_write(claimant.resource, claimant.token):
                claim_xact = self._claim_again(calls)
        self._unverified.append(len(self.outcome.steps))
        self.outcome.steps.append(
            StepOutcome(
                revisions=change.added or change.removed,
                direction=step_direction(step, change),
                token=None if claimant.script_lease else claimant.token,  # None: granted when the script runs
                atomic=not self._escaped,
                applied_text=applied_text_of(step),
            )
        )
        assert self._ledger is not None
        still_in_claim = connection is not None and connection.get_transaction() is claim_transaction
        settled = still_in_claim and not (self._escaped or ended)
        if recorded_with_claim and settled:
            # The ledger row went with the claim; the check at COMMIT proves the version row.
            self._unverified.pop()
            self._remember_claim(context, claim_xact)
            return
        if self._batching and self._steps_left and settled:
            self._ledger.defer(change)
            self._remember_claim(context, claim_xact)
            return
        self._remember_claim(context, self._flush(context, claim_xact, change))

    def _grant_in_script(self, context: MigrationContext, calls: FenceCalls) -> None:
        """A SQLite script that takes its own lease: the grant, at the start of the first step's
        transaction, after Alembic's ``CREATE TABLE IF NOT EXISTS`` of its version table (from base)."""
        grant = self.claimant.script_lease
        if context.as_sql and grant is not None:
            claimant = self.claimant
            calls.grant_in_first_step(claimant.resource, claimant.holder, grant.ttl_ms, self._planned_heads)

    def _aftermath(self, context: MigrationContext) -> str:
        """What a revision failing now leaves behind: its transaction rolls back, and with it the
        run's earlier steps unless each had a transaction of its own."""
        if context.as_sql:
            return "; the SQL script written so far is incomplete: do not run it"
        done = [name for step in self.outcome.steps for name in step.revisions]
        if self.outcome.autocommitted:
            return (
                f"; its transaction rolled back, but revision {', '.join(self.outcome.autocommitted)} ran statements "
                "in an autocommit block, which committed what ran before them"
                + (f" (applied before it: {', '.join(done)})" if done else "")
                + ": compare the schema with the revisions"
            )
        if self._batching or not done:
            return "; the run's transaction rolled back: nothing was applied"
        return f"; its transaction rolled back; applied before it, each in a transaction of its own: {', '.join(done)}"

    def _records_with_claim(self, context: MigrationContext, step: Any) -> bool:
        """One revision per transaction: its ledger row can go with the claim, before the DDL.

        PostgreSQL only: its COMMIT then proves the version row. SQLite claims, then records.
        """
        assert self._ledger is not None
        return (
            self._ledger.records_with_claim
            and not self._batching
            and not context.as_sql
            and isinstance(step, RevisionStep)
            and step.is_upgrade
        )

    def _claim_and_record(self, change: LedgerChange, calls: FenceCalls) -> int | None:
        """Claim and write the step's ledger row in one statement; with ``--wait``, at once when the
        claim's locks are free (the usual case), else after waiting for them in slices."""
        assert self._ledger is not None
        (row,) = self._ledger.rows(change)
        claimant = self.claimant
        xact = None
        if self._waits is not None:
            xact = self._ledger.record_with_claim(row, claimant.token, claimant_name(claimant.holder, claimant.token))
            if xact is None:
                calls.wait_for_fence(claimant.resource, claimant.token, claimant.holder, self._waits)
        if xact is None:
            xact = self._ledger.record_with_claim(row, claimant.token)
        self._early = change
        return xact

    def _before_early_commit(self, context: MigrationContext) -> None:
        """Something may commit the step's transaction before Alembic records the version:
        write deferred ledger rows now, and take back a row written with the claim (the step
        then writes it again after its DDL, in the transaction it ends up in)."""
        self._flush_deferred(context, self._claim_xact)
        if self._early is not None:
            assert self._ledger is not None
            self._ledger.undo_with_claim(self._early.added[0])
            self._early = None

    def _flush_deferred(self, context: MigrationContext, claim_xact: int | None) -> None:
        """Write deferred ledger rows now, before something may end their transaction."""
        if self._ledger is not None and self._ledger.has_deferred():
            self._flush(context, claim_xact)

    def _flush(self, context: MigrationContext, claim_xact: int | None, change: Any = None) -> int | None:
        """Write the deferred ledger rows (and ``change``), proving they share the claim's transaction.

        If they do not, something committed since the claim: claim again in the transaction now
        open before Alembic writes the version row, and report the steps as non-atomic.
        """
        assert self._ledger is not None and self._calls is not None
        last_xact = self._ledger.flush(self.claimant.token, change)
        if not self._calls.offline and last_xact != claim_xact:
            last_xact = self._claim_again(self._calls)
            for index in self._unverified:
                self.outcome.steps[index] = dataclasses.replace(self.outcome.steps[index], atomic=False)
        self._unverified = []
        return last_xact

    def _claim_again(self, calls: FenceCalls) -> int | None:
        """Claim in a transaction that began after the claim's own ended (an autocommit block, a
        commit inside a revision): online, waiting for another writer's fence as the first claim
        does (:meth:`FenceCalls.wait_for_fence`: reported slices, bounded by ``--wait``)."""
        claimant = self.claimant
        if self._waits is not None and not calls.offline:
            calls.wait_for_fence(claimant.resource, claimant.token, claimant.holder, self._waits)
        return calls.claim(claimant.resource, claimant.token)

    def _require_unmoved_heads(self, context: MigrationContext) -> None:
        """After the first claim, the heads are the ones ``--expect-heads`` names (FENCED: the
        writer planned from others), and the plan must still start from them.

        A claim can wait on the fence row while another writer (with a token no higher
        than ours) commits; its migrations are then in, and our plan is stale.
        """
        heads = sorted(context.get_current_heads())
        self.claimant.require_expected_heads(heads)
        if heads != self._planned_heads:
            raise HeadsMoved(
                "another writer changed the database while this run waited for the fence; nothing was applied"
            )

    def _held_claim(self, context: MigrationContext) -> int | None:
        """The claim's transaction id if this very transaction already holds the fence.

        The previous step verified, after its DDL, that its claim was still in the current
        transaction; the claim holds the fence row's lock until commit, so while the same
        transaction goes on (one transaction for all steps), claiming again changes nothing.
        """
        if context.as_sql or self._held is None or context.connection is None:
            return None
        transaction, xact = self._held
        return xact if context.connection.get_transaction() is transaction else None

    def _remember_claim(self, context: MigrationContext, xact: int | None) -> None:
        if not context.as_sql and context.connection is not None:
            self._held = (context.connection.get_transaction(), xact)

    def _install_fence_schema(self, context: MigrationContext) -> None:
        """Install the fence schema in this step's transaction unless it is there (online only)."""
        assert context.connection is not None
        self.outcome.installed_fence_schema = ensure_installed(context.connection, self._quoted_schema)

    def _adopt(self, context: MigrationContext, quoted_schema: str) -> None:
        """Adopt what the version table applied before fencing, in the transaction that fences the
        database (see :mod:`.adoption`)."""
        claimant = self.claimant
        self.outcome.adopted = adopt_applied_history(context, quoted_schema, claimant.resource, claimant.holder)

    def _require_transaction(self, context: MigrationContext) -> None:
        """Fail closed unless the claim and the DDL are bound to share one transaction."""
        if context.as_sql:
            if not context.impl.transactional_ddl:
                raise NotTransactional(
                    "refusing to write an offline script without BEGIN/COMMIT: env.py sets "
                    "transactional_ddl=False, so the fence claim could not share a transaction "
                    "with the DDL"
                )
            return
        connection = context.connection
        assert connection is not None
        if autocommits(connection) or not connection.in_transaction():
            raise NotTransactional(
                "refusing to migrate: the connection env.py gave Alembic is in autocommit mode "
                "or outside a transaction, so the fence claim could not share a transaction "
                "with the DDL; nothing was applied"
            )

    # -- revisions that leave the transaction ---------------------------------------------

    def _guard_autocommit_blocks(self, context: MigrationContext) -> None:
        """Claim again inside every ``autocommit_block()`` and mark the step as non-atomic."""
        run = self

        @contextmanager
        def fenced_autocommit_block(original: BlockFactory) -> Iterator[None]:
            run._escaped = True
            # Earlier steps' deferred rows must commit with their DDL, which the block commits.
            run._before_early_commit(context)
            with original():
                # What the revision ran so far has just committed, and the block's own statements will.
                left = run.outcome.autocommitted
                left += [name for name in run._step_revisions if name not in left]
                assert run._calls is not None
                run._calls.claim(run.claimant.resource, run.claimant.token)
                yield

        around_autocommit_blocks(context, fenced_autocommit_block)

    @contextmanager
    def _watching_offline_commits(self, context: MigrationContext) -> Iterator[None]:
        """With --sql, a revision that writes COMMIT/END/ROLLBACK escapes its transaction."""
        if not context.as_sql:
            yield
            return

        def watched(text: str) -> str:
            if ends_transaction_in_script(text):
                self._escaped = True
            return text

        restore = rewrite_offline_output(context, watched)
        try:
            yield
        finally:
            restore()

    # -- helpers ---------------------------------------------------------------------------

    @staticmethod
    def _script(context: MigrationContext) -> ScriptDirectory:
        script = context.script
        assert script is not None
        return script


def step_start(step: Any, position: int, total: int, token: int) -> StepStart:
    """The progress report of ``step`` starting, ``position`` of ``total``."""
    if isinstance(step, RevisionStep):
        action = "upgrade" if step.is_upgrade else "downgrade"
        return StepStart(action, (step.revision.revision,), position, total, token)
    if step.is_upgrade or not step.from_revisions:
        return StepStart("stamp", tuple(step.to_revisions), position, total, token)
    return StepStart("unstamp", tuple(step.from_revisions), position, total, token)  # as the outcome says


def step_direction(step: Any, change: LedgerChange) -> str:
    """ "up" or "down", for the outcome; a stamp is "down" when it only unstamps revisions."""
    if not isinstance(step, RevisionStep):
        return "down" if change.removed and not change.added else "up"
    return "up" if step.is_upgrade else "down"
