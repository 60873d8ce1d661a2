"""The database half of every grant, per dialect: wait for in-flight writers, then advance the fence.

Run on the fence database whichever service issued the token (the built-in one or Redis); every
transaction of a lease service's own connection goes through :meth:`FenceOnGrant.transaction`.

* PostgreSQL: any in-flight migration holds the fence row's lock (its claim keeps it until it
  commits), so a grant waits for that row, at most what is left of ``--wait`` (``lock_timeout``).
  With ``--preempt`` the transactions holding a claim on the resource are cancelled first and roll
  back completely.
* SQLite has no row locks and one writer at a time. The grant's ``BEGIN IMMEDIATE`` takes the
  database's write lock, which serialises it with every in-flight migration and every other grant;
  the connection's busy timeout, set to what is left of ``--wait`` for that BEGIN, bounds the wait.
  Another process's SQLite transaction cannot be cancelled: ``--preempt`` is refused before anything
  is touched (:func:`check_preempt`).
* MySQL and MariaDB: every pre-check writer holds the resource's named lock for its whole run, so a
  grant takes that lock (at most what is left of ``--wait``) and holds it until it has committed.
  With ``--preempt`` the session holding it is killed first; its revision stays marked dirty.
"""

from __future__ import annotations

import sqlite3
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ClassVar

from sqlalchemy import Connection, Engine, RootTransaction
from sqlalchemy.exc import DBAPIError, OperationalError

from ..connections import own_connection
from ..dialects import dialect_for, ensure_installed
from ..dialects.statements import statement
from ..dialects.waits import (
    SLICE_MS,
    WAIT_REPORT_INTERVAL_S,
    LockWait,
    NamedLock,
    WaitBound,
    describe_holders,
    fence_holders,
    wait_in_slices,
)
from ..errors import ImplausibleClock, LeaseBusy, UsageError, sqlstate_of
from ..fence.tokens import advance_fence, detach_fence
from ..progress import SILENT, Progress
from .model import LeaseStatus
from .standby_waits import SYNCHRONOUS_WAIT_FLOOR_MS, CommitWatch

_LOCK_NOT_AVAILABLE = "55P03"
_PREEMPT_GRACE_MS = 5000
LEASE_ROW_WAIT_MS = 5000
"""How long ``lease renew``, ``release`` and ``status`` (no ``--wait`` of their own) wait for a lock
held by another lease transaction (PostgreSQL, MySQL): then busy."""
_STUCK_LEASE_TRANSACTION_MS = 1000  # idle this long inside a lease transaction: its process is not running

LEASE_TRANSACTION_IN_PROGRESS = (
    "another grant, renew or release of it has not finished (its process may be paused or stopped)"
)
_LARGEST_CLOCK_LEAD_DAYS = 366  # SQLite: a grant this long after the newest logged event is a clock set wrong
DETACH_WAIT_MS = 10_000
_UNCONTENDED_BEGIN_S = 0.01  # an uncontended BEGIN IMMEDIATE takes well under a millisecond
_BUSY_SLICE_MS = 250  # a grant waits for SQLite's write lock in slices this long (signals between)

IN_FLIGHT = (
    "a migration under an older token is still in flight (its holder's lease has expired); "
    "wait for it, or pass --preempt to cancel it"
)
SQLITE_WRITER_IN_FLIGHT = (
    "another writer holds the SQLite database (a migration in flight, or another grant); "
    "wait for it with a longer --wait (--preempt is not available on SQLite)"
)
SQLITE_WRITE_LOCK = "SQLite's write lock"
PREEMPT_ON_SQLITE = (
    "--preempt is not available on SQLite: a grant cannot cancel another process's SQLite "
    "transaction; wait for the migration in flight with --wait instead (nothing was changed)"
)

_by_dialect: dict[str, type[FenceOnGrant]] = {}


def check_preempt(engine: Engine, preempt: bool) -> None:
    """Refuse ``--preempt`` on SQLite, before the lease service touches the database."""
    if preempt and not dialect_for(engine).can_preempt:
        raise UsageError(PREEMPT_ON_SQLITE)


