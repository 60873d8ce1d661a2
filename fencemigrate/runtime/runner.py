"""The fenced run, top to bottom: :func:`run_fenced` runs the attempts (env.py runs again with a
new plan while the heads move under it), tells and logs FENCED, and releases the run's own lease.

In each attempt (:class:`Attempt`), once env.py has connected (its ``on_connection`` hook of
:func:`.environment.run_env`) and before Alembic touches the database: the run's mode is chosen for
the database; runners without a token, and pre-check mode, decide from the heads read now whether
anything is left to do, before any lease, lock or write; the run's own lease is acquired then
(:class:`LeaseHolder`, the only holder of the run's lease). Only then, with the token known, is the
:class:`.request.Claimant` built and the run of the mode (:class:`.FencedRun`, :class:`.PrecheckRun`,
:class:`.PrecheckScript`, or :class:`NothingToDo`) built with it: pre-check mode takes its named
lock, and either mode commits the fence schema and the guarded version table before the first
revision runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, Protocol

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Engine

from ..connections import separate_connection
from ..dialects import PRECHECK, Dialect, dialect_for, installed_version
from ..dialects.fence_calls import SCRIPT_TOKEN
from ..dialects.waits import WaitBound
from ..errors import DatabaseError, Fenced, FencemigrateError, HeadsMoved, LeaseLost, TokenRequired, UsageError
from ..fence.events import log_event
from ..fence.ledger import refuse_if_dirty
from ..fence.tokens import with_fence_token, with_newer_token_news
from ..leases import HeldLease, RunnerLease, lease_engine, open_backend
from .applied_downgrades import running_applied_downgrades
from .environment import FENCED_RUN_ATTRIBUTE, run_env
from .fenced_run import FencedRun
from .outcome import DONE_BY_ANOTHER_RUNNER, NOTHING_TO_DO, RunOutcome
from .plans import NothingToDoProbe, plan_or_fenced, refuse_if_superseded, refusing_missing_heads, upgrade_settled
from .precheck_run import PrecheckRun
from .precheck_script import PrecheckScript
from .request import (
    Claimant,
    ExpectedHeads,
    GivenToken,
    HeldGrant,
    Identity,
    OwnLease,
    Planner,
    RunRequest,
    ScriptLease,
    mode_for,
)

PLANNING_ATTEMPTS = 5


def run_fenced(request: RunRequest) -> RunOutcome:
    """What ``request`` did; the lease the run took itself is released at the end, also on failure."""
    engines: list[Engine] = []
    leases = LeaseHolder(request)
    try:
        return plan_and_run(request, leases, engines)
    except Fenced as fenced:
        raise told_and_logged(engines[-1] if engines else None, request, fenced) from None
    except DatabaseError as error:
        # A grant with --preempt terminates a stale run's connection: say that, not "database error".
        lost = leases.release()
        if not isinstance(lost, LeaseLost):
            raise
        raise lost from error
    finally:
        leases.release()


def plan_and_run(request: RunRequest, leases: LeaseHolder, engines: list[Engine]) -> RunOutcome:
    """Run env.py with the fenced migration function; plan again while the heads move under us.

    ``engines`` collects the engine of each connection env.py configures (see :class:`Attempt`).
    """
    config, script, identity = request.config, request.script, request.identity
    # A runner queued behind the one doing an upgrade learns it is done from the revision files'
    # declared heads when it can, without importing every revision module.
    destination = request.destination
    settled = (
        partial(upgrade_settled, script, destination)
        if isinstance(destination, str) and request.command == "upgrade"
        else None
    )
    offline = request.choice.offline  # --sql
    resolved_from = ResolvedFrom()  # kept across the attempts: the first resolution is the one the caller made
    for _ in range(PLANNING_ATTEMPTS):
        script_lease = request.token_plan if isinstance(request.token_plan, ScriptLease) else None
        outcome = RunOutcome(
            request.command, identity.resource, identity.holder, offline=offline, script_lease=script_lease
        )
        run = Attempt(request, leases, planner(request, leases.token), outcome, engines, settled, resolved_from)
        config.attributes[FENCED_RUN_ATTRIBUTE] = run
        try:
            outcome.forced_single_transaction = run_env(
                config,
                script,
                run.migrations_fn,
                resource=identity.resource,
                token=leases.token,
                writes=not offline,
                single_transaction=request.single_transaction,
                on_connection=run.connected,
                per_migration=request.choice.per_migration,
                as_sql=offline,
                starting_rev=request.start,
                destination_rev=request.destination,
                tag=request.tag,
            )
            run.finish()
            outcome.token = leases.token()
            outcome.lease_renewals = leases.renewals
            failure = leases.release()
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


def planner(request: RunRequest, token: Callable[[], int | None]) -> Planner:
    """The steps of one attempt, planned from the heads env.py's connection reads (DatabaseAhead
    when the revision files lack one of them); a revision whose file changed since it was applied
    is rolled back with the applied text's downgrade() (:mod:`.applied_downgrades`). ``token()``: the
    run's, to tell a stale writer it is stale when the plan refuses (None: not known yet)."""
    plan = running_applied_downgrades(request.plan_for(request.script, request.destination), request.identity, token)
    return refusing_missing_heads(plan, request.script, request.identity, token)


