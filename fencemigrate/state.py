"""What an agent reads before it re-plans: heads, fences and the ledger."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection

from .dirty import Unsettled, tracks_dirty, unsettled_revisions, utc_text
from .fence_schema import installed_version
from .queries import statement
from .runtime.ledger_changes import version_table_name
from .tampering import FenceBelowLease, LedgerAboveFence, fence_below_lease, ledger_above_fence


@dataclass(frozen=True)
class FenceRow:
    """One fenced resource and the highest token that has written to it."""

    resource: str
    token: int
    updated_at: str


@dataclass(frozen=True)
class LedgerRow:
    """One applied revision and the token it was applied under."""

    revision: str
    resource: str
    applied_token: int
    holder: str
    method: str
    applied_at: str
    script_sha256: str | None
    state: str = "applied"  # 'applying' / 'rolling_back': its DDL started in pre-check mode, never finished


@dataclass
class State:
    """The database as it is now."""

    version_table: str
    heads: list[str] = field(default_factory=list)
    fence_schema_version: str | None = None
    fences: list[FenceRow] = field(default_factory=list)
    ledger: list[LedgerRow] = field(default_factory=list)
    dirty: list[Unsettled] = field(default_factory=list)
    # What only tampering with the fence leaves (errors): see tampering.py and check --db's FM405.
    ledger_above_fence: list[LedgerAboveFence] = field(default_factory=list)
    fence_below_lease: list[FenceBelowLease] = field(default_factory=list)
    fence_schema_problems: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """JSON form, printed by ``state --json``."""
        return {
            "status": "ok",
            "version_table": self.version_table,
            "heads": self.heads,
            "fence_schema_version": self.fence_schema_version,
            "fences": [vars(row) for row in self.fences],
            "ledger": [vars(row) for row in self.ledger],
            "dirty": [row.as_json() for row in self.dirty],
            "ledger_above_fence": [row.as_json() for row in self.ledger_above_fence],
            "fence_below_lease": [row.as_json() for row in self.fence_below_lease],
            "fence_schema_problems": self.fence_schema_problems,
        }


def read_state(context: MigrationContext, schema: str) -> State:
    """Read heads, fence rows and ledger rows through the migration context's connection."""
    connection = context.connection
    assert connection is not None
    version_table = version_table_name(context)
    state = State(version_table=version_table, heads=sorted(context.get_current_heads()))
    quoted = context.dialect.identifier_preparer.quote(schema)
    state.fence_schema_version = installed_version(connection, quoted)
    if state.fence_schema_version is None:
        return state
    dialect = connection.dialect.name
    state.fences = [
        FenceRow(row.resource, int(row.token), utc_text(row.updated_at))
        for row in connection.execute(statement("fence_rows", quoted, dialect))
    ]
    state.ledger = [
        LedgerRow(
            row.revision,
            row.resource,
            int(row.applied_token),
            row.holder,
            row.method,
            utc_text(row.applied_at),
            row.script_sha256,
            row._mapping.get("state", "applied"),
        )
        for row in connection.execute(statement("ledger_rows", quoted, dialect), {"version_table": version_table})
    ]
    if tracks_dirty(dialect, state.fence_schema_version):
        # Pre-check mode (MySQL/MariaDB, --mode precheck on PostgreSQL) leaves revisions dirty.
        state.dirty = [
            row
            for fence in state.fences
            for row in unsettled_revisions(connection, quoted, fence.resource)
        ]
    _read_tampering(connection, quoted, state)
    return state


def _read_tampering(connection: Connection, quoted_schema: str, state: State) -> None:
    """The impossible states tampering leaves, and how the fence schema differs from fencemigrate's."""
    from .check.fence_objects import fence_schema_problems

    assert state.fence_schema_version is not None
    state.ledger_above_fence = ledger_above_fence(connection, quoted_schema)
    state.fence_below_lease = fence_below_lease(connection, quoted_schema)
    state.fence_schema_problems = fence_schema_problems(connection, quoted_schema, state.fence_schema_version)

