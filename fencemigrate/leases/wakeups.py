"""Waking runners that wait for a busy lease when it is released, instead of polling blindly.

On PostgreSQL with psycopg 3 a waiting runner LISTENs on its lease connection, and every release
NOTIFYs (``sql/queries/postgresql/lease_release.sql``): the wait between two attempts ends the
moment the lease is freed, and can be long (a release wakes it), so waiting costs neither the
server nor the runner doing the work much. Elsewhere (SQLite, MySQL, other drivers) the pause is
a plain sleep. Expiry sends nothing: the pause never outlasts :data:`LONGEST_PAUSE_S`, after
which the runner tries again anyway.
"""

from __future__ import annotations

import time

from sqlalchemy import Connection

from ..dialects import dialect_for
from ..queries import statement

#: How long a woken wait may last at most: a lease that expires (its holder paused or died) sends
#: no notification, so this is also how late a waiter may notice an expiry.
LONGEST_PAUSE_S = 1.0


class ReleaseWakeups:
    """Pauses between grant attempts that a release of ``resource`` cuts short."""

    def __init__(self, connection: Connection, quoted_schema: str, resource: str) -> None:
        self._connection = connection
        self._schema = quoted_schema
        self._resource = resource
        self._listening = False
        self._driver = dialect_for(connection).notifying_driver(connection)

    @property
    def longest_pause_s(self) -> float | None:
        """The cap of the pause while a release can wake it; None when it cannot (plain sleep)."""
        return LONGEST_PAUSE_S if self._driver is not None else None

    def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less if the lease of our resource is released meanwhile.

        The first pause starts listening: an uncontended grant never pays for it, and a release
        that came between the busy attempt and the LISTEN costs one short first pause at most.
        """
        driver = self._driver
        if driver is None or self._connection.in_transaction():
            time.sleep(seconds)
            return
        if not self._listening:
            self._connection.execute(statement("lease_listen", self._schema))
            self._connection.commit()
            self._listening = True
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            for notice in driver.notifies(timeout=remaining, stop_after=1):
                if notice.payload == self._resource:
                    return

    def stop(self) -> None:
        """Stop hearing releases once granted (the holder's connection need not collect them)."""
        if self._listening:
            self._listening = False
            self._connection.execute(statement("lease_unlisten", self._schema))
            self._connection.commit()
