"""Leases in Redis (``--lease-url redis://...``), for teams that already run one.

Expiry is Redis's own (PX, PTTL, TIME): the client's clock never decides who holds a lease.
A grant has two halves:

1. Redis: take the lease key with SET NX PX (a holder that already has it goes on to a new
   grant); busy while another holder's key lives;
2. one transaction on the fence database: lock the resource's grants and its fence row (waiting
   at most what is left of ``--wait`` behind an in-flight migration, or cancelling it with
   ``--preempt``), then issue the token in Redis (INCR of a counter first raised to the fence's
   token, so tokens never go backwards when Redis loses its data), record it as the last token
   Redis issued (``redis_grant``, which the lease guard holds the fence to; on PostgreSQL the fence
   advance records it), advance the fence to it and log the events. The previous holder is fenced
   when this transaction commits. How the transaction waits is the fence database's
   (:mod:`.fence_on_grant`): PostgreSQL, SQLite or MySQL.

When the database half fails, the Redis half is given back (only what is still this grant's).

The Redis half (:class:`RedisLeaseStore`) is three keys per resource, all judged by Redis's own
clock:

* ``fencemigrate:lease:{resource}``: the lease, ``<token>:<holder>`` with a PX expiry (token
  ``0`` while a grant is being made);
* ``fencemigrate:token:{resource}``: the token counter (INCR), seeded from the database fence;
* ``fencemigrate:last:{resource}``: the last grant (a hash without expiry: holder, token, ttl_ms,
  granted_ms, expires_ms, state ``held``/``released``), so that an expiry is seen after the
  lease key is gone.

Every script runs atomically in Redis; the Lua sources live in ``lua/`` next to this module.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib.resources import files
from typing import Any

import redis
from sqlalchemy import Connection, Engine

from ..config import format_duration
from ..dialects.base import SYNCHRONOUS_WAIT_FLOOR_MS
from ..dialects.statements import statement
from ..errors import LEASE_SERVICE, REDIS, DatabaseError, GrantNotReplicated, LeaseBusy, LeaseLost, UsageError
from ..fence.events import log_event
from ..fence.tokens import advance_fence, check_room, recorded_source, superseded_by
from ..progress import SILENT, LeaseWait, Progress
from ..scrub import scrub_secrets
from .database import builtin_lease
from .epochs import Incarnation, next_token, read_incarnation
from .fence_on_grant import detach, fence_on_grant, lease_connection
from .model import Grant, LeaseRequest, LeaseStatus, poll_for_grant
from .standby_waits import force_synchronous_commit

_LUA = files("fencemigrate.leases") / "lua"
# How long a call waits for Redis (``?socket_timeout=`` in the URL wins): a grant what is left of
# ``--wait``, at least _LEAST_REPLY_MS; renew, release and status (no --wait) UNHURRIED_REPLY_MS.
# The scripts are short: no reply in that time means the server is paused, overloaded or gone.
UNHURRIED_REPLY_MS = 5000
_LEAST_REPLY_MS = 500


@cache
def _lua_source(name: str) -> str:
    """``lua/{name}.lua`` with the shared helpers of ``lua/common.lua`` in front."""
    common = (_LUA / "common.lua").read_text(encoding="utf-8")
    return common + "\n" + (_LUA / f"{name}.lua").read_text(encoding="utf-8")


def lease_key(resource: str) -> str:
    """The key holding ``<token>:<holder>`` with the lease's expiry."""
    return f"fencemigrate:lease:{resource}"


def token_key(resource: str) -> str:
    """The key holding the resource's token counter."""
    return f"fencemigrate:token:{resource}"


def last_key(resource: str) -> str:
    """The hash holding the resource's last grant."""
    return f"fencemigrate:last:{resource}"


def from_ms(milliseconds: int) -> datetime:
    """A Redis-clock time in milliseconds since the epoch, as an aware UTC datetime."""
    return datetime.fromtimestamp(milliseconds / 1000, tz=UTC)


