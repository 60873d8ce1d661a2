"""What a run reports while it works: waits for the lease or for a lock another writer holds in the
database, and each revision as it starts.

The API passes a :class:`Progress` into the run and its lease; by default :data:`SILENT`. Only
:mod:`.cli` prints it (on stderr). Reports come from the loops that already run (the lease's poll
loop, the run's steps): no timer threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .dialects.waits import WAIT_REPORT_INTERVAL_S, LockHolder, LockWait

__all__ = ["SILENT", "WAIT_REPORT_INTERVAL_S", "LeaseWait", "LockHolder", "LockWait", "Progress", "StepStart"]

if TYPE_CHECKING:
    from .leases.model import LeaseStatus


@dataclass(frozen=True)
class LeaseWait:
    """A wait for a busy lease: as the lease service sees it now, and how long this caller will still wait."""

    lease: LeaseStatus
    remaining_ms: int


@dataclass(frozen=True)
class StepStart:
    """One step of a run starting: its direction ("upgrade", "downgrade", "stamp", "unstamp": a stamp
    going down), its revisions, its place among the run's steps (1-based) and the token it runs under."""

    action: str
    revisions: tuple[str, ...]
    position: int
    total: int
    token: int


class Progress(Protocol):
    """Receives a run's progress reports."""

    def waiting_for_lease(self, wait: LeaseWait) -> None:
        """The lease is busy: called at once, then every :data:`WAIT_REPORT_INTERVAL_S` while waiting."""

    def waiting_for_lock(self, wait: LockWait) -> None:
        """Another writer holds a lock in the database: called within :data:`WAIT_REPORT_INTERVAL_S`
        of the wait's start, then every :data:`WAIT_REPORT_INTERVAL_S` while waiting."""

    def step_started(self, step: StepStart) -> None:
        """A step (a revision, or a stamp) is about to run."""


class _Silent:
    """Reports nothing: the Python API's default."""

    def waiting_for_lease(self, wait: LeaseWait) -> None:
        return None

    def waiting_for_lock(self, wait: LockWait) -> None:
        return None

    def step_started(self, step: StepStart) -> None:
        return None


SILENT: Progress = _Silent()
