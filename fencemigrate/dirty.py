"""Dirty revisions: a pre-check run marked their ledger rows before their DDL and never settled them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection

from .errors import Dirty
from .fence_schema import version_at_least
from .prefixed_schema import installed_version
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
    return version_at_least(schema_version, (0, 3))


TOKENLESS_HOLDER = "(a write without a fencing token)"
"""The holder of a dirty revision that a refused write without a token left (its token is 0)."""


def unsettled_revisions(connection: Connection, quoted_schema: str, resource: str) -> list[Unsettled]:
    """The dirty revisions of ``resource``, oldest first; on MySQL also those that refused writes
    without a token left (any resource's: they name none)."""
    rows = connection.execute(
        statement("unsettled_revisions", quoted_schema, connection.dialect.name), {"resource": resource}
    )
    found = [
        Unsettled(
            row.version_table,
            row.revision,
            row.state,
            int(row.state_token),
            row.state_holder,
            utc_text(row.state_since),
        )
        for row in rows
    ]
    if query_dialect(connection.dialect.name) == "mysql" and _has_tokenless_marks(connection, quoted_schema):
        found += [
            Unsettled(row.version_table, row.revision, row.state, 0, TOKENLESS_HOLDER, utc_text(row.at))
            for row in connection.execute(statement("tokenless_writes", quoted_schema, connection.dialect.name))
        ]
    return found


def _has_tokenless_marks(connection: Connection, quoted_schema: str) -> bool:
    """MySQL's fence schema records refused writes without a token from 0.4 on."""
    version = installed_version(connection, quoted_schema)
    return version is not None and version_at_least(version, (0, 4))


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
        value = value.replace(tzinfo=UTC)
    return value.isoformat()