@dataclass(frozen=True)
class LastGrant:
    """The last grant recorded for a resource (it outlives the lease key)."""

    holder: str
    token: int
    ttl_ms: int
    granted_ms: int
    expires_ms: int
    released: bool

    @staticmethod
    def parse(fields: list[Any]) -> LastGrant | None:
        """From the six fields the scripts return (None when no grant is recorded)."""
        holder, token, ttl_ms, granted_ms, expires_ms, state = fields
        if holder is None or token is None:
            return None
        return LastGrant(str(holder), int(token), int(ttl_ms), int(granted_ms), int(expires_ms), state == "released")

    def as_fields(self) -> list[str]:
        """Field/value pairs to store it back."""
        return [
            "holder",
            self.holder,
            "token",
            str(self.token),
            "ttl_ms",
            str(self.ttl_ms),
            "granted_ms",
            str(self.granted_ms),
            "expires_ms",
            str(self.expires_ms),
            "state",
            "released" if self.released else "held",
        ]


@dataclass(frozen=True)
class LeaseValue:
    """What the lease key holds: the holder and its token (0 while the grant is being made)."""

    holder: str
    token: int

    @staticmethod
    def parse(value: str) -> LeaseValue:
        """From ``<token>:<holder>``."""
        token, _, holder = value.partition(":")
        return LeaseValue(holder, int(token))

    def __str__(self) -> str:
        return f"{self.token}:{self.holder}"


@dataclass(frozen=True)
class Busy:
    """Another holder has the lease key now."""

    lease: LeaseValue
    expires_at: datetime


@dataclass(frozen=True)
class Issued:
    """A token issued to the holder of the lease key."""

    token: int
    seeded: bool  # the counter was behind the database fence (Redis lost it) and was raised to it
    granted_ms: int
    previous: LastGrant | None  # the last grant this one replaced


@dataclass(frozen=True)
class Peek:
    """The three keys of a resource, read at one instant of Redis's clock."""

    lease: LeaseValue | None
    pttl_ms: int
    counter: int
    now_ms: int
    last: LastGrant | None