@contextmanager
def lease_connection(engine: Engine) -> Iterator[Connection]:
    """The lease service's own connection on ``engine``.

    On SQLite every transaction on it is ``BEGIN IMMEDIATE`` (:mod:`..dialects.sqlite_transactions`)
    until it is closed, also after env.py has finished (a run releases its lease then): the
    dialect's :meth:`~fencemigrate.dialects.Dialect.managed_transactions`. Closed rolled back, or
    invalidated when its session is gone (:func:`..connections.own_connection`).
    """
    with dialect_for(engine).managed_transactions():
        with own_connection(engine) as connection:
            yield connection


def fence_on_grant(connection: Connection, quoted_schema: str) -> FenceOnGrant:
    """The grant's database half for the connection's dialect."""
    return _by_dialect[dialect_for(connection).name](connection, quoted_schema)


class FenceOnGrant(ABC):
    """Transactions, waits and the fence advance of grants, on a lease service's own connection.

    A subclass names the dialect it serves in ``dialect`` and is found by :func:`fence_on_grant`.
    """

    dialect: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _by_dialect[cls.dialect] = cls

    def __init__(self, connection: Connection, quoted_schema: str) -> None:
        self._connection = connection
        self._schema = quoted_schema
        self.waited_for_writer = False
        """Whether the last :meth:`transaction` began only after another writer finished (SQLite):
        that writer may have done what the grant's caller came to do."""
        self.commit_cut_short = False
        """Whether the last :meth:`transaction`'s COMMIT stopped waiting for a synchronous standby
        before one confirmed it (PostgreSQL, :mod:`.standby_waits`): committed on the primary only."""
        self.progress: Progress = SILENT
        """Hears a grant's wait for an in-flight writer (:meth:`lock_fence`, SQLite's BEGIN): set by
        the lease service for the grant it makes."""

    @abstractmethod
    def install(self) -> None:
        """When the lease service opens: install the fence schema unless it is current."""

    @abstractmethod
    def transaction(self, resource: str, wait_ms: int | None = None) -> AbstractContextManager[RootTransaction]:
        """A transaction of the lease connection. A grant passes ``wait_ms``, what is left of
        ``--wait``: LeaseBusy when another writer holds the database longer (SQLite)."""

    @contextmanager
    def in_transaction(self, resource: str, within: Connection | None = None) -> Iterator[Connection]:
        """The connection for a lease operation, in a transaction: ``within``, in its owner's open
        transaction (which its owner commits), or else the lease connection in one of its own."""
        if within is not None:
            yield within
            return
        with self.transaction(resource):
            yield self._connection

    def enter_lease(self, resource: str, remaining_ms: int, preempt: bool) -> tuple[int, ...] | None:
        """Before a grant, renew or release touches the lease row: with ``preempt``, end the lease
        transactions stuck on it (:meth:`cancel_stuck_lease_transactions`); their session ids.
        None when another lease transaction keeps the lease longer than ``remaining_ms`` (MySQL)."""
        return self.cancel_stuck_lease_transactions(resource, remaining_ms) if preempt else ()

    def cancel_stuck_lease_transactions(self, resource: str, remaining_ms: int) -> tuple[int, ...]:
        """``--preempt``: end the lease transactions stuck on ``resource`` (their process paused with the
        lease row changed or locked) while the lease has no live holder; their backend pids.

        PostgreSQL here; MySQL in :meth:`enter_lease` (by the lease lock); SQLite refuses ``--preempt``.
        """
        return ()

    def cancel_stuck_grants(self, resource: str, remaining_ms: int) -> tuple[int, ...]:
        """``--preempt`` by a grant holding the Redis lease key (no other lease on ``resource`` is
        live): end the other grants' transactions stuck in :meth:`serialise_grants` (their process
        paused); their backend pids. PostgreSQL; on MySQL :meth:`lock_fence` kills whoever holds the
        resource's named lock, a stuck grant too; SQLite refuses ``--preempt``."""
        return ()

    def check_before_grant(self, resource: str, check: Callable[[Connection], None]) -> None:
        """Run ``check`` (a refusal by the resource's token source) in a short transaction of its
        own before a grant's, so that a grant it refuses waits for no migration and preempts nobody.
        The grant checks again once it has locked the fence (:func:`..fence.tokens.recorded_source`)."""
        with self.transaction(resource):
            check(self._connection)

    def check_clock(self) -> None:  # noqa: B027 (a hook: most dialects have nothing to check)
        """Before the built-in service grants on this database's clock: ImplausibleClock when that
        clock cannot be trusted. A server's clock (PostgreSQL, MySQL) is everyone's: nothing to check."""

    @abstractmethod
    def serialise_grants(self, resource: str, remaining_ms: int) -> None:
        """Make other grants of ``resource`` wait until this transaction ends (a lease service
        with no lease row to lock: Redis). LeaseBusy after ``remaining_ms``."""

    @abstractmethod
    def lock_fence(self, resource: str, remaining_ms: int, preempt: bool) -> tuple[int | None, tuple[int, ...]]:
        """Wait for the in-flight migration on ``resource``; returns the fence token (None before the
        first claim) and the backend pids of the stale writers cancelled. LeaseBusy when the wait
        runs out."""

    def detach(self, resource: str, lease_now: Callable[[], LeaseStatus]) -> LeaseStatus:
        """``lease detach`` in one transaction that waits (at most :data:`DETACH_WAIT_MS`) as a grant
        does, so no grant comes in between: LeaseBusy while ``lease_now()`` has a live holder."""
        with self.transaction(resource, DETACH_WAIT_MS):
            self.serialise_grants(resource, DETACH_WAIT_MS)
            self.lock_fence(resource, DETACH_WAIT_MS, False)
            lease = lease_now()
            if lease.live_holder is not None:
                expires = lease.expires_at.isoformat() if lease.expires_at else "?"
                raise LeaseBusy(
                    resource,
                    lease.holder,
                    f"held by {lease.holder} (token {lease.token}) until {expires}; "
                    "detach it once that lease is released or has expired",
                )
            detach_fence(self._connection, self._schema, resource)
        return lease

    def record_redis_grant(self, resource: str, token: int) -> None:
        """Before a Redis grant's fence advance, in its transaction: record ``token`` as the last token
        Redis issued for ``resource`` (``record_redis_grant.sql``, never lowered), which the lease guard
        holds a Redis-sourced fence to."""
        self._run("record_redis_grant", resource=resource, token=token)

    def advance(self, resource: str, token: int, source: str, incarnation: str | None) -> None:
        """Advance the fence of ``resource`` to ``token``, just issued by ``source`` on ``incarnation``
        (:mod:`.epochs`), in the grant's transaction: older holders are now fenced, and tokens
        ``source`` never issued are refused."""
        advance_fence(self._connection, self._schema, resource, token, source, incarnation)

    def _run(self, name: str, **params: Any) -> Any:
        return self._connection.execute(statement(name, self._schema, self._connection.dialect.name), params)