class RunLease(Protocol):
    """The lease a run takes itself when it is given no token (:class:`..leases.run_lease.RunnerLease`),
    or one its caller holds and lends it with the token (:class:`..leases.run_lease.HeldLease`)."""

    renewals: int

    def acquire(self, engine: Engine, stop_waiting: Callable[[], bool]) -> int | None:
        """The granted token, or None when ``stop_waiting()`` turned true while another holder had it."""
        ...

    def heartbeat(self, migration: Connection | None) -> None:
        """Renew while the run makes progress; LeaseLost when someone else was granted it."""
        ...

    def release(self) -> FencemigrateError | None:
        """Release the lease; what went wrong is returned, not raised."""
        ...


class LeaseHolder:
    """The live side of the request's token plan, held by the runner alone: the lease the run takes
    itself (:class:`.request.OwnLease`) or renews for its caller (:class:`.request.HeldGrant`), and
    the token its own lease was granted."""

    def __init__(self, request: RunRequest) -> None:
        plan, schema = request.token_plan, request.identity.schema
        self._plan = plan
        self._granted: int | None = None
        self._lease: RunLease | None = None
        if isinstance(plan, OwnLease):
            asked = plan.request
            self._lease = RunnerLease(
                asked,
                lambda engine: open_backend(engine, schema, plan.lease_url, asked.preempt, asked.wait_ms),
                request.progress,
            )
        elif isinstance(plan, HeldGrant):
            self._lease = HeldLease(
                plan.grant, lambda engine: open_backend(lease_engine(engine), schema, plan.lease_url)
            )

    def token(self) -> int | None:
        """The token the run writes under: given, the held grant's, or its own lease's once granted
        (None before that, and for a script that takes its own lease when it runs)."""
        if isinstance(self._plan, GivenToken):
            return self._plan.token
        if isinstance(self._plan, HeldGrant):
            return self._plan.grant.token
        return self._granted

    def acquire(self, engine: Engine, stop_waiting: Callable[[], bool]) -> bool:
        """Acquire the run's own lease through ``engine``'s database (once); False when
        ``stop_waiting()`` turned true while another holder had it."""
        assert self._lease is not None
        self._granted = self._lease.acquire(engine, stop_waiting)
        return self._granted is not None

    def heartbeat(self, migration: Connection | None) -> None:
        """Renew the run's lease when it is due (after each revision, with its connection)."""
        if self._lease is not None:
            self._lease.heartbeat(migration)

    @property
    def renewals(self) -> int:
        """How often the run's lease was renewed."""
        return self._lease.renewals if self._lease is not None else 0

    def release(self) -> FencemigrateError | None:
        """Release the run's own lease, if it holds one (a lent lease stays held); what went wrong
        is returned, not raised."""
        return self._lease.release() if self._lease is not None else None


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


