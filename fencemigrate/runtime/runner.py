"""The fenced run, top to bottom: :func:`run_fenced` runs the attempts (env.py runs again with a
new plan while the heads move under it), tells and logs FENCED, and releases the run's own lease.

In each attempt, once env.py has connected (:class:`RunConnection`, the ``on_connection`` hook of
:func:`.environment.run_env`) and before Alembic touches the database: the run's mode is chosen for
the database (:class:`ChosenRun`); runners without a token, and pre-check mode, decide from the
heads read now whether anything is left to do, before any lease, lock or write; the run's own lease
is acquired then (its token goes to the request's :class:`.request.TokenSource`); pre-check mode
takes its named lock, and either mode commits the fence schema and the guarded version table before
the first revision runs.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine

from ..connections import separate_connection
from ..dialects import PRECHECK, Dialect, dialect_for
from ..dialects.waits import WaitBound
from ..errors import DatabaseError, Fenced, FencemigrateError, HeadsMoved, LeaseLost, TokenRequired, UsageError
from ..fence.events import log_event
from ..fence.tokens import with_fence_token, with_newer_token_news
from ..progress import SILENT, Progress
from .applied_downgrades import running_applied_downgrades
from .environment import FENCED_RUN_ATTRIBUTE, run_env
from .fenced_run import FencedRun
from .outcome import DONE_BY_ANOTHER_RUNNER, NOTHING_TO_DO, RunOutcome
from .plans import NothingToDoProbe, refuse_if_superseded, refusing_missing_heads, upgrade_settled
from .precheck_run import PrecheckRun
from .precheck_script import PrecheckScript
from .request import FenceSettings, Planner, RunChoice, RunRequest, mode_for

PLANNING_ATTEMPTS = 5


def run_fenced(request: RunRequest) -> RunOutcome:
    """What ``request`` did; the lease the run took itself is released at the end, also on failure."""
    engines: list[Engine] = []
    tokens = request.settings.tokens
    try:
        return plan_and_run(request, engines)
    except Fenced as fenced:
        raise told_and_logged(engines[-1] if engines else None, request, fenced) from None
    except DatabaseError as error:
        # A grant with --preempt terminates a stale run's connection: say that, not "database error".
        lost = tokens.release()
        if not isinstance(lost, LeaseLost):
            raise
        raise lost from error
    finally:
        tokens.release()


def plan_and_run(request: RunRequest, engines: list[Engine]) -> RunOutcome:
    """Run env.py with the fenced migration function; plan again while the heads move under us.

    ``engines`` collects the engine of each connection env.py configures (see :class:`.RunConnection`).
    """
    config, script, settings = request.config, request.script, request.settings
    # A runner queued behind the one doing an upgrade learns it is done from the revision files'
    # declared heads when it can, without importing every revision module.
    destination = request.destination
    settled = (
        partial(upgrade_settled, script, destination)
        if isinstance(destination, str) and request.command == "upgrade"
        else None
    )
    offline = request.choice.offline  # --sql
    for _ in range(PLANNING_ATTEMPTS):
        outcome = RunOutcome(request.command, settings.resource, settings.holder, settings.tokens, offline=offline)
        run = ChosenRun(request.choice, settings, planner(request), outcome, request.progress)
        config.attributes[FENCED_RUN_ATTRIBUTE] = run
        try:
            outcome.forced_single_transaction = run_env(
                config,
                script,
                run.migrations_fn,
                resource=settings.resource,
                tokens=settings.tokens,
                writes=not offline,
                single_transaction=request.single_transaction,
                on_connection=RunConnection(request, run, outcome, engines, settled),
                per_migration=request.choice.per_migration,
                as_sql=offline,
                starting_rev=request.start,
                destination_rev=request.destination,
                tag=request.tag,
            )
            run.finish()
            outcome.lease_renewals = settings.tokens.renewals
            failure = settings.tokens.release()
            if failure is not None:
                outcome.lease_note = failure.reason if isinstance(failure, LeaseLost) else str(failure)
            return outcome
        except HeadsMoved:
            continue  # rolled back before any DDL: plan again from the new heads
        except Fenced as fenced:
            if outcome.autocommitted:
                raise fenced.after_autocommit_blocks(tuple(outcome.autocommitted)) from None
            raise
        finally:
            run.finish()
            config.attributes.pop(FENCED_RUN_ATTRIBUTE, None)
    raise FencemigrateError(
        f"the database's heads kept changing under concurrent writers ({PLANNING_ATTEMPTS} attempts); "
        "nothing was applied by this run"
    )


def planner(request: RunRequest) -> Planner:
    """The steps of one attempt, planned from the heads env.py's connection reads (DatabaseAhead
    when the revision files lack one of them); a revision whose file changed since it was applied
    is rolled back with the applied text's downgrade() (:mod:`.applied_downgrades`)."""
    plan = running_applied_downgrades(request.plan_for(request.script, request.destination), request.settings)
    return refusing_missing_heads(plan, request.script, request.settings)


