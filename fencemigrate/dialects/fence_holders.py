"""PostgreSQL: who holds the fence a writer waits for, read from ``pg_locks`` and ``pg_stat_activity``.

Every claim holds the resource's claim lock (an advisory lock, shared) until its transaction ends,
and names its transaction ``fencemigrate token <n> <holder>`` (``application_name``, local to the
transaction: the ``claimant`` statement), so a writer waiting behind it can say whose it is and under which
token, and ``--preempt`` can tell a stale writer (an older token) from a newer one.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from .statements import scalar_on_driver, statement
from .waits import LockHolder, statement_excerpt

_CLAIMANT = re.compile(r"fencemigrate token (\d+)(?: (.*))?", re.DOTALL)
_NAME_BYTES = 63  # PostgreSQL keeps this much of an application_name (NAMEDATALEN - 1)
PREEMPT_WAIT_MS = 5000
"""How long ``--preempt`` waits for a terminated writer's session to exit."""


def claimant_name(holder: str, token: int) -> str:
    """The ``application_name`` a claim's transaction carries: its token first, so that cutting it to
    PostgreSQL's 63 bytes only ever shortens the holder."""
    name = f"fencemigrate token {token} {holder}".encode()[:_NAME_BYTES]
    return name.decode("utf-8", "ignore")


def fence_holders(connection: Connection, quoted_schema: str, resource: str) -> tuple[LockHolder, ...]:
    """The other sessions holding the fence of ``resource`` now (its claim lock), oldest transaction first."""
    rows = connection.execute(statement("fence_holders", quoted_schema), {"resource": resource}).all()
    return tuple(_holder(row) for row in rows)


def terminate_older(connection: Connection, quoted_schema: str, holders: tuple[LockHolder, ...], token: int) -> None:
    """``--preempt``: end the sessions among ``holders`` that claimed under a token older than
    ``token`` (their transactions roll back completely). A holder whose token is not known (not a
    claim of this version's) or not older is left alone: it may be a newer writer."""
    for holder in holders:
        if holder.pid is not None and holder.token is not None and holder.token < token:
            scalar_on_driver(
                connection,
                statement("terminate_writer", quoted_schema),
                {"pid": holder.pid, "wait_ms": PREEMPT_WAIT_MS},
            )


def _holder(row: Any) -> LockHolder:
    match = _CLAIMANT.fullmatch(row.application_name or "")
    since: datetime | None = row.xact_start
    return LockHolder(
        pid=int(row.pid),
        holder=(match.group(2) or None) if match else (row.application_name or None),
        token=int(match.group(1)) if match else None,
        since=since,
        running=_running(row.state, row.query),
    )


def _running(state: str | None, query: str | None) -> str | None:
    """What the session does: ``running: <statement>``, or ``idle in transaction after: <statement>``."""
    if not query:
        return state
    text = statement_excerpt(query)
    return f"running: {text}" if state == "active" else f"{state} after: {text}"
