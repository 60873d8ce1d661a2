"""What a wait inside the database for another writer's lock reports, and who hears it: apart from
:mod:`.progress` so that the dialects, which take those locks, depend on nothing above them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from .scrub import scrub_secrets

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
