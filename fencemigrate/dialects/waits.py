"""What a wait inside the database for another writer's lock reports, and who hears it: apart from
:mod:`.progress` so that the dialects, which take those locks, depend on nothing above them.

Waits inside the database for a lock another writer holds, taken in slices: each slice that runs
out says who holds the lock (reported within :data:`SLICE_MS`, then every
:data:`~.lock_reports.WAIT_REPORT_INTERVAL_S`), ``--preempt`` may end a stale holder between two slices,
and the whole wait is bounded by ``--wait`` (busy, exit 4, when it runs out).

The slices are the database's own bounded waits: ``lock_timeout`` in a savepoint (PostgreSQL), the
busy timeout (SQLite), ``GET_LOCK``'s timeout (MySQL, MariaDB).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from ..config import format_duration
from ..errors import LeaseBusy
from ..scrub import scrub_secrets

WAIT_REPORT_INTERVAL_S = 5.0
"""How often a wait for the lease, or for a lock in the database, is reported again after its first report."""


STATEMENT_CHARS = 200
"""How much of a holder's statement a report shows."""


def statement_excerpt(text: str) -> str:
    """A holder's statement for a report: on one line, its passwords withheld (``PASSWORD '***'``:
    another writer's ``CREATE ROLE`` must not reach this run's output), cut to :data:`STATEMENT_CHARS`."""
    text = scrub_secrets(" ".join(text.split()))
    return text if len(text) <= STATEMENT_CHARS else text[: STATEMENT_CHARS - 1] + "…"


@dataclass(frozen=True)
class LockHolder:
    """Who holds a lock a run waits for, as far as the database tells: its session (``pid``, a
    PostgreSQL backend pid or a MySQL connection id, named by ``session_kind``), the fencemigrate
    holder and token it writes as, since when (its transaction, or its lock), and what it runs."""

    pid: int | None = None
    session_kind: str = "pid"
    holder: str | None = None
    token: int | None = None
    since: datetime | None = None
    running: str | None = None


@dataclass(frozen=True)
class LockWait:
    """A wait inside the database for ``lock`` on ``resource`` (the fence row, SQLite's write lock,
    the named lock): who holds it now, how long this caller has waited and will still wait."""

    resource: str
    lock: str
    holders: tuple[LockHolder, ...]
    waited_ms: int
    remaining_ms: int


class LockProgress(Protocol):
    """Hears a wait for a lock in the database (:class:`.progress.Progress` is one)."""

    def waiting_for_lock(self, wait: LockWait) -> None:
        """Another writer holds the lock: called within :data:`WAIT_REPORT_INTERVAL_S` of the wait's
        start, then every :data:`WAIT_REPORT_INTERVAL_S` while waiting."""


class _Unheard:
    def waiting_for_lock(self, wait: LockWait) -> None:
        return None


UNHEARD: LockProgress = _Unheard()
"""Hears nothing: a wait nobody reports (``resolve``'s)."""


SLICE_MS = 1000
"""How long one slice of a wait lasts at most: the first report comes after it."""


@dataclass(frozen=True)
class WaitBound:
    """How a run waits for a lock another writer holds: at most ``wait_ms`` (then busy), reporting
    to ``progress``; with ``preempt``, ending the holders that write under an older token."""

    wait_ms: int
    preempt: bool = False
    progress: LockProgress = UNHEARD


def wait_in_slices(
    resource: str,
    lock: str,
    bound: WaitBound,
    attempt: Callable[[int], bool],
    holders: Callable[[], tuple[LockHolder, ...]],
    preempt: Callable[[tuple[LockHolder, ...]], None] | None = None,
    busy: Callable[[tuple[LockHolder, ...]], str] | None = None,
) -> None:
    """Call ``attempt(slice_ms)`` (True: the lock is taken; False: it was still held after
    ``slice_ms``) until it takes the lock or ``bound.wait_ms`` has passed: then LeaseBusy, its reason
    ``busy`` (else: who holds ``lock``). After each slice that ran out: ``preempt(holders)`` with
    ``--preempt``, and a report of ``holders()`` when one is due."""
    started = time.monotonic()
    deadline = started + bound.wait_ms / 1000
    next_report = started
    while True:
        left_ms = max(0, round((deadline - time.monotonic()) * 1000))
        if attempt(max(1, min(left_ms, SLICE_MS))):
            return
        now = time.monotonic()
        preempting = bound.preempt and preempt is not None
        if not (preempting or now >= deadline or now >= next_report):
            continue
        seen = holders()
        if preempting and seen:
            assert preempt is not None
            preempt(seen)
        if now >= deadline:
            reason = busy(seen) if busy is not None else f"{lock} is held by {describe_holders(seen)}"
            raise LeaseBusy(resource, _holder_name(seen), f"{reason}; waited {format_duration(bound.wait_ms)}")
        if now >= next_report:
            waited_ms = round((now - started) * 1000)
            remaining_ms = max(0, round((deadline - now) * 1000))
            bound.progress.waiting_for_lock(LockWait(resource, lock, seen, waited_ms, remaining_ms))
            next_report = now + WAIT_REPORT_INTERVAL_S


def lock_wait_text(wait: LockWait) -> str:
    """One line for a report of ``wait``: ``waiting for the fence of db/migrations: held by pid 4242
    (agent-A, token 7) since ..., running: ...; waited 5s, waiting at most 9m55s more``."""
    return (
        f"waiting for {wait.lock} of {wait.resource}: held by {describe_holders(wait.holders)}; "
        f"waited {_seconds(wait.waited_ms)}, waiting at most {_seconds(wait.remaining_ms)} more"
    )


def _seconds(milliseconds: int) -> str:
    """A wait, in whole seconds (rounded up): ``7s``, ``9m05s``."""
    seconds = -(-milliseconds // 1000)
    return f"{seconds}s" if seconds < 60 else f"{seconds // 60}m{seconds % 60:02d}s"


def describe_holders(holders: tuple[LockHolder, ...]) -> str:
    """Who holds a lock, for a message: each holder's session, identity, start and statement."""
    if not holders:
        return "another session (the database does not say which)"
    return "; ".join(describe_holder(holder) for holder in holders)


def describe_holder(holder: LockHolder) -> str:
    """One holder: ``pid 4242 (agent-A, token 7) since 2026-12-07T02:00:00+00:00, running: ...``."""
    text = "another session" if holder.pid is None else f"{holder.session_kind} {holder.pid}"
    who = [part for part in (holder.holder, None if holder.token is None else f"token {holder.token}") if part]
    if who:
        text += f" ({', '.join(who)})"
    if holder.since is not None:
        text += f" since {holder.since.isoformat(timespec='seconds')}"
    if holder.running:
        text += f", {holder.running}"
    return text


def _holder_name(holders: tuple[LockHolder, ...]) -> str | None:
    named = [holder.holder for holder in holders if holder.holder]
    return named[0] if named else None