class RedisLeaseStore:
    """The lease keys of every resource in one Redis database."""

    def __init__(self, url: str) -> None:
        self._given_url = url
        self._url = scrub_secrets(url)
        self._reply_ms = UNHURRIED_REPLY_MS
        self._client = self._connect()
        self._scripts = {
            name: self._client.register_script(_lua_source(name))
            for name in ("take", "issue", "give_back", "renew", "release", "peek")
        }

    def reply_within(self, milliseconds: int | None) -> None:
        """Bound each call from now on: ``milliseconds`` (what is left of ``--wait``, at least half
        a second), or :data:`UNHURRIED_REPLY_MS` when None. A new bound is a new connection."""
        wanted = UNHURRIED_REPLY_MS if milliseconds is None else max(milliseconds, _LEAST_REPLY_MS)
        if wanted != self._reply_ms:
            self._client.close()
            self._reply_ms = wanted
            self._client = self._connect()

    def ping(self) -> None:
        """DatabaseError unless the server answers."""
        try:
            self._client.ping()
        except redis.RedisError as error:
            raise self._failed(error) from None

    def run_id(self) -> str:
        """The Redis server's run id (``INFO server``): a new one at every restart and on the replica
        a failover promotes, so it tells when the last writes may have been lost."""
        try:
            return str(self._client.info("server")["run_id"])
        except redis.RedisError as error:
            raise self._failed(error) from None

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def _connect(self) -> redis.Redis:
        seconds = self._reply_ms / 1000
        try:
            return redis.Redis.from_url(
                self._given_url, decode_responses=True, socket_connect_timeout=seconds, socket_timeout=seconds
            )
        except ValueError as error:
            raise UsageError(f"invalid lease backend URL {self._url!r}: {error}") from None

    def take(self, resource: str, holder: str, ttl_ms: int) -> bool | Busy:
        """SET NX PX the lease key for a grant: True when taken, False when the holder already has
        it, Busy when another holder has it."""
        reply = self._run("take", [lease_key(resource)], [holder, ttl_ms])
        if reply[0] == "busy":
            return _busy(reply)
        return bool(reply[0] == "taken")

    def issue(self, resource: str, holder: str, floor: int | None, ttl_ms: int) -> Issued | Busy:
        """Issue ``max(counter, floor) + 1`` unless another holder has the lease key now (``floor``:
        the database fence's token, or the last token before a new epoch)."""
        reply = self._run(
            "issue",
            [lease_key(resource), token_key(resource), last_key(resource)],
            [holder, floor or 0, ttl_ms],
        )
        if reply[0] == "busy":
            return _busy(reply)
        return Issued(int(reply[1]), bool(reply[2]), int(reply[3]), LastGrant.parse(list(reply[4:10])))

    def give_back(self, resource: str, value: LeaseValue, issued: Issued | None) -> None:
        """Undo a grant whose database half failed (only what is still this grant's)."""
        previous = issued.previous.as_fields() if issued is not None and issued.previous else []
        self._run(
            "give_back",
            [lease_key(resource), last_key(resource)],
            [str(value), "" if issued is None else issued.token, *previous],
        )

    def renew(self, resource: str, holder: str, token: int | None, ttl_ms: int | None) -> tuple[int, bool, int] | None:
        """PEXPIRE the holder's lease by ``ttl_ms`` (None: its grant's TTL): (token, renewed after
        expiry, the TTL it was renewed by), or None when it is not theirs."""
        reply = self._run(
            "renew",
            [lease_key(resource), last_key(resource)],
            [holder, _wanted(token), "" if ttl_ms is None else ttl_ms],
        )
        return None if reply is None else (int(reply[0]), bool(reply[1]), int(reply[2]))

    def release(self, resource: str, holder: str, token: int | None) -> int | None:
        """DEL the holder's lease: the released token, or None when it is not theirs."""
        reply = self._run("release", [lease_key(resource), last_key(resource)], [holder, _wanted(token)])
        return None if reply is None else int(reply)

    def peek(self, resource: str) -> Peek:
        """The resource's keys as Redis sees them now."""
        reply = self._run("peek", [lease_key(resource), token_key(resource), last_key(resource)], [])
        value, pttl, counter, now = reply[:4]
        return Peek(
            lease=None if value is None else LeaseValue.parse(value),
            pttl_ms=int(pttl),
            counter=0 if counter is None else int(counter),
            now_ms=int(now),
            last=LastGrant.parse(list(reply[4:10])),
        )

    def _run(self, name: str, keys: list[str], args: list[str | int]) -> Any:
        try:
            return self._scripts[name](keys=keys, args=args, client=self._client)
        except redis.RedisError as error:
            raise self._failed(error) from None

    def _failed(self, error: redis.RedisError) -> DatabaseError:
        if isinstance(error, redis.TimeoutError):
            return DatabaseError(
                f"lease service {self._url} did not answer within {format_duration(self._reply_ms)} "
                "(paused, overloaded or unreachable); try again later"
            )
        return DatabaseError(f"lease service {self._url} failed: {scrub_secrets(str(error))}")


def _busy(reply: list[Any]) -> Busy:
    """From a script's ``{'busy', lease value, PTTL, Redis time in ms}``."""
    return Busy(LeaseValue.parse(reply[1]), from_ms(int(reply[3]) + max(int(reply[2]), 0)))


def _wanted(token: int | None) -> str:
    return "" if token is None else str(token)


