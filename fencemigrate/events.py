"""Append to the event log that ``fencemigrate timeline`` reads."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection

from .queries import statement


def log_event(
    connection: Connection,
    quoted_schema: str,
    *,
    resource: str,
    kind: str,
    holder: str | None = None,
    token: int | None = None,
    revision: str | None = None,
    detail: dict[str, Any] | None = None,
    at: datetime | None = None,
) -> None:
    """Insert one event in the connection's current transaction (dated now by the database's clock,
    or ``at``). ``detail`` is stored as JSON text."""
    dialect = connection.dialect.name
    connection.execute(
        statement("log_event", quoted_schema, dialect),
        {
            "at": _sqlite_time(at) if dialect == "sqlite" and at is not None else at,
            "resource": resource,
            "kind": kind,
            "holder": holder,
            "token": token,
            "revision": revision,
            "detail": None if detail is None else json.dumps(detail, sort_keys=True),
        },
    )


def _sqlite_time(moment: datetime) -> str:
    """``moment`` as SQLite stores every fence time: UTC text of the one form its own clock writes,
    ``strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`` (``2026-11-29T14:26:00.123Z``), so times sort as text."""
    utc = moment.astimezone(UTC)
    return f"{utc:%Y-%m-%dT%H:%M:%S}.{utc.microsecond // 1000:03d}Z"