class NothingToDo:
    """The run of an attempt that writes nothing: the heads read when env.py connected left nothing to
    do (``idle``), or another runner finished the work while this one waited for its lease. It plans
    again (HeadsMoved) if the plan has steps after all; a stale given token (``claimant``; None: the
    run took no lease) is told so; in pre-check mode a dirty revision is never "nothing to do"."""

    def __init__(
        self,
        identity: Identity,
        claimant: Claimant | None,
        planner: Planner,
        outcome: RunOutcome,
        idle: bool,
        precheck: bool,
    ) -> None:
        self._identity = identity
        self._claimant = claimant
        self._planner = planner
        self._outcome = outcome
        self._idle = idle
        self._precheck = precheck

    def connected(self, context: MigrationContext) -> None:
        """Idle: Alembic writes nothing either (nor creates its version table); pre-check mode reads
        whether a revision is dirty."""
        if not self._idle:
            return
        context.opts["dont_mutate"] = True
        connection = context.connection
        assert connection is not None
        quoted_schema = context.dialect.identifier_preparer.quote(self._identity.schema)
        # A read only: a dirty revision is never "nothing to do".
        if (
            self._precheck
            and dialect_for(context).tracks_dirty
            and installed_version(connection, quoted_schema) is not None
        ):
            refuse_if_dirty(connection, quoted_schema, self._identity.resource)

    def migrations_fn(self, heads: tuple[str, ...], context: MigrationContext) -> list[Any]:
        """No steps (HeadsMoved if there are some now)."""
        claimant = self._claimant
        if claimant is None:
            steps, _ = self._planner(heads, context)
        else:
            steps, _ = plan_or_fenced(self._planner, claimant, heads, context)
        if steps:
            raise HeadsMoved("the database changed since this run found nothing to do; nothing was applied")
        if claimant is not None:
            refuse_if_superseded(claimant.identity, claimant.token, context)  # a stale token learns it
        self._outcome.heads = sorted(heads)
        return []


ModeRun = FencedRun | PrecheckRun | PrecheckScript | NothingToDo


