"""A lease its holder was granted before the run (an MCP server's explicit grant), lent to one run.

The run writes under the grant's token, renews the lease between revisions exactly as it renews a
lease it took itself (progress, never a timer), and leaves it held at the end: releasing it is the
holder's decision, not the run's.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, Engine

from ..errors import FencemigrateError
from .model import Grant, LeaseRequest
from .runner import BackendFactory, RunnerLease


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
