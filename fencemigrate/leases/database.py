"""The built-in lease service: leases in the fence schema's own tables, judged by the database clock.

A grant runs in one transaction: wait (at most for the caller's ``--wait``) for an in-flight
migration, or cancel it with ``--preempt``, lock the lease row, issue
``greatest(last issued, fence token) + 1`` and advance the fence to it. The old holder is fenced
the moment the grant commits, before the new holder writes anything. How a grant waits is the
dialect's (:mod:`.fence_on_grant`): the fence row's lock on PostgreSQL, the database's single
write lock on SQLite.

Runners that wait for a busy lease are woken when it is released, instead of polling blindly
(:class:`ReleaseWakeups`). On PostgreSQL with psycopg 3 a waiting runner LISTENs on its lease
connection, and every release NOTIFYs (``sql/queries/postgresql/lease_release.sql``): the wait
between two attempts ends the moment the lease is freed, and can be long (a release wakes it), so
waiting costs neither the server nor the runner doing the work much. Elsewhere (SQLite, MySQL,
other drivers) the pause is a plain sleep. Expiry sends nothing: the pause never outlasts
:data:`LONGEST_PAUSE_S`, after which the runner tries again anyway.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, Row
from sqlalchemy.exc import DBAPIError

from ..config import format_duration
from ..dialects import Dialect, dialect_for
from ..dialects.base import LEASE_ROW_WAIT_MS, SYNCHRONOUS_WAIT_FLOOR_MS
from ..dialects.statements import statement
from ..errors import LEASE_SERVICE, REDIS, GrantNotReplicated, LeaseBusy, LeaseLost, is_lock_contention, refused_step
from ..fence.events import log_event
from ..fence.tokens import advance_fence, recorded_source, redis_only, superseded_by
from ..progress import SILENT, LeaseWait, Progress
from .epochs import next_token, read_incarnation
from .fence_on_grant import LEASE_TRANSACTION_IN_PROGRESS, detach, fence_on_grant, lease_connection
from .model import Grant, LeaseRequest, LeaseStatus, StoppedWaiting, poll_for_grant
from .standby_waits import force_synchronous_commit


class DatabaseLeases:
    """Leases on their own connection of the project's engine (the fence lives in the same database)."""

    def __init__(self, engine: Engine, schema: str) -> None:
        self._resources = ExitStack()
        self._connection = self._resources.enter_context(lease_connection(engine))
        self._dialect = engine.dialect.name
        self._schema = engine.dialect.identifier_preparer.quote(schema)
        self._fence = fence_on_grant(self._connection, self._schema)
        try:
            self._fence.install()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the lease connection."""
        self._resources.close()

    # -- the four operations ---------------------------------------------------------------

    def acquire(
        self, request: LeaseRequest, stop_waiting: Callable[[], bool] | None = None, progress: Progress = SILENT
    ) -> Grant:
        """Grant the lease, polling while another live holder has it, for at most ``wait_ms``;
        on PostgreSQL a release wakes the wait (:class:`ReleaseWakeups`)."""
        with refused_step("the lease grant"):
            return self._acquire(request, stop_waiting, progress)

    def _acquire(self, request: LeaseRequest, stop_waiting: Callable[[], bool] | None, progress: Progress) -> Grant:
        self._fence.check_before_grant(
            request.resource, lambda connection: self._refuse_redis(connection, request.resource)
        )
        self._fence.progress = progress  # a wait for a migration in flight, inside one attempt
        wakeups = ReleaseWakeups(self._connection, self._schema, request.resource)
        grant = poll_for_grant(
            request,
            lambda remaining_ms: self._try_grant(request, remaining_ms, stop_waiting),
            _busy,
            stop_waiting,
            pause=wakeups.pause,
            longest_pause_s=wakeups.longest_pause_s,
            waiting=lambda lease, remaining_ms: progress.waiting_for_lease(LeaseWait(lease, remaining_ms)),
        )
        wakeups.stop()  # on failure the caller closes the connection, and its LISTEN with it
        return grant

    def renew(
        self, resource: str, holder: str, token: int | None, ttl_ms: int | None, within: Connection | None = None
    ) -> Grant:
        """Extend the holder's lease by ``ttl_ms`` (None: its own TTL) from now; LeaseLost if it is
        no longer theirs.

        ``within``: in that connection's open transaction, committed by its owner (see the protocol).
        LeaseBusy when another lease transaction keeps the lease row longer than
        :data:`LEASE_ROW_WAIT_MS`.
        """
        with (
            refused_step("the lease renewal"),
            _busy_when_locked(resource),
            self._fence.in_transaction(resource, within) as connection,
        ):
            self._enter_lease(resource, within)
            # A Redis grant has superseded every lease of this service on the resource; a holder
            # who never had one here came to the wrong service.
            superseded = recorded_source(connection, self._schema, resource) == REDIS
            if superseded and self._peek(connection, resource).holder != holder:
                raise redis_only(resource, "renew")
            row = None
            if not superseded:
                row = self._change_grant(
                    connection, "lease_renew", resource=resource, holder=holder, token=token, ttl_ms=ttl_ms
                )
            if row is None:
                reason = self._why_lost(
                    connection, resource, holder, token, superseded_by(REDIS) if superseded else None
                )
            else:
                lease = self._peek(connection, resource)
                self._log(
                    connection,
                    resource,
                    "RENEW",
                    holder,
                    int(row.token),
                    {"ttl_ms": lease.ttl_ms, "after_expiry": bool(row.was_expired)},
                )
        if row is None:
            raise LeaseLost(resource, holder, token, reason)
        return Grant(lease, renewed_after_expiry=bool(row.was_expired))

    def release(self, resource: str, holder: str, token: int | None) -> LeaseStatus:
        """Free the holder's lease; LeaseLost if it is no longer theirs, LeaseBusy as for :meth:`renew`."""
        with (
            refused_step("the lease release"),
            _busy_when_locked(resource),
            self._fence.in_transaction(resource) as connection,
        ):
            self._enter_lease(resource, None)
            row = self._change_grant(connection, "lease_release", resource=resource, holder=holder, token=token)
            if row is None:
                reason = self._why_lost(connection, resource, holder, token)
            else:
                self._log(connection, resource, "RELEASE", holder, int(row.token))
                lease = self._peek(connection, resource)
        if row is None:
            raise LeaseLost(resource, holder, token, reason)
        return lease

    def status(self, resource: str) -> LeaseStatus:
        """The lease as the database's clock sees it now."""
        with self._fence.in_transaction(resource) as connection:
            return self._peek(connection, resource)

    def detach(self, resource: str) -> LeaseStatus:
        """Give ``resource`` back to external tokens; LeaseBusy while its lease is live; refused
        outright when its tokens come from Redis (:func:`..fence.tokens.redis_only`)."""

        def lease_now() -> LeaseStatus:
            self._refuse_redis(self._connection, resource, locked=True, call="detach")
            return self._peek(self._connection, resource)

        return detach(self._fence, self._connection, self._schema, resource, lease_now)

    # -- a grant ---------------------------------------------------------------------------

    def _try_grant(
        self, request: LeaseRequest, remaining_ms: int, stop_waiting: Callable[[], bool] | None
    ) -> Grant | LeaseStatus:
        """One attempt: the Grant, or the lease's status when busy (polled again until --wait ends).

        A lock wait that runs out on the lease row, or a deadlock with another grant, is busy too.

        On SQLite an attempt waits for the database's write lock before it can even see the lease:
        behind a migration in flight, whose run releases the lease right after it commits. An
        attempt that waited so takes nothing; the run asks ``stop_waiting()`` (StoppedWaiting), out
        of the write lock so that the runners queued together ask at once, and only then tries again.
        """
        started = time.monotonic()
        try:
            outcome = self._grant_once(request, remaining_ms, look_again=stop_waiting is not None)
            if outcome is not None:
                return outcome
            assert stop_waiting is not None
            if stop_waiting():
                raise StoppedWaiting()
            left_ms = remaining_ms - round((time.monotonic() - started) * 1000)
            outcome = self._grant_once(request, max(left_ms, 0), look_again=False)
            assert outcome is not None
            return outcome
        except DBAPIError as error:
            if not is_lock_contention(error):
                raise
        return self.status(request.resource)

    def _grant_once(self, request: LeaseRequest, remaining_ms: int, look_again: bool) -> Grant | LeaseStatus | None:
        """One attempt, in one transaction; None when ``look_again`` and it waited for another writer."""
        resource, holder = request.resource, request.holder
        connection = self._connection
        with self._fence.transaction(resource, remaining_ms):
            if look_again and self._fence.waited_for_writer:
                return None
            # A lease transaction stuck with the lease row (its process paused) before the seed,
            # which would wait for it.
            stuck = self._fence.enter_lease(resource, remaining_ms, request.preempt)
            if stuck is None:
                return self._peek(connection, resource)
            self._run(connection, "lease_seed", resource=resource)
            seen = self._peek(connection, resource)
            if seen.live_holder not in (None, holder):
                return seen
            self._fence.check_clock()
            # Fence row first, so that a live holder's renewals never wait behind a grant that
            # waits for its migration. To preempt, the lease row first: the stale run, cancelled,
            # cannot release or renew it before this grant commits.
            if request.preempt:
                locked = self._run(connection, "lease_lock", resource=resource).one()
                if locked.holder not in (None, holder) and not locked.expired:
                    return self._peek(connection, resource)  # taken meanwhile: preempt nobody
            fence_token, writers = self._fence.lock_fence(resource, remaining_ms, request.preempt)
            self._refuse_redis(connection, resource, locked=True)
            preempted = stuck + writers
            if not request.preempt:
                locked = self._run(connection, "lease_lock", resource=resource).one()
            if locked.holder not in (None, holder) and not locked.expired:
                return self._peek(connection, resource)
            if locked.implausible:  # its holder's clock was ahead: let it go, so that the guard sees no live lease
                self._run(connection, "lease_release", resource=resource, holder=locked.holder, token=locked.token)
            incarnation = read_incarnation(connection, self._schema, resource)
            token = next_token(resource, max(int(locked.token), fence_token or 0), incarnation)
            synchronous = force_synchronous_commit(connection, self._schema)
            self._run(
                connection,
                "lease_grant",
                resource=resource,
                holder=holder,
                token=token,
                ttl_ms=request.ttl_ms,
                replication=_replication(connection, synchronous),
            )
            advance_fence(self._connection, self._schema, resource, token, LEASE_SERVICE, incarnation.current)
            previous = locked.holder if locked.holder not in (None, holder) else None
            if previous is not None and locked.implausible:  # logged now: its expiry lies in the future
                self._log(
                    connection,
                    resource,
                    "EXPIRE",
                    previous,
                    int(locked.token),
                    _implausible(dialect_for(connection), locked),
                )
            elif previous is not None:
                self._log(connection, resource, "EXPIRE", previous, int(locked.token), at=seen.expires_at)
            for pid in preempted:
                self._log(connection, resource, "PREEMPT", holder, token, {"cancelled_pid": pid})
            detail: dict[str, Any] = {"ttl_ms": request.ttl_ms}
            if incarnation.changed:
                detail["new_epoch"] = {"last_grant_on": incarnation.recorded, "now_on": incarnation.current}
            self._log(connection, resource, "GRANT", holder, token, detail)
            lease = self._peek(connection, resource)
        if synchronous and self._fence.commit_cut_short:
            self.release(resource, holder, token)
            raise GrantNotReplicated(resource, token, max(remaining_ms, SYNCHRONOUS_WAIT_FLOOR_MS))
        return Grant(lease, previous_holder=previous, preempted=preempted, new_epoch=incarnation.changed)

    # -- helpers ---------------------------------------------------------------------------

    def _refuse_redis(self, connection: Connection, resource: str, locked: bool = False, call: str = "grant") -> None:
        """OtherTokenSource when the tokens of ``resource`` come from Redis: this service cannot see
        whether a Redis lease on it is live. ``locked``: the fence row is this transaction's."""
        if recorded_source(connection, self._schema, resource, locked) == REDIS:
            raise redis_only(resource, call)

    def _enter_lease(self, resource: str, within: Connection | None) -> None:
        """A renew or release on the lease connection enters the lease first
        (:meth:`~fencemigrate.dialects.base.GrantLocks.enter_lease`); busy after :data:`LEASE_ROW_WAIT_MS`.
        One ``within`` a run's transaction does not (that session is the run's, which ``--preempt``
        ends by the writers' lock)."""
        if within is None and self._fence.enter_lease(resource, LEASE_ROW_WAIT_MS, False) is None:
            raise LeaseBusy(
                resource, None, f"{LEASE_TRANSACTION_IN_PROGRESS}; waited {format_duration(LEASE_ROW_WAIT_MS)} for it"
            )

    def _change_grant(self, connection: Connection, name: str, **params: Any) -> Row[Any] | None:
        """Renew or release (``name``) the holder's grant: its token and whether it had expired,
        or None when the lease is not theirs.

        PostgreSQL does both in one statement (RETURNING, under the row lock). SQLite (RETURNING
        only from 3.35) reads the grant with ``lease_held``, then changes it: the transaction holds
        the database's write lock, so nothing comes in between. MySQL (no RETURNING on UPDATE)
        does the same, ``lease_held`` locking the row.
        """
        if dialect_for(self._dialect).returning_updates:
            row: Row[Any] | None = self._run(connection, name, **params).one_or_none()
            return row
        held: Row[Any] | None = self._run(
            connection, "lease_held", resource=params["resource"], holder=params["holder"], token=params["token"]
        ).one_or_none()
        if held is not None:
            self._run(connection, name, **params)
        return held

    def _why_lost(
        self, connection: Connection, resource: str, holder: str, token: int | None, reason: str | None = None
    ) -> str:
        """Why a renew or release matched nothing (``reason``, when the caller knows it), logged as
        LOST in the caller's transaction."""
        if reason is None:
            reason = self._peek(connection, resource).why_not_held_by(holder, token, "the lease was never granted")
        self._log(connection, resource, "LOST", holder, token, {"reason": reason})
        return reason

    def _peek(self, connection: Connection, resource: str) -> LeaseStatus:
        return builtin_lease(connection, self._schema, resource)

    def _run(self, connection: Connection, name: str, **params: Any) -> Any:
        return connection.execute(statement(name, self._schema, self._dialect), params)

    def _log(
        self,
        connection: Connection,
        resource: str,
        kind: str,
        holder: str | None,
        token: int | None,
        detail: dict[str, Any] | None = None,
        at: datetime | None = None,
    ) -> None:
        log_event(
            connection, self._schema, resource=resource, kind=kind, holder=holder, token=token, detail=detail, at=at
        )