class PostgresFenceOnGrant(FenceOnGrant):
    """Row and advisory locks, bounded by ``lock_timeout``; ``--preempt`` terminates stale writers."""

    dialect = "postgresql"

    def install(self) -> None:
        with self._connection.begin():
            ensure_installed(self._connection, self._schema)

    @contextmanager
    def transaction(self, resource: str, wait_ms: int | None = None) -> Iterator[RootTransaction]:
        """A transaction whose every lock wait is bounded from its first statement: ``wait_ms``
        (what is left of ``--wait``), else :data:`LEASE_ROW_WAIT_MS`; and its COMMIT's wait for a
        synchronous standby too (at least :data:`SYNCHRONOUS_WAIT_FLOOR_MS`), which
        :attr:`commit_cut_short` then reports."""
        bound_ms = LEASE_ROW_WAIT_MS if wait_ms is None else wait_ms
        watch = CommitWatch(self._connection)
        try:
            with self._connection.begin() as transaction:
                self._run("lock_timeout", timeout_ms=str(max(bound_ms, 1)))
                yield transaction
                if transaction.is_active:
                    watch.arm(max(bound_ms, SYNCHRONOUS_WAIT_FLOOR_MS))
        finally:
            watch.disarm()
            self.commit_cut_short = watch.cut_short

    def record_redis_grant(self, resource: str, token: int) -> None:
        """Nothing: the fence advance itself (``advance_fence()``) records the Redis grant."""

    def cancel_stuck_lease_transactions(self, resource: str, remaining_ms: int) -> tuple[int, ...]:
        rows = self._run(
            "preempt_lease_transactions",
            resource=resource,
            idle_ms=_STUCK_LEASE_TRANSACTION_MS,
            wait_ms=max(remaining_ms, _PREEMPT_GRACE_MS),
        )
        return tuple(int(row.pid) for row in rows if row.terminated)

    def cancel_stuck_grants(self, resource: str, remaining_ms: int) -> tuple[int, ...]:
        rows = self._run(
            "preempt_grant_transactions",
            resource=resource,
            idle_ms=_STUCK_LEASE_TRANSACTION_MS,
            wait_ms=max(remaining_ms, _PREEMPT_GRACE_MS),
        )
        return tuple(int(row.pid) for row in rows if row.terminated)

    def serialise_grants(self, resource: str, remaining_ms: int) -> None:
        self._run("lock_timeout", timeout_ms=str(max(remaining_ms, 1)))
        try:
            self._run("grant_lock", resource=resource)
        except DBAPIError as error:
            if sqlstate_of(error) == _LOCK_NOT_AVAILABLE:
                raise LeaseBusy(resource, None, "another grant of this resource is in progress") from None
            raise

    def lock_fence(self, resource: str, remaining_ms: int, preempt: bool) -> tuple[int | None, tuple[int, ...]]:
        self._run("lock_timeout", timeout_ms=str(max(remaining_ms, 1)))
        preempted: tuple[int, ...] = ()
        if preempt:
            grace = max(remaining_ms, _PREEMPT_GRACE_MS)
            rows = self._run("preempt_writers", resource=resource, wait_ms=grace)
            preempted = tuple(int(row.pid) for row in rows if row.terminated)

        started = time.monotonic()
        wait_in_slices(
            resource,
            "the fence",
            WaitBound(remaining_ms, progress=self.progress),
            lambda slice_ms: self._lock_fence_within(resource, slice_ms),
            lambda: fence_holders(self._connection, self._schema, resource),
            busy=lambda holders: f"{IN_FLIGHT} (held by {describe_holders(holders)})",
        )
        left_ms = remaining_ms - round((time.monotonic() - started) * 1000)
        self._run("lock_timeout", timeout_ms=str(max(left_ms, 1)))  # the slices' own ended with them
        token = self._run("fence_lock", resource=resource).scalar()
        return (None if token is None else int(token)), preempted

    def _lock_fence_within(self, resource: str, slice_ms: int) -> bool:
        """One slice of :meth:`lock_fence`, in a savepoint: every claim holds the claim lock (shared)
        until its transaction ends; waiting for it exclusively covers a resource whose fence row does
        not exist yet, and keeps new claims out until the grant has advanced the fence. False when
        it was still held after ``slice_ms``."""
        self._run("fence_wait_savepoint")
        try:
            self._run("lock_timeout", timeout_ms=str(slice_ms))
            self._run("claim_lock", resource=resource)
            self._run("fence_lock", resource=resource)
        except DBAPIError as error:
            if sqlstate_of(error) != _LOCK_NOT_AVAILABLE:
                raise
            self._run("fence_wait_rollback")
            return False
        self._run("fence_wait_release")
        return True