class RunConnection:
    """The ``on_connection`` hook of one attempt of a fenced run."""

    def __init__(
        self,
        request: RunRequest,
        run: ChosenRun,
        outcome: RunOutcome,
        engines: list[Engine],
        settled: Callable[[tuple[str, ...]], bool | None] | None,
    ) -> None:
        """``engines`` collects the engine of each connection (the FENCED event is logged through
        the last); ``settled`` answers from the revision files' declared heads when it can."""
        self._request = request
        self._run = run
        self._outcome = outcome
        self._engines = engines
        self._settled = settled

    def __call__(self, context: MigrationContext) -> None:
        assert context.connection is not None
        engine = self._request.own_engine(context.connection.engine)
        self._engines.append(engine)
        chosen = self._run.choose(context)
        tokens = self._request.settings.tokens
        leasing = tokens.takes_lease
        if leasing or isinstance(chosen, PrecheckRun):
            # Runners that queue behind one doing the work stop waiting once nothing is left.
            probe = NothingToDoProbe(self._run.planner, context, settled=self._settled)
            try:
                if self._nothing_to_do_now(probe):
                    chosen.expect_nothing_to_do(context)
                    self._outcome.no_lease = NOTHING_TO_DO if leasing else None
                else:
                    if leasing and tokens.acquire(engine, probe):
                        self._outcome.leased = True
                    elif leasing:
                        self._outcome.no_lease = DONE_BY_ANOTHER_RUNNER
                    if self._request.relative_to_heads and probe.resolved_from is not None:
                        self._request.settings.resolved_from.pin(probe.resolved_from)
            finally:
                probe.close()
        chosen.connected(context)

    def _nothing_to_do_now(self, probe: NothingToDoProbe) -> bool:
        """:meth:`NothingToDoProbe.nothing_to_do_now`; a command it refuses as bad usage is FENCED
        instead when a token newer than the run's has written (:func:`.plans.refuse_if_superseded`,
        read on the probe's connection), as the run's own plan would have it."""
        try:
            return probe.nothing_to_do_now()
        except TokenRequired:
            raise
        except UsageError:
            refuse_if_superseded(self._request.settings, probe.reads())
            raise


class ChosenRun:
    """Builds the transactional :class:`FencedRun` or the :class:`PrecheckRun` for the database."""

    def __init__(
        self,
        choice: RunChoice,
        settings: FenceSettings,
        planner: Planner,
        outcome: RunOutcome,
        progress: Progress = SILENT,
    ) -> None:
        self._choice = choice
        self._progress = progress
        self._settings = settings
        self.planner = planner
        self._outcome = outcome
        self._run: FencedRun | PrecheckRun | PrecheckScript | None = None
        self._dialect: Dialect | None = None  # whose BEGINs wait as the run does, until it finishes

    def choose(self, context: MigrationContext) -> FencedRun | PrecheckRun | PrecheckScript:
        """The run for ``context``'s database (chosen once, before Alembic touches it)."""
        if self._run is None:
            choice = self._choice
            mode = mode_for(context.dialect.name, choice.requested, bool(context.as_sql))
            if choice.preempt and not self._settings.tokens.takes_lease and not dialect_for(context).can_preempt:
                raise UsageError(PREEMPT_ON_SQLITE)  # a run's own lease refuses it before its grant
            waits = WaitBound(choice.lock_wait_ms, choice.preempt, self._progress)
            if not context.as_sql:
                self._dialect = dialect_for(context)
                self._dialect.wait_at_begins(self._settings.resource, waits)
            if mode == PRECHECK and context.as_sql:
                self._run = PrecheckScript(self._settings, self.planner, self._outcome, waits)
            elif mode == PRECHECK:
                self._run = PrecheckRun(self._settings, self.planner, self._outcome, waits, self._progress)
            else:
                self._run = FencedRun(self._settings, self.planner, self._outcome, self._progress, waits)
            self._outcome.mode = mode
        return self._run

    def migrations_fn(self, heads: tuple[str, ...], context: MigrationContext) -> Any:
        """Alembic's migration function: the chosen run's (chosen now for offline scripts)."""
        return self.choose(context).migrations_fn(heads, context)

    def finish(self) -> None:
        """Release what the run holds past its transactions (pre-check mode's named lock), and end
        its way of waiting at BEGIN (SQLite)."""
        if isinstance(self._run, PrecheckRun):
            self._run.finish()
        if self._dialect is not None:
            self._dialect.wait_at_begins(self._settings.resource, None)
            self._dialect = None


PREEMPT_ON_SQLITE = (
    "--preempt is not available on SQLite: a run cannot end another process's SQLite transaction; "
    "wait for the writer in flight with --wait instead (nothing was changed)"
)


def told_and_logged(engine: Engine | None, request: RunRequest, fenced: Fenced) -> Fenced:
    """``fenced`` with the fence token (:func:`with_fence_token`), saying whether the newer token
    has written or was only granted (:func:`with_newer_token_news`), with its FENCED event
    appended, in their own transaction on ``engine`` (the last env.py connected; None: it never
    connected). Failing to read or log never changes the outcome."""
    if engine is None:
        return fenced
    settings = request.settings
    try:
        with separate_connection(engine) as connection, connection.begin():
            quoted_schema = connection.dialect.identifier_preparer.quote(settings.schema)
            fenced = with_fence_token(connection, quoted_schema, fenced)
            fenced = with_newer_token_news(connection, quoted_schema, fenced)
            log_event(
                connection,
                quoted_schema,
                resource=fenced.resource,
                kind="FENCED",
                holder=settings.holder,
                token=fenced.token or None,  # 0: refused before the run's own lease was granted
                revision=request.target,
                detail={
                    "command": request.command,
                    "fence_token": fenced.fence_token,
                    "reason": fenced.reason,
                    **({"autocommitted": list(fenced.autocommitted)} if fenced.autocommitted else {}),
                },
            )
    except Exception:  # noqa: BLE001 - failing to log must never change what the caller sees
        pass
    return fenced
