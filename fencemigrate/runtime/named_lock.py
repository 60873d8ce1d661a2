"""The named lock that serialises fencemigrate writers on MySQL and MariaDB (``GET_LOCK``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from ..queries import statement


class NamedLock:
    """``GET_LOCK('fencemigrate:<database>/<resource>')`` on the migration's own connection.

    Session-level: held across the run's commits, and released by the server when the session
    ends, so a writer that dies (SIGKILL, a lost connection) never leaves it behind.
    """

    def __init__(self, connection: Connection, quoted_schema: str, resource: str) -> None:
        self._connection = connection
        self._schema = quoted_schema
        self._dbapi = connection.connection.dbapi_connection
        self.name = str(self._scalar("named_lock_name", resource=resource))
        self.held = False

    def acquire(self, wait_ms: int) -> bool:
        """Take the lock, waiting at most ``wait_ms``; False on timeout."""
        self.held = self._scalar("named_lock", name=self.name, timeout_s=wait_ms / 1000) == 1
        return self.held

    def holder(self) -> int | None:
        """The connection id of the session holding the lock, or None when it is free."""
        value = self._scalar("named_lock_holder", name=self.name)
        return None if value is None else int(value)

    def release(self) -> None:
        """Release the lock if this run still holds it. The connection may be closed already
        (the server released the lock then): that is not an error."""
        if not self.held:
            return
        self.held = False
        try:
            self._scalar("named_lock_release", name=self.name)
        except Exception:  # noqa: BLE001 - a closed connection released the lock with its session
            return

    def _scalar(self, query: str, **params: Any) -> Any:
        """Run on the DBAPI connection, outside SQLAlchemy's transaction bookkeeping: the lock
        belongs to the session, not to a transaction, and is released after env.py has closed
        its SQLAlchemy connection."""
        compiled = statement(query, self._schema, self._connection.dialect.name).compile(
            dialect=self._connection.dialect
        )
        assert self._dbapi is not None
        cursor = self._dbapi.cursor()
        try:
            cursor.execute(str(compiled), compiled.construct_params(params))
            row = cursor.fetchone()
        finally:
            cursor.close()
        return None if row is None else row[0]
