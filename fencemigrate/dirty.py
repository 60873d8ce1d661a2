"""Dirty revisions: a pre-check run marked their ledger rows before their DDL and never settled them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Connection

from .errors import Dirty
from .queries import query_dialect, statement


@dataclass(frozen=True)
class Unsettled:
    """One dirty revision: its DDL started (``state`` 'applying' or 'rolling_back') and never finished."""

    version_table: str
    revision: str
    state: str
    token: int
    holder: str
    since: str

    def as_json(self) -> dict[str, Any]:
        """JSON form, in ``state --json`` and in the DIRTY error."""
        return vars(self).copy()


def tracks_dirty(dialect_name: str, schema_version: str | None) -> bool:
    """True when the fence schema has the ledger's ``state`` (MySQL; PostgreSQL from 0.3)."""
    if schema_version is None or query_dialect(dialect_name) == "sqlite":
        return False
    return tuple(int(part) for part in schema_version.split(".")) >= (0, 3)


def unsettled_revisions(connection: Connection, quoted_schema: str, resource: str) -> list[Unsettled]:
    """The dirty revisions of ``resource``, oldest first."""
    rows = connection.execute(
        statement("unsettled_revisions", quoted_schema, connection.dialect.name), {"resource": resource}
    )
    return [
        Unsettled(
            row.version_table, row.revision, row.state, int(row.state_token), row.state_holder,
            utc_text(row.state_since),
        )
        for row in rows
    ]


def refuse_if_dirty(connection: Connection, quoted_schema: str, resource: str) -> None:
    """Raise DIRTY, naming the oldest dirty revision of ``resource``, if there is one."""
    dirty = unsettled_revisions(connection, quoted_schema, resource)
    if dirty:
        first = dirty[0]
        raise Dirty(resource, first.revision, first.state, first.token, first.holder, first.since)


def utc_text(value: datetime | str) -> str:
    """ISO 8601 text of a database time. MySQL's DATETIME columns hold UTC without a zone."""
    if isinstance(value, str):
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.isoformat()