class SqliteFenceOnGrant(FenceOnGrant):
    """One writer at a time: every transaction is ``BEGIN IMMEDIATE``; a grant's waits for it are bounded."""

    dialect = "sqlite"

    def install(self) -> None:
        """Nothing at open: on SQLite every transaction takes the write lock, so installing now would
        wait for a migration in flight beyond ``--wait``. Each :meth:`transaction` installs instead."""

    @contextmanager
    def transaction(self, resource: str, wait_ms: int | None = None) -> Iterator[RootTransaction]:
        """``BEGIN IMMEDIATE``, waiting at most ``wait_ms`` for the write lock (else the connection's
        busy timeout), then the fence schema installed unless current, in the same transaction."""
        with self._begin(resource, wait_ms) as transaction:
            ensure_installed(self._connection, self._schema)
            yield transaction

    def check_before_grant(self, resource: str, check: Callable[[Connection], None]) -> None:
        """Nothing before the grant: its ``BEGIN IMMEDIATE`` waits for the only writer (which a run
        queued behind another must see, :attr:`waited_for_writer`), and ``--preempt`` is refused on
        SQLite, so the check the grant makes under that lock is the first to matter."""

    def check_clock(self) -> None:  # noqa: B027 (a hook: most dialects have nothing to check)
        """SQLite's clock is the clock of whichever machine writes the file: refuse to grant when it
        reads more than :data:`_LARGEST_CLOCK_LEAD_DAYS` after the newest event in the fence event
        log, as a clock set years ahead does (its lease would look live to everyone until then)."""
        row = self._run("clock_lead").one()
        if row.days_ahead is not None and row.days_ahead > _LARGEST_CLOCK_LEAD_DAYS:
            raise ImplausibleClock(
                f"grant refused: SQLite's clock ({row.now}, this machine's) is {int(row.days_ahead)} days ahead "
                f"of the newest event in the fence event log ({row.newest}): a lease granted by it would look "
                "live to every other client until then. Fix this machine's clock; nothing was changed"
            )

    def serialise_grants(self, resource: str, remaining_ms: int) -> None:
        """Nothing to do: the grant's ``BEGIN IMMEDIATE`` already made every other grant wait."""

    def lock_fence(self, resource: str, remaining_ms: int, preempt: bool) -> tuple[int | None, tuple[int, ...]]:
        """The fence token: the grant's ``BEGIN IMMEDIATE`` already waited for the in-flight migration."""
        assert not preempt, "check_preempt refuses --preempt on SQLite before a grant starts"
        token = self._run("fence_lock", resource=resource).scalar()
        return (None if token is None else int(token)), ()

    def _begin(self, resource: str, wait_ms: int | None) -> RootTransaction:
        """Begin, waiting at most ``wait_ms`` for the write lock (COMMIT may still wait for readers
        as usual). SQLite waits inside its busy handler, where no Python signal handler runs, so the
        wait is taken in slices of :data:`_BUSY_SLICE_MS`: a SIGTERM stops it within one slice.
        PRAGMAs go to the driver: through SQLAlchemy they would BEGIN first."""
        if wait_ms is None:
            return self._connection.begin()
        driver = self._connection.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        (usual,) = driver.execute(str(statement("busy_timeout", self._schema, "sqlite"))).fetchone()
        started = time.monotonic()
        deadline = started + wait_ms / 1000
        next_report = started + SLICE_MS / 1000
        try:
            while True:
                left_ms = max(0, int((deadline - time.monotonic()) * 1000))
                driver.execute(self._busy_timeout(min(left_ms, _BUSY_SLICE_MS)))
                try:
                    transaction = self._connection.begin()
                except OperationalError as error:
                    if not _is_busy(error):
                        raise
                    if left_ms <= _BUSY_SLICE_MS:
                        raise LeaseBusy(resource, None, SQLITE_WRITER_IN_FLIGHT) from None
                    if (now := time.monotonic()) >= next_report:
                        waited_ms, remaining_ms = round((now - started) * 1000), round((deadline - now) * 1000)
                        self.progress.waiting_for_lock(
                            LockWait(resource, SQLITE_WRITE_LOCK, (), waited_ms, max(remaining_ms, 0))
                        )
                        next_report = now + WAIT_REPORT_INTERVAL_S
                    continue
                self.waited_for_writer = time.monotonic() - started > _UNCONTENDED_BEGIN_S
                return transaction
        finally:
            driver.execute(self._busy_timeout(int(usual)))

    def _busy_timeout(self, milliseconds: int) -> str:
        """``lock_timeout.sql`` with the value written in (PRAGMA takes no bound parameters)."""
        clause = statement("lock_timeout", self._schema, "sqlite").bindparams(timeout_ms=int(milliseconds))
        return str(clause.compile(dialect=self._connection.dialect, compile_kwargs={"literal_binds": True}))


