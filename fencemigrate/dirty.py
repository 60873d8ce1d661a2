"""Dirty revisions: a pre-check run marked their ledger rows before their DDL and never settled them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from .dialects import dialect_for
from .errors import Dirty
from .queries import statement


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


TOKENLESS_HOLDER = "(a write without a fencing token)"
"""The holder of a dirty revision that a refused write without a token left (its token is 0)."""


def unsettled_revisions(connection: Connection, quoted_schema: str, resource: str) -> list[Unsettled]:
    """The dirty revisions of ``resource``, oldest first; on MySQL also those that refused writes
    without a token left (any resource's: they name none)."""
    dialect = dialect_for(connection)
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
            dialect.time_text(row.state_since),
        )
        for row in rows
    ]
    if dialect.records_tokenless_writes(connection, quoted_schema):
        found += [
            Unsettled(row.version_table, row.revision, row.state, 0, TOKENLESS_HOLDER, dialect.time_text(row.at))
            for row in connection.execute(statement("tokenless_writes", quoted_schema, connection.dialect.name))
        ]
    return found


def refuse_if_dirty(connection: Connection, quoted_schema: str, resource: str) -> None:
    """Raise DIRTY, naming the oldest dirty revision of ``resource``, if there is one."""
    dirty = unsettled_revisions(connection, quoted_schema, resource)
    if dirty:
        first = dirty[0]
        raise Dirty(resource, first.revision, first.state, first.token, first.holder, first.since)