class Attempt:
    """One env.py run of a fenced run: its ``on_connection`` hook (:meth:`connected`) and Alembic's
    migration function (:meth:`migrations_fn`). The mode is chosen for the database env.py connected
    to; the run of that mode is built once the token is known, with the :class:`.request.Claimant`
    (offline, where the token is known from the start: when Alembic plans)."""

    def __init__(
        self,
        request: RunRequest,
        leases: LeaseHolder,
        planner: Planner,
        outcome: RunOutcome,
        engines: list[Engine],
        settled: Callable[[tuple[str, ...]], bool | None] | None,
        resolved_from: ResolvedFrom,
    ) -> None:
        """``engines`` collects the engine of each connection (the FENCED event is logged through
        the last); ``settled`` answers from the revision files' declared heads when it can."""
        self._request = request
        self._leases = leases
        self.planner = planner
        self._outcome = outcome
        self._engines = engines
        self._settled = settled
        self._resolved_from = resolved_from
        self._mode: tuple[str, WaitBound] | None = None
        self._run: ModeRun | None = None
        self._dialect: Dialect | None = None  # whose BEGINs wait as the run does, until it finishes

    def connected(self, context: MigrationContext) -> None:
        """Once env.py has connected, before Alembic touches the database: the mode, the probe for
        nothing left to do, the run's own lease, then the run of the mode."""
        assert context.connection is not None
        engine = self._request.own_engine(context.connection.engine)
        self._engines.append(engine)
        mode, _ = self._chosen_mode(context)
        leasing = isinstance(self._request.token_plan, OwnLease)
        if self._run is None and not context.as_sql and (leasing or mode == PRECHECK):
            # Runners that queue behind one doing the work stop waiting once nothing is left (a
            # script, written on a mock connection, reads nothing).
            probe = NothingToDoProbe(self.planner, context, settled=self._settled)
            try:
                if self._nothing_to_do_now(probe):
                    self._outcome.no_lease = NOTHING_TO_DO if leasing else None
                    self._run = self._nothing_to_do(leasing, idle=True, precheck=mode == PRECHECK)
                else:
                    if leasing and self._leases.acquire(engine, probe):
                        self._outcome.leased = True
                    elif leasing:
                        self._outcome.no_lease = DONE_BY_ANOTHER_RUNNER
                        self._run = self._nothing_to_do(leasing, idle=False, precheck=mode == PRECHECK)
                    if self._request.relative_to_heads and probe.resolved_from is not None:
                        self._resolved_from.pin(probe.resolved_from)
            finally:
                probe.close()
        self._started(context).connected(context)

    def migrations_fn(self, heads: tuple[str, ...], context: MigrationContext) -> Any:
        """Alembic's migration function: the run's (built now for offline scripts)."""
        return self._started(context).migrations_fn(heads, context)

    def finish(self) -> None:
        """Release what the run holds past its transactions (pre-check mode's named lock), and end
        its way of waiting at BEGIN (SQLite)."""
        if isinstance(self._run, PrecheckRun):
            self._run.finish()
        if self._dialect is not None:
            self._dialect.wait_at_begins(self._request.identity.resource, None)
            self._dialect = None

    def _chosen_mode(self, context: MigrationContext) -> tuple[str, WaitBound]:
        """The mode for ``context``'s database, and how its run waits for a lock (chosen once,
        before Alembic touches the database)."""
        if self._mode is None:
            choice, resource = self._request.choice, self._request.identity.resource
            mode = mode_for(context.dialect.name, choice.requested, bool(context.as_sql))
            leasing = isinstance(self._request.token_plan, OwnLease)
            if choice.preempt and not leasing and not dialect_for(context).can_preempt:
                raise UsageError(PREEMPT_ON_SQLITE)  # a run's own lease refuses it before its grant
            waits = WaitBound(choice.lock_wait_ms, choice.preempt, self._request.progress)
            if not context.as_sql:
                self._dialect = dialect_for(context)
                self._dialect.wait_at_begins(resource, waits)
            self._outcome.mode = mode
            self._mode = (mode, waits)
        return self._mode

    def _started(self, context: MigrationContext) -> ModeRun:
        """The run of the chosen mode, built (once) with the claimant."""
        if self._run is None:
            mode, waits = self._chosen_mode(context)
            request, claimant, plan = self._request, self._claimant(), self.planner
            if mode == PRECHECK and context.as_sql:
                self._run = PrecheckScript(claimant, plan, self._outcome, waits)
            elif mode == PRECHECK:
                self._run = PrecheckRun(claimant, plan, self._outcome, waits, self._leases.heartbeat, request.progress)
            else:
                self._run = FencedRun(claimant, plan, self._outcome, request.progress, waits, self._leases.heartbeat)
        return self._run

    def _claimant(self) -> Claimant:
        """Who claims the fence, with the token known now: given, the held grant's, the one granted
        to the run's own lease, or the one an offline script is granted when it runs."""
        request = self._request
        if isinstance(request.token_plan, ScriptLease):
            return Claimant(request.identity, SCRIPT_TOKEN, script_lease=request.token_plan)
        token = self._leases.token()
        assert token is not None  # a run whose own lease was not granted writes nothing (NothingToDo)
        return Claimant(request.identity, token, request.expected_heads, self._resolved_from.heads)

    def _nothing_to_do(self, leasing: bool, idle: bool, precheck: bool) -> NothingToDo:
        """The run that writes nothing; under the given token (stale: told so), or none (``leasing``)."""
        claimant = None if leasing else self._claimant()
        return NothingToDo(self._request.identity, claimant, self.planner, self._outcome, idle=idle, precheck=precheck)

    def _nothing_to_do_now(self, probe: NothingToDoProbe) -> bool:
        """:meth:`NothingToDoProbe.nothing_to_do_now`; a command it refuses as bad usage is FENCED
        instead when a token newer than the run's has written (:func:`.plans.refuse_if_superseded`,
        read on the probe's connection), as the run's own plan would have it."""
        try:
            return probe.nothing_to_do_now()
        except TokenRequired:
            raise
        except UsageError:
            refuse_if_superseded(self._request.identity, self._leases.token(), probe.reads())
            raise


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
    identity = request.identity
    try:
        with separate_connection(engine) as connection, connection.begin():
            quoted_schema = connection.dialect.identifier_preparer.quote(identity.schema)
            fenced = with_fence_token(connection, quoted_schema, fenced)
            fenced = with_newer_token_news(connection, quoted_schema, fenced)
            log_event(
                connection,
                quoted_schema,
                resource=fenced.resource,
                kind="FENCED",
                holder=identity.holder,
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
