"""The named lock that serialises fencemigrate writers on MySQL and MariaDB (``GET_LOCK``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from ..durations import format_duration
from ..errors import LeaseBusy
from ..queries import statement
from .driver import scalar_on_dbapi


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

    def take(self, wait_ms: int) -> None:
        """Take the lock, waiting at most ``wait_ms``; busy (exit 4) naming who holds it on timeout."""
        if self.acquire(wait_ms):
            return
        holder = self.holder()
        raise LeaseBusy(
            self._resource,
            None,
            f"another fencemigrate writer holds the named lock {self.name!r}"
            + (f" (connection {holder})" if holder is not None else "")
            + f"; waited {format_duration(wait_ms)}",
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