def builtin_lease(connection: Connection, quoted_schema: str, resource: str) -> LeaseStatus:
    """The built-in service's lease on ``resource``, as the database's clock sees it now."""
    row = connection.execute(statement("lease_peek", quoted_schema, connection.dialect.name), {"resource": resource})
    return _status(dialect_for(connection), resource, row.one())


def _replication(connection: Connection, synchronous: bool) -> str | None:
    """How a grant is replicated (``lease.replication``): known on PostgreSQL only."""
    if not dialect_for(connection).replication_known:
        return None
    return "synchronous" if synchronous else "asynchronous"


def _status(dialect: Dialect, resource: str, row: Row[Any]) -> LeaseStatus:
    return LeaseStatus(
        resource=resource,
        holder=row.holder,
        token=int(row.token),
        ttl_ms=None if row.ttl_ms is None else int(row.ttl_ms),
        granted_at=_moment(dialect, row.granted_at),
        expires_at=_moment(dialect, row.expires_at),
        expired=bool(row.expired),
        implausible=bool(row.implausible),
        fence_token=None if row.fence_token is None else int(row.fence_token),
        replication=row.replication,
    )


def _implausible(dialect: Dialect, lease: Row[Any]) -> dict[str, Any]:
    """The EXPIRE detail of a lease granted further in the future than its TTL, treated as expired."""
    return {
        "implausible": True,
        "granted_at": dialect.utc(lease.granted_at).isoformat(),
        "expires_at": dialect.utc(lease.expires_at).isoformat(),
    }


