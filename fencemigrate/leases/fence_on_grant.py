"""The database half of every grant: wait for in-flight writers, then advance the fence.

Run on the fence database whichever service issued the token (the built-in one or Redis); every
transaction of a lease service's own connection goes through the dialect's grant locks
(:class:`~fencemigrate.dialects.base.GrantLocks`, one subclass per dialect), whose waits are:

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

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine

from ..connections import own_connection
from ..dialects import dialect_for
from ..dialects.base import GrantLocks
from ..errors import LeaseBusy, UsageError
from ..fence.tokens import detach_fence
from .model import LeaseStatus

LEASE_TRANSACTION_IN_PROGRESS = (
    "another grant, renew or release of it has not finished (its process may be paused or stopped)"
)
DETACH_WAIT_MS = 10_000
PREEMPT_ON_SQLITE = (
    "--preempt is not available on SQLite: a grant cannot cancel another process's SQLite "
    "transaction; wait for the migration in flight with --wait instead (nothing was changed)"
)


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


def fence_on_grant(connection: Connection, quoted_schema: str) -> GrantLocks:
    """The grant's transactions and waits for the connection's dialect."""
    return dialect_for(connection).grant_locks(connection, quoted_schema)


def detach(
    locks: GrantLocks, connection: Connection, quoted_schema: str, resource: str, lease_now: Callable[[], LeaseStatus]
) -> LeaseStatus:
    """``lease detach`` on the lease ``connection`` of ``locks``, in one transaction that waits (at most
    :data:`DETACH_WAIT_MS`) as a grant does, so no grant comes in between: LeaseBusy while
    ``lease_now()`` has a live holder."""
    with locks.transaction(resource, DETACH_WAIT_MS):
        locks.serialise_grants(resource, DETACH_WAIT_MS)
        locks.lock_fence(resource, DETACH_WAIT_MS, False)
        lease = lease_now()
        if lease.live_holder is not None:
            expires = lease.expires_at.isoformat() if lease.expires_at else "?"
            raise LeaseBusy(
                resource,
                lease.holder,
                f"held by {lease.holder} (token {lease.token}) until {expires}; "
                "detach it once that lease is released or has expired",
            )
        detach_fence(connection, quoted_schema, resource)
    return lease
