"""A lease transaction's COMMIT on a PostgreSQL primary with synchronous standbys: bounded, and
checked for a wait that was cut short.

Such a COMMIT waits until a synchronous standby has the transaction, for ever if none answers:
``statement_timeout`` and ``lock_timeout`` do not reach that wait. When the wait is cancelled (by
the client, or anyone's ``pg_cancel_backend``), the transaction stays committed on the primary
and the server says so with a WARNING ("canceling wait for synchronous replication ... has already
committed locally, but might not have been replicated to the standby"): a promoted standby would
not have it. The PostgreSQL grant's transaction (its dialect's ``CommitWatch``) cancels the wait
itself after a bound (the driver's cancel request, from a timer thread) and reports whether a
WARNING arrived during the COMMIT or the bound ran out, so that a grant cut short is not reported
as granted (:mod:`.database`).

Drivers: psycopg 3 (notice handlers) and psycopg2 (its ``notices`` list). Others cannot be
watched: :func:`check_watchable` refuses to grant through them on a primary with synchronous
standbys.
"""

from __future__ import annotations

from sqlalchemy import Connection

from ..dialects import dialect_for
from ..dialects.statements import statement
from ..errors import UsageError


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
    """UsageError unless the PostgreSQL grant's ``CommitWatch`` can bound and check this connection's COMMIT."""
    driver = connection.connection.driver_connection
    if not hasattr(driver, "cancel") or not (hasattr(driver, "add_notice_handler") or hasattr(driver, "notices")):
        raise UsageError(
            f"the lease service cannot grant through the driver {connection.dialect.driver!r} on a primary "
            "with synchronous standbys: it could neither bound the grant's wait for a standby nor tell "
            "whether a standby confirmed it. Use psycopg (postgresql+psycopg://) or psycopg2, or pass "
            "--token from your own lease service (nothing was changed)"
        )
