"""What a lease service answers, what every lease backend provides, and how a backend waits for a
busy lease (the same bounded, jittered polling for every backend).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, TypeVar

from sqlalchemy import Connection

from ..config import format_duration
from ..dialects.waits import WAIT_REPORT_INTERVAL_S
from ..errors import LeaseBusy
from ..progress import SILENT, Progress

DEFAULT_TTL = "60s"  # short, renewed while the holder makes progress (the design notes' advice)
DEFAULT_ACQUIRE_WAIT = "0s"  # `lease acquire`: answer busy at once unless told to wait
DEFAULT_RUN_WAIT = "10m"  # runners started together (pods, CI jobs) queue rather than fail


@dataclass(frozen=True)
class LeaseRequest:
    """Who wants which resource, for how long, and how long they will wait for it."""

    resource: str
    holder: str
    ttl_ms: int
    wait_ms: int = 0
    preempt: bool = False


@dataclass(frozen=True)
class LeaseStatus:
    """A resource's lease as the lease service's clock sees it now."""

    resource: str
    holder: str | None  # None: free
    token: int  # the last token issued for the resource (0: never)
    ttl_ms: int | None = None
    granted_at: datetime | None = None
    expires_at: datetime | None = None
    expired: bool = False
    fence_token: int | None = None  # the highest token the database fence has seen
    # granted further in the future than its TTL (a clock ahead, or stepped back): counted as expired
    implausible: bool = False
    replication: str | None = None  # the grant's: 'synchronous', 'asynchronous' (PostgreSQL), None: not known

    def why_not_held_by(self, holder: str, token: int | None, unknown: str) -> str:
        """Why ``holder``'s grant with ``token`` is not this lease (a renew or release that matched
        nothing); ``unknown`` is the reason when the service has no record of any grant."""
        if self.holder is None:
            return "the lease is not held" if self.token else unknown
        if self.holder != holder:
            return f"it has been granted to {self.holder} with token {self.token}"
        return f"your current grant has token {self.token}, not {token}"

    @property
    def live_holder(self) -> str | None:
        """The holder, unless the lease is free or expired."""
        return None if self.expired else self.holder

    def as_json(self) -> dict[str, Any]:
        """JSON form, for ``--json``."""
        return {
            "resource": self.resource,
            "holder": self.holder,
            "token": self.token,
            "ttl": None if self.ttl_ms is None else format_duration(self.ttl_ms),
            "ttl_ms": self.ttl_ms,
            "granted_at": None if self.granted_at is None else self.granted_at.isoformat(),
            "expires_at": None if self.expires_at is None else self.expires_at.isoformat(),
            "expired": self.expired,
            "implausible": self.implausible,
            "fence_token": self.fence_token,
            "replication": self.replication,
        }


@dataclass(frozen=True)
class Grant:
    """A lease granted (or renewed): the token to write with, and until when it is held."""

    lease: LeaseStatus
    previous_holder: str | None = None  # the holder whose expired lease this grant replaced
    preempted: tuple[int, ...] = ()  # backend pids of stale writers whose transactions were cancelled
    renewed_after_expiry: bool = False
    new_epoch: bool = False  # the database (or Redis) changed incarnation since the last grant: see epochs.py

    @property
    def token(self) -> int:
        """The fencing token of this grant."""
        return self.lease.token

    def as_json(self) -> dict[str, Any]:
        """JSON form, for ``--json``."""
        return {
            **self.lease.as_json(),
            "previous_holder": self.previous_holder,
            "preempted_pids": list(self.preempted),
            "renewed_after_expiry": self.renewed_after_expiry,
            "new_epoch": self.new_epoch,
        }


class LeaseBackend(Protocol):
    """A lease service that issues fencing tokens and advances the database fence on grant."""

    def acquire(
        self, request: LeaseRequest, stop_waiting: Callable[[], bool] | None = None, progress: Progress = SILENT
    ) -> Grant:
        """Grant the lease if it is free, expired or already the holder's; LeaseBusy after waiting
        ``request.wait_ms`` for another live holder; StoppedWaiting once ``stop_waiting()`` is true.
        The wait is reported to ``progress`` (:func:`poll_for_grant`)."""

    def renew(
        self, resource: str, holder: str, token: int | None, ttl_ms: int | None, within: Connection | None = None
    ) -> Grant:
        """Extend the holder's lease by ``ttl_ms`` from now, or with ``ttl_ms`` None by the TTL it
        was granted (or last renewed) with, which the service stores with the lease; LeaseLost if
        someone else has been granted it since.

        Normally in a transaction of the backend's own that commits at once. With ``within``, the
        renewal's database writes (the lease row, the RENEW or LOST event) go into that connection's
        open transaction instead, and commit or roll back with it: a run heartbeating on SQLite,
        whose migration holds the database's only write lock (see ``RunnerLease.heartbeat``).
        """

    def release(self, resource: str, holder: str, token: int | None) -> LeaseStatus:
        """Free the holder's lease; LeaseLost if it is no longer theirs."""

    def status(self, resource: str) -> LeaseStatus:
        """The lease as it is now."""

    def detach(self, resource: str) -> LeaseStatus:
        """Give ``resource`` back to external tokens (``--token`` above its fence token); LeaseBusy
        while a holder's lease is live, UsageError when it has no fence row."""

    def close(self) -> None:
        """Close the backend's connections."""


_FIRST_POLL_S = 0.02
_LONGEST_POLL_S = 0.25

Busy = TypeVar("Busy")


class StoppedWaiting(Exception):
    """The caller's ``stop_waiting`` said the lease is no longer needed (nothing left to do)."""


def poll_for_grant(
    request: LeaseRequest,
    attempt: Callable[[int], Grant | Busy],
    busy: Callable[[Busy], LeaseBusy],
    stop_waiting: Callable[[], bool] | None = None,
    pause: Callable[[float], None] = time.sleep,
    longest_pause_s: float | None = None,
    waiting: Callable[[Busy, int], None] = lambda busy, remaining_ms: None,
) -> Grant:
    """Call ``attempt(remaining_ms)`` until it grants, for at most ``request.wait_ms``.

    Between attempts, backs off from 20 ms to 250 ms (with jitter, so that runners started
    together do not poll in step), or to ``longest_pause_s`` when ``pause`` returns early on a
    release. ``stop_waiting()`` is asked after each pause, before the next attempt: a runner woken
    by the release of a run that did the work leaves without taking the lease (StoppedWaiting).
    When the wait runs out, raises ``busy(last answer)``.
    ``waiting(last answer, remaining_ms)`` reports the wait: after the first busy answer, then
    every :data:`WAIT_REPORT_INTERVAL_S` (never when ``--wait`` is 0: there is no wait to report).
    """
    deadline = time.monotonic() + request.wait_ms / 1000
    pause_s = _FIRST_POLL_S
    next_report = time.monotonic()
    while True:
        remaining_ms = max(0, round((deadline - time.monotonic()) * 1000))
        outcome = attempt(remaining_ms)
        if isinstance(outcome, Grant):
            return outcome
        now = time.monotonic()
        if now >= deadline:
            raise busy(outcome)
        if now >= next_report:
            waiting(outcome, max(0, round((deadline - now) * 1000)))
            next_report = now + WAIT_REPORT_INTERVAL_S
        pause(min(pause_s, max(deadline - time.monotonic(), 0)) * random.uniform(0.5, 1.0))
        pause_s = min(pause_s * 2, longest_pause_s or _LONGEST_POLL_S)
        if stop_waiting is not None and stop_waiting():
            raise StoppedWaiting()