class RedisLeases:
    """Leases and tokens in Redis; the fence, and the event log, in the migration database."""

    def __init__(self, lease_url: str, engine: Engine, schema: str, wait_ms: int | None = None) -> None:
        """``wait_ms``: the caller's ``--wait``, which bounds the first call (PING) too."""
        self._store = RedisLeaseStore(lease_url)
        self._resources = ExitStack()
        self._resources.callback(self._store.close)
        self._dialect = engine.dialect.name
        self._schema = engine.dialect.identifier_preparer.quote(schema)
        try:
            self._store.reply_within(wait_ms)
            self._store.ping()
            self._store.reply_within(None)
            self._connection = self._resources.enter_context(lease_connection(engine))
            self._fence = fence_on_grant(self._connection, self._schema)
            self._fence.install()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the Redis and the database connections."""
        self._resources.close()

    # -- the four operations ---------------------------------------------------------------

    def acquire(
        self, request: LeaseRequest, stop_waiting: Callable[[], bool] | None = None, progress: Progress = SILENT
    ) -> Grant:
        """Grant the lease, polling while another live holder has it, for at most ``wait_ms``; every
        Redis call waits for its reply at most what is left of it. LeaseBusy at once while the
        resource's tokens come from the built-in lease service and its lease is live."""
        self._fence.check_before_grant(
            request.resource, lambda connection: self._refuse_builtin_live(connection, request.resource)
        )
        self._fence.progress = progress  # a wait for a migration in flight, inside one attempt
        try:
            return poll_for_grant(
                request,
                lambda remaining_ms: self._try_grant(request, remaining_ms),
                lambda outcome: LeaseBusy(request.resource, outcome.lease.holder, _busy_reason(outcome)),
                stop_waiting,
                waiting=lambda outcome, remaining_ms: progress.waiting_for_lease(
                    LeaseWait(_busy_status(request.resource, outcome), remaining_ms)
                ),
            )
        finally:
            self._store.reply_within(None)

    def renew(
        self, resource: str, holder: str, token: int | None, ttl_ms: int | None, within: Connection | None = None
    ) -> Grant:
        """PEXPIRE the holder's lease by ``ttl_ms`` (None: the TTL of its grant, kept in the last-grant
        hash); LeaseLost if it is no longer theirs.

        ``within``: the event goes into that connection's open transaction (see the protocol).
        """
        with self._fence.in_transaction(resource, within) as connection:
            # A grant by the built-in service has superseded every Redis lease on the resource.
            superseded = recorded_source(connection, self._schema, resource) == LEASE_SERVICE
            renewed = None if superseded else self._store.renew(resource, holder, token, ttl_ms)
            if renewed is None:
                reason = self._why_lost(
                    connection, resource, holder, token, superseded_by(LEASE_SERVICE) if superseded else None
                )
            else:
                self._log(
                    connection,
                    resource,
                    "RENEW",
                    holder,
                    renewed[0],
                    {"ttl_ms": renewed[2], "after_expiry": renewed[1], "lease_service": "redis"},
                )
                lease = self._status(connection, resource)
        if renewed is None:
            raise LeaseLost(resource, holder, token, reason)
        return Grant(lease, renewed_after_expiry=renewed[1])

    def release(self, resource: str, holder: str, token: int | None) -> LeaseStatus:
        """DEL the holder's lease; LeaseLost if it is no longer theirs."""
        with self._fence.in_transaction(resource) as connection:
            released = self._store.release(resource, holder, token)
            if released is None:
                reason = self._why_lost(connection, resource, holder, token)
            else:
                self._log(connection, resource, "RELEASE", holder, released, {"lease_service": "redis"})
                lease = self._status(connection, resource)
        if released is None:
            raise LeaseLost(resource, holder, token, reason)
        return lease

    def status(self, resource: str) -> LeaseStatus:
        """The lease as Redis's clock sees it now, with the database fence's token."""
        with self._fence.in_transaction(resource) as connection:
            return self._status(connection, resource)

    def detach(self, resource: str) -> LeaseStatus:
        """Give ``resource`` back to external tokens; LeaseBusy while Redis has a live lease on it,
        or while its tokens come from the built-in lease service and that service's lease is live."""

        def lease_now() -> LeaseStatus:
            self._refuse_builtin_live(self._connection, resource, locked=True)
            return self._status(self._connection, resource)

        return detach(self._fence, self._connection, self._schema, resource, lease_now)

    # -- a grant ---------------------------------------------------------------------------

    def _try_grant(self, request: LeaseRequest, remaining_ms: int) -> Grant | Busy:
        """One attempt: the Grant, or who has the lease key when it is busy."""
        resource, holder = request.resource, request.holder
        self._store.reply_within(remaining_ms)
        taken = self._store.take(resource, holder, request.ttl_ms)
        if isinstance(taken, Busy):
            return taken
        issued: Issued | None = None
        try:
            with self._fence.transaction(resource, remaining_ms) as transaction:
                stuck = self._fence.cancel_stuck_grants(resource, remaining_ms) if request.preempt else ()
                self._fence.serialise_grants(resource, remaining_ms)
                fence_token, writers = self._fence.lock_fence(resource, remaining_ms, request.preempt)
                self._refuse_builtin_live(self._connection, resource, locked=True)
                preempted = stuck + writers
                incarnation = read_incarnation(self._connection, self._schema, resource).also(
                    "redis", self._store.run_id()
                )
                outcome = self._store.issue(
                    resource, holder, self._floor(resource, fence_token, incarnation), request.ttl_ms
                )
                if isinstance(outcome, Busy):  # our key expired during the wait and was taken
                    transaction.rollback()
                    return outcome
                issued = outcome
                check_room(resource, issued.token - 1)  # Redis's counter may have been above the fence
                self._fence.record_redis_grant(resource, issued.token)
                advance_fence(self._connection, self._schema, resource, issued.token, REDIS, incarnation.current)
                previous = self._log_grant(request, issued, fence_token, preempted, incarnation)
                synchronous = force_synchronous_commit(self._connection, self._schema)
        except BaseException:
            if taken or issued is not None:
                self._give_back(resource, LeaseValue(holder, issued.token if issued else 0), issued)
            raise
        if synchronous and self._fence.commit_cut_short:  # the fence advance may be lost in a failover
            self.release(resource, holder, issued.token)
            raise GrantNotReplicated(resource, issued.token, max(remaining_ms, SYNCHRONOUS_WAIT_FLOOR_MS))
        lease = LeaseStatus(
            resource=resource,
            holder=holder,
            token=issued.token,
            ttl_ms=request.ttl_ms,
            granted_at=from_ms(issued.granted_ms),
            expires_at=from_ms(issued.granted_ms + request.ttl_ms),
            fence_token=issued.token,
        )
        return Grant(lease, previous_holder=previous, preempted=preempted, new_epoch=incarnation.changed)

    def _floor(self, resource: str, fence_token: int | None, incarnation: Incarnation) -> int:
        """What Redis's counter is raised to before its INCR: the fence's token, so that tokens never
        go backwards when Redis lost its counter (and never below the database's WAL timeline's
        epoch, :attr:`Incarnation.least`); after a change of incarnation of either side, the
        last token before the epoch :func:`.epochs.next_token` moves to from above both (each
        attempt until a grant records the new incarnation moves on again). Other grants of the resource wait for this
        one (:meth:`serialise_grants`), so the counter read here is still the counter when the
        script runs."""
        if not incarnation.changed:
            check_room(resource, fence_token)
            return max(fence_token or 0, incarnation.least - 1)
        highest = max(fence_token or 0, self._store.peek(resource).counter)
        return next_token(resource, highest, incarnation) - 1

    def _log_grant(
        self,
        request: LeaseRequest,
        issued: Issued,
        fence_token: int | None,
        preempted: tuple[int, ...],
        incarnation: Incarnation,
    ) -> str | None:
        """EXPIRE (the previous holder's lease ran out unreleased), PREEMPT, GRANT; returns that holder."""
        resource, holder = request.resource, request.holder
        last = issued.previous
        previous = None
        if last is not None and not last.released and last.holder != holder:
            previous = last.holder
            self._log(
                self._connection,
                resource,
                "EXPIRE",
                previous,
                last.token,
                at=from_ms(min(last.expires_ms, issued.granted_ms)),
            )
        for pid in preempted:
            self._log(self._connection, resource, "PREEMPT", holder, issued.token, {"cancelled_pid": pid})
        detail: dict[str, Any] = {"ttl_ms": request.ttl_ms, "lease_service": "redis"}
        if incarnation.changed:
            detail["new_epoch"] = {"last_grant_on": incarnation.recorded, "now_on": incarnation.current}
        elif issued.seeded:
            detail["counter_raised_to_fence_token"] = fence_token
        self._log(self._connection, resource, "GRANT", holder, issued.token, detail)
        return previous

    def _give_back(self, resource: str, value: LeaseValue, issued: Issued | None) -> None:
        """Best effort: the error that made the grant fail is the one to report."""
        try:
            self._store.give_back(resource, value, issued)
        except DatabaseError:
            return

    # -- helpers ---------------------------------------------------------------------------

    def _refuse_builtin_live(self, connection: Connection, resource: str, locked: bool = False) -> None:
        """LeaseBusy when the tokens of ``resource`` come from the built-in lease service and its
        lease is live: Redis grants nothing and detaches nothing behind it. ``locked``: the fence
        row is this transaction's."""
        if recorded_source(connection, self._schema, resource, locked) != LEASE_SERVICE:
            return
        lease = builtin_lease(connection, self._schema, resource)
        if lease.live_holder is not None:
            expires = lease.expires_at.isoformat() if lease.expires_at else "an unknown time"
            raise LeaseBusy(
                resource,
                lease.holder,
                "its tokens come from the built-in lease service (its fence's token source is 'lease service'), "
                f"whose lease is held by {lease.holder} (token {lease.token}) until {expires}; Redis grants and "
                "detaches nothing on it until that lease is released or has expired (nothing was changed)",
            )

    def _why_lost(
        self, connection: Connection, resource: str, holder: str, token: int | None, reason: str | None = None
    ) -> str:
        """Why a renew or release matched nothing (``reason``, when the caller knows it), logged as
        LOST in the caller's transaction."""
        if reason is not None:
            self._log(connection, resource, "LOST", holder, token, {"reason": reason, "lease_service": "redis"})
            return reason
        peek = self._store.peek(resource)
        if peek.lease is not None and peek.lease.token == 0 and peek.lease.holder != holder:
            reason = f"it is being granted to {peek.lease.holder}"
        else:
            reason = _status(resource, peek, None).why_not_held_by(holder, token, "Redis has no record of the lease")
        self._log(connection, resource, "LOST", holder, token, {"reason": reason, "lease_service": "redis"})
        return reason

    def _status(self, connection: Connection, resource: str) -> LeaseStatus:
        """Redis's keys, and the fence token read on ``connection``."""
        peek = self._store.peek(resource)
        fence_token = connection.execute(
            statement("fence_token", self._schema, self._dialect), {"resource": resource}
        ).scalar()
        return _status(resource, peek, None if fence_token is None else int(fence_token))

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


