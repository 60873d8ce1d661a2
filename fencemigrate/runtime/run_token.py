"""The one source of a fenced run's token: given (``--token``), granted to the lease the run holds,
or, for an offline script written without a token, granted to the script itself when it runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy import Connection, Engine

from ..dialects.fence_calls.base import SCRIPT_TOKEN
from ..errors import FencemigrateError, TokenRequired


@dataclass(frozen=True)
class ScriptGrant:
    """The lease an offline (``--sql``) script without ``--token`` takes itself when it runs, from the
    database's own lease service: its TTL, and how long the script waits for a live holder or a
    migration in flight (``--ttl``, ``--wait``)."""

    ttl_ms: int
    wait_ms: int


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


class TokenSource:
    """Where the run's token comes from; everything that writes under it reads it here."""

    def __init__(
        self, given: int | None = None, lease: RunLease | None = None, script_grant: ScriptGrant | None = None
    ) -> None:
        """``given``: the token to write under. ``lease`` without it: the run's own lease, acquired
        once env.py has connected; with it: the lease its caller holds with that token, which the
        run renews while it makes progress and leaves held. ``script_grant`` (alone): the offline
        script being written takes its own lease when it runs."""
        self._token = given
        self.lease = lease
        self.script_grant = script_grant
        self._takes_lease = lease is not None and given is None

    @property
    def takes_lease(self) -> bool:
        """The run takes a lease itself (it was given no token)."""
        return self._takes_lease

    @property
    def token(self) -> int | None:
        """The token, or None while the run's own lease is not granted (or none was given)."""
        return self._token

    def required(self) -> int:
        """The token to write under; no step is written before it is known. An offline script that
        takes its own lease writes under :data:`SCRIPT_TOKEN`, the token it will be granted."""
        if self._token is None and self.script_grant is not None:
            return SCRIPT_TOKEN
        if self._token is None:
            raise TokenRequired("no fencing token is known yet: nothing can be written")
        return self._token

    def acquire(self, engine: Engine, stop_waiting: Callable[[], bool]) -> bool:
        """Acquire the run's own lease through ``engine``'s database (once); False when
        ``stop_waiting()`` turned true while another holder had it."""
        assert self.lease is not None
        token = self.lease.acquire(engine, stop_waiting)
        if token is not None:
            self._token = token
        return token is not None

    def heartbeat(self, migration: Connection | None) -> None:
        """Renew the run's own lease when it is due (after each revision, with its connection)."""
        if self.lease is not None:
            self.lease.heartbeat(migration)

    @property
    def renewals(self) -> int:
        """How often the run's own lease was renewed."""
        return self.lease.renewals if self.lease is not None else 0

    def release(self) -> FencemigrateError | None:
        """Release the run's own lease, if it holds one (a lent lease stays held); what went wrong
        is returned, not raised."""
        return self.lease.release() if self.lease is not None else None
