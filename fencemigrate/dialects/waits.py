"""Waits inside the database for a lock another writer holds, who holds it, and what a wait reports.

A wait is taken in slices: each slice that runs out says who holds the lock (reported within
:data:`SLICE_MS`, then every :data:`WAIT_REPORT_INTERVAL_S`), ``--preempt`` may end a stale
holder between two slices, and the whole wait is bounded by ``--wait`` (busy, exit 4, when it runs
out). The slices are the database's own bounded waits: ``lock_timeout`` in a savepoint
(PostgreSQL), the busy timeout (SQLite), ``GET_LOCK``'s timeout (MySQL, MariaDB). What a wait
reports, and who hears it, lives here apart from :mod:`..progress` so that the dialects, which take
those locks, depend on nothing above them.

PostgreSQL: who holds the fence a writer waits for, read from ``pg_locks`` and
``pg_stat_activity``. Every claim holds the resource's claim lock (an advisory lock, shared) until
its transaction ends, and names its transaction ``fencemigrate token <n> <holder>``
(``application_name``, local to the transaction: the ``claimant`` statement), so a writer waiting
behind it can say whose it is and under which token, and ``--preempt`` can tell a stale writer (an
older token) from a newer one.

:class:`NamedLock`: the named lock that serialises pre-check writers (``GET_LOCK`` on MySQL and
MariaDB, an advisory lock on PostgreSQL).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Connection

from ..config import format_duration
from ..connections import close, probe_connection
from ..errors import LeaseBusy
from ..scrub import scrub_secrets
from .statements import scalar_on_dbapi, scalar_on_driver, statement

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


_CLAIMANT = re.compile(r"fencemigrate token (\d+)(?: (.*))?", re.DOTALL)
_NAME_BYTES = 63  # PostgreSQL keeps this much of an application_name (NAMEDATALEN - 1)
PREEMPT_WAIT_MS = 5000
"""How long ``--preempt`` waits for a terminated writer's session to exit."""


def claimant_name(holder: str, token: int) -> str:
    """The ``application_name`` a claim's transaction carries: its token first, so that cutting it to
    PostgreSQL's 63 bytes only ever shortens the holder."""
    name = f"fencemigrate token {token} {holder}".encode()[:_NAME_BYTES]
    return name.decode("utf-8", "ignore")


def fence_holders(connection: Connection, quoted_schema: str, resource: str) -> tuple[LockHolder, ...]:
    """The other sessions holding the fence of ``resource`` now (its claim lock), oldest transaction first."""
    rows = connection.execute(statement("fence_holders", quoted_schema), {"resource": resource}).all()
    return tuple(_holder(row) for row in rows)


def terminate_older(connection: Connection, quoted_schema: str, holders: tuple[LockHolder, ...], token: int) -> None:
    """``--preempt``: end the sessions among ``holders`` that claimed under a token older than
    ``token`` (their transactions roll back completely). A holder whose token is not known (not a
    claim of this version's) or not older is left alone: it may be a newer writer."""
    for holder in holders:
        if holder.pid is not None and holder.token is not None and holder.token < token:
            scalar_on_driver(
                connection,
                statement("terminate_writer", quoted_schema),
                {"pid": holder.pid, "wait_ms": PREEMPT_WAIT_MS},
            )


def _holder(row: Any) -> LockHolder:
    match = _CLAIMANT.fullmatch(row.application_name or "")
    since: datetime | None = row.xact_start
    return LockHolder(
        pid=int(row.pid),
        holder=(match.group(2) or None) if match else (row.application_name or None),
        token=int(match.group(1)) if match else None,
        since=since,
        running=_running(row.state, row.query),
    )


def _running(state: str | None, query: str | None) -> str | None:
    """What the session does: ``running: <statement>``, or ``idle in transaction after: <statement>``."""
    if not query:
        return state
    text = statement_excerpt(query)
    return f"running: {text}" if state == "active" else f"{state} after: {text}"