class MysqlFenceOnGrant(FenceOnGrant):
    """The resource's named lock, held by every pre-check writer for its whole run; ``--preempt``
    kills the session holding it."""

    dialect = "mysql"

    def __init__(self, connection: Connection, quoted_schema: str) -> None:
        super().__init__(connection, quoted_schema)
        self._lock: NamedLock | None = None
        self._lease_lock: NamedLock | None = None

    def install(self) -> None:
        ensure_installed(self._connection, self._schema)
        self._connection.commit()

    @contextmanager
    def transaction(self, resource: str, wait_ms: int | None = None) -> Iterator[RootTransaction]:
        """A transaction whose row lock waits are bounded from its first statement (``wait_ms``, what
        is left of ``--wait``, else :data:`LEASE_ROW_WAIT_MS`, in whole seconds); the named lock a
        grant took in it, and the lease lock of :meth:`enter_lease`, are released once it has ended
        (or with the connection, when it dies)."""
        try:
            with self._connection.begin() as transaction:
                wait = LEASE_ROW_WAIT_MS if wait_ms is None else wait_ms
                self._run("lock_timeout", timeout_s=max(1, -(-wait // 1000)))
                yield transaction
        finally:
            for lock in (self._lock, self._lease_lock):
                if lock is not None:
                    lock.release()
            self._lock = self._lease_lock = None

    def enter_lease(self, resource: str, remaining_ms: int, preempt: bool) -> tuple[int, ...] | None:
        """Take the resource's lease lock (``lease_lock_name.sql``), at most ``remaining_ms``, before
        the writers' named lock: every lease transaction holds it, so ``IS_USED_LOCK`` names the
        session inside one. With ``preempt``, that session is killed first when it has been idle for
        1 s and the lease has no live holder (``stuck_lease_session.sql``)."""
        lock = NamedLock(self._connection, self._schema, resource, "lease_lock_name")
        killed: tuple[int, ...] = ()
        wait_ms = remaining_ms
        if preempt:
            stuck = self._run(
                "stuck_lease_session",
                lock_name=lock.name,
                resource=resource,
                idle_s=_STUCK_LEASE_TRANSACTION_MS // 1000,
            ).scalar()
            if stuck is not None:
                self._run("preempt_writer", connection_id=int(stuck))
                killed = (int(stuck),)
                wait_ms = max(remaining_ms, _PREEMPT_GRACE_MS)  # the server ends the killed session
        if not lock.acquire(wait_ms):
            return None
        self._lease_lock = lock
        return killed

    def serialise_grants(self, resource: str, remaining_ms: int) -> None:
        """Nothing to do: :meth:`lock_fence` takes the resource's named lock, which every grant takes."""

    def lock_fence(self, resource: str, remaining_ms: int, preempt: bool) -> tuple[int | None, tuple[int, ...]]:
        lock = NamedLock(self._connection, self._schema, resource)
        preempted: tuple[int, ...] = ()
        wait_ms = remaining_ms
        if preempt:
            writer = lock.holder()
            if writer is not None:
                self._run("preempt_writer", connection_id=writer)
                preempted = (writer,)
                wait_ms = max(remaining_ms, _PREEMPT_GRACE_MS)  # the server ends the killed session
        lock.take(
            WaitBound(wait_ms, progress=self.progress),
            busy=lambda holders: IN_FLIGHT + (f" (held by {describe_holders(holders)})" if holders else ""),
        )
        self._lock = lock
        self._run("lock_timeout", timeout_s=max(1, -(-remaining_ms // 1000)))
        token = self._run("fence_lock", resource=resource).scalar()
        return (None if token is None else int(token)), preempted


def _is_busy(error: OperationalError) -> bool:
    code = getattr(error.orig, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_BUSY
