"""The ``failover`` fault: a schedule on a primary of its own, with a streaming standby to promote.

The pair comes from ``tests/support/replication.py`` (``.ci/postgres start`` and ``standby``), with
``track_commit_timestamp`` on both servers, so the history keeps its commit order across the
promotion (a replayed commit keeps the old primary's timestamp). The fault holds back the
primary's WAL (its walsender stopped), stops the primary immediately and promotes the standby:
what committed in between is gone, and the schedule goes on on the promoted server, which
:meth:`FailoverServers.fail_over` points the backend at.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.engine import make_url

from faults.backends import Backend

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from support.replication import StreamingPair, streaming_pair  # noqa: E402

SERVER_OPTIONS = "-c track_commit_timestamp=on"


class FailoverServers:
    """A streaming pair and the backend on its current primary."""

    def __init__(self, pair: StreamingPair) -> None:
        self.pair = pair
        self.backend = Backend("postgresql", commit_timestamps=True)
        self._point_backend()

    def _point_backend(self) -> None:
        self.backend.server_url = f"postgresql+psycopg://postgres@127.0.0.1:{self.pair.primary.port}"
        self.backend.pgdata = str(self.pair.primary.pgdata)

    def hold_wal(self) -> None:
        """From now on nothing reaches the standby."""
        self.pair.hold_wal()

    def fail_over(self, url: str) -> str:
        """Stop the primary immediately, promote the standby; ``url``'s database on the promoted server."""
        self.pair.failover()
        self._point_backend()
        return str(make_url(url).set(port=self.pair.primary.port).render_as_string(hide_password=False))


@contextmanager
def failover_servers() -> Iterator[FailoverServers]:
    """A new pair for one schedule and one system; both servers stopped and deleted afterwards."""
    with streaming_pair(options=SERVER_OPTIONS) as pair:
        yield FailoverServers(pair)