def _status(resource: str, peek: Peek, fence_token: int | None) -> LeaseStatus:
    """The lease from Redis's keys: live while the lease key lives; expired while the last grant
    names a holder that did not release it; free otherwise."""
    lease, last = peek.lease, peek.last
    if lease is not None:
        grant = last if last is not None and (last.holder, last.token) == (lease.holder, lease.token) else None
        return LeaseStatus(
            resource=resource,
            holder=lease.holder,
            token=lease.token or peek.counter,
            ttl_ms=None if grant is None else grant.ttl_ms,
            granted_at=None if grant is None else from_ms(grant.granted_ms),
            expires_at=from_ms(peek.now_ms + max(peek.pttl_ms, 0)),
            fence_token=fence_token,
        )
    if last is not None and not last.released:
        return LeaseStatus(
            resource=resource,
            holder=last.holder,
            token=last.token,
            ttl_ms=last.ttl_ms,
            granted_at=from_ms(last.granted_ms),
            expires_at=from_ms(last.expires_ms),
            expired=True,
            fence_token=fence_token,
        )
    return LeaseStatus(resource=resource, holder=None, token=peek.counter, fence_token=fence_token)


def _busy_status(resource: str, busy: Busy) -> LeaseStatus:
    """Who has the lease key, as a status (its token is 0 while a grant to them is being made)."""
    return LeaseStatus(resource=resource, holder=busy.lease.holder, token=busy.lease.token, expires_at=busy.expires_at)


def _busy_reason(busy: Busy) -> str:
    lease = busy.lease
    if lease.token == 0:
        return f"being granted to {lease.holder} (until {busy.expires_at.isoformat()} at the latest)"
    return f"held by {lease.holder} (token {lease.token}) until {busy.expires_at.isoformat()}"
