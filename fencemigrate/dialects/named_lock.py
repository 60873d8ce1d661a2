"""The named lock that serialises fencemigrate writers on MySQL and MariaDB (``GET_LOCK``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection

from ..connections import close, probe_connection
from .fence_holders import PREEMPT_WAIT_MS
from .statements import scalar_on_dbapi, statement
from .waits import LockHolder, WaitBound, describe_holders, statement_excerpt, wait_in_slices


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

    def take(
        self, bound: WaitBound, token: int | None = None, busy: Callable[[tuple[LockHolder, ...]], str] | None = None
    ) -> None:
        """Take the lock within ``bound``, in slices that report who holds it; with ``--preempt``,
        the session of a holder under a token older than ``token`` is ended first (``KILL
        CONNECTION`` on MySQL, ``pg_terminate_backend`` on PostgreSQL: a revision it was running
        stays dirty). Busy (exit 4) naming who holds it when ``bound.wait_ms`` runs out (``busy``: the
        reason given then, from the holders)."""

        wait_in_slices(
            self._resource,
            f"the named lock {self.name!r}",
            bound,
            self.acquire,
            self.holders,
            lambda holders: self._preempt_older(holders, token),
            busy or self._busy,
        )

    def _preempt_older(self, holders: tuple[LockHolder, ...], token: int | None) -> None:
        """End the sessions among ``holders`` under a token older than ``token``."""
        for holder in holders:
            if holder.pid is not None and holder.token is not None and token is not None and holder.token < token:
                self._scalar("preempt_writer", connection_id=holder.pid, wait_ms=PREEMPT_WAIT_MS)

    def _busy(self, holders: tuple[LockHolder, ...]) -> str:
        return f"another fencemigrate writer holds the named lock {self.name!r}" + (
            f" ({describe_holders(holders)})" if holders else ""
        )

    def holders(self) -> tuple[LockHolder, ...]:
        """The session holding the lock (none when it is free): its id, the pre-check run it is, and
        what it runs (the ``named_lock_session`` statement). Read on a connection of its own in autocommit mode:
        a read in this session would start the snapshot (MySQL's REPEATABLE READ) that the run's
        reads under the lock must not see the database through."""
        clause = statement("named_lock_session", self._schema, self._dialect.name)
        probe = probe_connection(self._connection.engine)
        try:
            rows = probe.execute(clause, {"resource": self._resource, "name": self.name}).all()
        finally:
            close(probe)
        kind = "connection" if self._dialect.name in ("mysql", "mariadb") else "pid"
        return tuple(
            LockHolder(
                pid=int(pid),
                session_kind=kind,
                holder=holder,
                token=None if held_token is None else int(held_token),
                since=since,
                running=f"{command} for {seconds}s" + (f": {statement_excerpt(str(info))}" if info else ""),
            )
            for pid, command, seconds, info, holder, held_token, since in rows
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
