"""The lease of one fenced run: the one it takes for itself when it is given no ``--token``
(:class:`RunnerLease`), or one its holder was granted before the run (an MCP server's explicit
grant) and lends it (:class:`HeldLease`).

A run's own lease is acquired once the project's env.py has connected (the lease lives in that
database, or in Redis), renewed by the run itself between revisions, never by a timer thread, and
released at the end, also on failure. A held lease is renewed between revisions exactly the same
way (progress, never a timer), and left held at the end: releasing it is the holder's decision,
not the run's.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import Connection, Engine

from ..connections import translated_errors
from ..dialects import dialect_for
from ..errors import FencemigrateError
from ..process import deferred
from ..progress import SILENT, Progress
from .model import Grant, LeaseBackend, LeaseRequest, StoppedWaiting

BackendFactory = Callable[[Engine], LeaseBackend]


class RunnerLease:
    """One run's lease: acquire on first connection, heartbeat while making progress, release."""

    def __init__(self, request: LeaseRequest, open_backend: BackendFactory, progress: Progress = SILENT) -> None:
        """``progress`` hears about the wait while another holder has the lease."""
        self.request = request
        self._progress = progress
        self._open_backend = open_backend
        self._backend: LeaseBackend | None = None
        self._grant: Grant | None = None
        self._renewed_at = 0.0
        self.renewals = 0  # how often heartbeat() renewed the lease

    @property
    def grant(self) -> Grant | None:
        """The current grant, once acquired."""
        return self._grant

    def acquire(self, engine: Engine, stop_waiting: Callable[[], bool]) -> int | None:
        """Acquire the lease through ``engine``'s database (once per run); returns the token, or
        None when ``stop_waiting()`` turned true while another holder had the lease."""
        if self._grant is None:
            backend = self._open_backend(engine)
            try:
                self._grant = backend.acquire(self.request, stop_waiting, self._progress)
            except StoppedWaiting:
                backend.close()
                return None
            except BaseException:
                backend.close()
                raise
            self._backend = backend
            self._renewed_at = time.monotonic()
        return self._grant.token

    def heartbeat(self, migration: Connection | None) -> None:
        """Renew when a third of the TTL has passed since the last grant or renewal.

        Called by the run after each revision, with the migration's connection: the lease stays
        alive only while the run makes progress. Raises LeaseLost when someone else has been
        granted it.

        On PostgreSQL (and for Redis's keys) the renewal commits at once on the lease's own
        connection, so that other grants see it. On SQLite it goes into the migration's own open
        transaction instead: that transaction holds SQLite's only write lock, so a renewal on
        another connection would wait for it to end, which cannot happen while the run waits for
        the renewal (the busy timeout would run out). Nothing is lost by renewing inside it: while
        it is open nobody else can write, hence nobody can be granted the lease; when it commits
        the renewal commits with it, and if it rolls back the run is over and releases the lease.
        """
        if self._grant is None or self._backend is None or not self.renewal_due():
            return
        within = migration if migration is not None and dialect_for(migration).renews_in_migration_transaction else None
        self._grant = self._backend.renew(
            self.request.resource, self.request.holder, self._grant.token, self.request.ttl_ms, within=within
        )
        self._renewed_at = time.monotonic()
        self.renewals += 1

    def renewal_due(self) -> bool:
        """A third of the TTL has passed since the last grant or renewal."""
        return time.monotonic() - self._renewed_at >= self.request.ttl_ms / 3000

    def release(self) -> FencemigrateError | None:
        """Release the lease and close the backend. What went wrong is returned, not raised (LeaseLost
        when it was no longer ours, a DatabaseError when the service could not be reached): the
        run's own outcome is already decided, and the lease expires by itself. A SIGTERM or SIGINT
        that arrives meanwhile waits for the release to finish."""
        if self._backend is None or self._grant is None:
            return None
        with deferred():
            try:
                with translated_errors(self.request.resource):
                    self._backend.release(self.request.resource, self.request.holder, self._grant.token)
                return None
            except FencemigrateError as failure:
                return failure
            finally:
                self._backend.close()
                self._backend = None


class HeldLease(RunnerLease):
    """``grant``, held by its holder: acquire answers its token, heartbeat renews it, release keeps it.

    The lease service is opened when the first renewal is due, through the engine of the run's
    connection (``open_backend`` is given it), and closed when the run ends.
    """

    def __init__(self, grant: Grant, open_backend: BackendFactory) -> None:
        lease = grant.lease
        assert lease.holder is not None and lease.ttl_ms is not None, "a grant names its holder and TTL"
        super().__init__(LeaseRequest(resource=lease.resource, holder=lease.holder, ttl_ms=lease.ttl_ms), open_backend)
        self._grant = grant
        # Renew at the first heartbeat: the grant may be most of its TTL old when the run starts.
        self._renewed_at = float("-inf")

    def acquire(self, engine: Engine, stop_waiting: Callable[[], bool]) -> int | None:
        """The held token: nothing is granted."""
        assert self._grant is not None
        return self._grant.token

    def heartbeat(self, migration: Connection | None) -> None:
        """Renew when due (see :meth:`RunnerLease.heartbeat`), opening the lease service the first time."""
        if self._backend is None and migration is not None and self.renewal_due():
            self._backend = self._open_backend(migration.engine)
        super().heartbeat(migration)

    def release(self) -> FencemigrateError | None:
        """Close the lease service; the lease stays held (until it expires or its holder releases it)."""
        if self._backend is not None:
            self._backend.close()
            self._backend = None
        return None