def _moment(dialect: Dialect, value: datetime | str | None) -> datetime | None:
    """A lease time in UTC (None: none), as the dialect reads it (:meth:`Dialect.utc`)."""
    return None if value is None else dialect.utc(value)


@contextmanager
def _busy_when_locked(resource: str) -> Iterator[None]:
    """A renew or release that waited :data:`LEASE_ROW_WAIT_MS` for another lease transaction: busy."""
    try:
        yield
    except DBAPIError as error:
        if not is_lock_contention(error):
            raise
        raise LeaseBusy(
            resource, None, f"{LEASE_TRANSACTION_IN_PROGRESS}; waited {format_duration(LEASE_ROW_WAIT_MS)} for it"
        ) from None


def _busy(lease: LeaseStatus) -> LeaseBusy:
    """Busy, saying why: a live holder, or (the lease free or expired) a lease transaction that
    kept the lease row locked until ``--wait`` ran out."""
    if lease.live_holder is not None:
        expires = lease.expires_at.isoformat() if lease.expires_at else "an unknown time"
        return LeaseBusy(lease.resource, lease.holder, f"held by {lease.holder} (token {lease.token}) until {expires}")
    if lease.holder is None:
        last = f"the lease is free (last token issued: {lease.token})"
    else:
        last = f"the lease of {lease.holder} (token {lease.token}) has expired"
    return LeaseBusy(lease.resource, None, f"{LEASE_TRANSACTION_IN_PROGRESS}, and {last}")


