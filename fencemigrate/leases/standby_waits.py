"""A lease transaction's COMMIT on a PostgreSQL primary with synchronous standbys: bounded, and
checked for a wait that was cut short.

Such a COMMIT waits until a synchronous standby has the transaction, for ever if none answers:
``statement_timeout`` and ``lock_timeout`` do not reach that wait. When the wait is cancelled (by
the client, or anyone's ``pg_cancel_backend``), the transaction stays committed on the primary
and the server says so with a WARNING ("canceling wait for synchronous replication ... has already
committed locally, but might not have been replicated to the standby"): a promoted standby would
not have it. :class:`CommitWatch` cancels the wait itself after a bound (the driver's cancel
request, from a timer thread) and reports whether a WARNING arrived during the COMMIT or the bound
ran out, so that a grant cut short is not reported as granted (:mod:`.database`).

Drivers: psycopg 3 (notice handlers) and psycopg2 (its ``notices`` list). Others cannot be
watched: :func:`check_watchable` refuses to grant through them on a primary with synchronous
standbys.
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import Connection

from ..dialects import dialect_for
from ..dialects.statements import statement
from ..errors import UsageError

SYNCHRONOUS_WAIT_FLOOR_MS = 5000
"""A lease transaction's COMMIT waits at least this long for a synchronous standby."""


def force_synchronous_commit(connection: Connection, quoted_schema: str) -> bool:
    """In a grant's transaction: commit durably, and synchronously when the server has synchronous
    standbys, whatever the session set (the ``synchronous_grant`` statement). Whether the COMMIT waits for a
    standby."""
    if not dialect_for(connection).replication_known:
        return False
    waits = bool(connection.execute(statement("synchronous_grant", quoted_schema)).one().waits_for_standby)
    if waits:
        check_watchable(connection)
    return waits


def check_watchable(connection: Connection) -> None:
    """UsageError unless :class:`CommitWatch` can bound and check this connection's COMMIT."""
    driver = connection.connection.driver_connection
    if not hasattr(driver, "cancel") or not (hasattr(driver, "add_notice_handler") or hasattr(driver, "notices")):
        raise UsageError(
            f"the lease service cannot grant through the driver {connection.dialect.driver!r} on a primary "
            "with synchronous standbys: it could neither bound the grant's wait for a standby nor tell "
            "whether a standby confirmed it. Use psycopg (postgresql+psycopg://) or psycopg2, or pass "
            "--token from your own lease service (nothing was changed)"
        )


class CommitWatch:
    """Around one transaction: :meth:`arm` right before its COMMIT; after it, :attr:`cut_short`."""

    def __init__(self, connection: Connection) -> None:
        self._driver: Any = connection.connection.driver_connection
        self._listening = False
        self._timer: threading.Timer | None = None
        self._notices_before = 0
        self.cut_short = False
        """Whether the COMMIT's wait for a standby may have been cut short: the server sent a
        WARNING during it, or the bound ran out before it returned."""

    def arm(self, limit_ms: int) -> None:
        """Listen for WARNINGs from now on, and cancel the statement in flight (the COMMIT) after
        ``limit_ms``. A cancel that arrives after the COMMIT finds the session idle and does nothing
        (the COMMIT then counts as cut short all the same: the safe side)."""
        if hasattr(self._driver, "add_notice_handler"):
            self._driver.add_notice_handler(self._on_notice)
            self._listening = True
        elif hasattr(self._driver, "notices"):
            self._notices_before = len(self._driver.notices)
        self._timer = threading.Timer(limit_ms / 1000, self._cancel)
        self._timer.daemon = True
        self._timer.start()

    def disarm(self) -> None:
        """After the COMMIT: stop the timer (waiting for a cancel already being sent, so that it is
        not sent during a later statement) and the listener; :attr:`cut_short` is final."""
        if self._timer is None:
            return
        self._timer.cancel()
        self._timer.join()
        self._timer = None
        if self._listening:
            self._driver.remove_notice_handler(self._on_notice)
            self._listening = False
        elif hasattr(self._driver, "notices") and len(self._driver.notices) > self._notices_before:
            self.cut_short = True  # psycopg2 keeps notices as localised text: any one means cut short

    def _on_notice(self, diagnostic: Any) -> None:
        if getattr(diagnostic, "severity_nonlocalized", None) == "WARNING":
            self.cut_short = True

    def _cancel(self) -> None:
        self.cut_short = True  # the bound ran out: whatever the COMMIT says, no standby confirmed it in time
        try:
            self._driver.cancel()
        except Exception:  # noqa: BLE001 - the session may be gone; the COMMIT's own outcome decides
            return