class NamedLock:
    """Pre-check mode's lock on a resource, held by the migration's own session.

    MySQL: ``GET_LOCK('fencemigrate:<database>/<resource>')``. PostgreSQL: session advisory locks
    (the fence schema's ``named_lock()``). Held across the run's commits, and released by the
    server when the session ends, so a writer that dies (SIGKILL, a lost connection) never leaves
    it behind.
    """

    def __init__(
        self, connection: Connection, quoted_schema: str, resource: str, name_query: str = "named_lock_name"
    ) -> None:
        """``name_query``: the statement naming the lock (the writers' lock unless told)."""
        self._connection = connection
        self._dialect = connection.dialect
        self._schema = quoted_schema
        self._dbapi = connection.connection.dbapi_connection
        self._resource = resource
        self.name = ""  # as the database shows it, read next
        self.name = str(self._scalar(name_query))
        self.held = False

    def acquire(self, wait_ms: int) -> bool:
        """Take the lock, waiting at most ``wait_ms``; False on timeout."""
        self.held = self._scalar("named_lock", timeout_s=wait_ms / 1000, timeout_ms=wait_ms) == 1
        return self.held

    def take(
        self, bound: WaitBound, token: int | None = None, busy: Callable[[tuple[LockHolder, ...]], str] | None = None
    ) -> None:
        """Take the lock within ``bound``, in slices that report who holds it; with ``--preempt``,
        the session of a holder under a token older than ``token`` is ended first (``KILL
        CONNECTION`` on MySQL, ``pg_terminate_backend`` on PostgreSQL: a revision it was running
        stays dirty). Busy (exit 4) naming who holds it when ``bound.wait_ms`` runs out (``busy``: the
        reason given then, from the holders)."""

        wait_in_slices(
            self._resource,
            f"the named lock {self.name!r}",
            bound,
            self.acquire,
            self.holders,
            lambda holders: self._preempt_older(holders, token),
            busy or self._busy,
        )

    def _preempt_older(self, holders: tuple[LockHolder, ...], token: int | None) -> None:
        """End the sessions among ``holders`` under a token older than ``token``."""
        for holder in holders:
            if holder.pid is not None and holder.token is not None and token is not None and holder.token < token:
                self._scalar("preempt_writer", connection_id=holder.pid, wait_ms=PREEMPT_WAIT_MS)

    def _busy(self, holders: tuple[LockHolder, ...]) -> str:
        return f"another fencemigrate writer holds the named lock {self.name!r}" + (
            f" ({describe_holders(holders)})" if holders else ""
        )

    def holders(self) -> tuple[LockHolder, ...]:
        """The session holding the lock (none when it is free): its id, the pre-check run it is, and
        what it runs (the ``named_lock_session`` statement). Read on a connection of its own in autocommit mode:
        a read in this session would start the snapshot (MySQL's REPEATABLE READ) that the run's
        reads under the lock must not see the database through."""
        clause = statement("named_lock_session", self._schema, self._dialect.name)
        probe = probe_connection(self._connection.engine)
        try:
            rows = probe.execute(clause, {"resource": self._resource, "name": self.name}).all()
        finally:
            close(probe)
        kind = "connection" if self._dialect.name in ("mysql", "mariadb") else "pid"
        return tuple(
            LockHolder(
                pid=int(pid),
                session_kind=kind,
                holder=holder,
                token=None if held_token is None else int(held_token),
                since=since,
                running=f"{command} for {seconds}s" + (f": {statement_excerpt(str(info))}" if info else ""),
            )
            for pid, command, seconds, info, holder, held_token, since in rows
        )

    def holder(self) -> int | None:
        """The connection id of the session holding the lock, or None when it is free."""
        value = self._scalar("named_lock_holder")
        return None if value is None else int(value)

    def release(self) -> None:
        """Release the lock if this run still holds it. The connection may be closed already
        (the server released the lock then): that is not an error."""
        if not self.held:
            return
        self.held = False
        try:
            self._scalar("named_lock_release")
        except Exception:  # noqa: BLE001 - a closed connection released the lock with its session
            return

    def _scalar(self, query: str, **params: Any) -> Any:
        """Run ``query`` with the lock's ``resource``, ``name`` and ``params`` on the DBAPI connection,
        outside SQLAlchemy's transaction bookkeeping: the lock belongs to the session, not to a
        transaction, and is released after env.py has closed its SQLAlchemy connection."""
        assert self._dbapi is not None
        clause = statement(query, self._schema, self._dialect.name)
        params = {"resource": self._resource, "name": self.name, **params}
        return scalar_on_dbapi(self._dbapi, self._dialect, clause, params, owner=self._connection)