#: How long a woken wait may last at most: a lease that expires (its holder paused or died) sends
#: no notification, so this is also how late a waiter may notice an expiry.
LONGEST_PAUSE_S = 1.0


class ReleaseWakeups:
    """Pauses between grant attempts that a release of ``resource`` cuts short."""

    def __init__(self, connection: Connection, quoted_schema: str, resource: str) -> None:
        self._connection = connection
        self._schema = quoted_schema
        self._resource = resource
        self._listening = False
        self._driver = dialect_for(connection).notifying_driver(connection)

    @property
    def longest_pause_s(self) -> float | None:
        """The cap of the pause while a release can wake it; None when it cannot (plain sleep)."""
        return LONGEST_PAUSE_S if self._driver is not None else None

    def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less if the lease of our resource is released meanwhile.

        The first pause starts listening: an uncontended grant never pays for it, and a release
        that came between the busy attempt and the LISTEN costs one short first pause at most.
        """
        driver = self._driver
        if driver is None or self._connection.in_transaction():
            time.sleep(seconds)
            return
        if not self._listening:
            self._connection.execute(statement("lease_listen", self._schema))
            self._connection.commit()
            self._listening = True
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            for notice in driver.notifies(timeout=remaining, stop_after=1):
                if notice.payload == self._resource:
                    return

    def stop(self) -> None:
        """Stop hearing releases once granted (the holder's connection need not collect them)."""
        if self._listening:
            self._listening = False
            self._connection.execute(statement("lease_unlisten", self._schema))
            self._connection.commit()
