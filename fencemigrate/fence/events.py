"""Append to the event log that ``fencemigrate timeline`` reads."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from ..dialects import dialect_for
from ..dialects.statements import statement


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
    connection.execute(
        statement("log_event", quoted_schema, connection.dialect.name),
        {
            "at": None if at is None else dialect_for(connection).time_param(at),
            "resource": resource,
            "kind": kind,
            "holder": holder,
            "token": token,
            "revision": revision,
            "detail": None if detail is None else json.dumps(detail, sort_keys=True),
        },
    )
