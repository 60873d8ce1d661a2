"""What an agent reads before it re-plans: heads, fences and the ledger."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from alembic.runtime.migration import MigrationContext

from .dirty import Unsettled, tracks_dirty, unsettled_revisions, utc_text
from .fence_schema import installed_version
from .queries import statement
from .runtime.ledger_changes import version_table_name
from .version_guard import GuardState, guard_state


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


@dataclass(frozen=True)
class Unrecorded:
    """Where the version table and the ledger disagree: written without a fencing token."""

    version_table_only: list[str] = field(default_factory=list)  # applied, no ledger row
    ledger_only: list[str] = field(default_factory=list)  # a ledger row, not applied by the version table

    def as_json(self) -> dict[str, list[str]]:
        """JSON form, in ``state --json``."""
        return {"version_table_only": self.version_table_only, "ledger_only": self.ledger_only}


@dataclass
class State:
    """The database as it is now."""

    version_table: str
    heads: list[str] = field(default_factory=list)
    fence_schema_version: str | None = None
    fences: list[FenceRow] = field(default_factory=list)
    ledger: list[LedgerRow] = field(default_factory=list)
    dirty: list[Unsettled] = field(default_factory=list)
    tokenless_writes: GuardState | None = None
    unrecorded: Unrecorded = field(default_factory=lambda: Unrecorded())

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
            "tokenless_writes": None if self.tokenless_writes is None else self.tokenless_writes.as_json(),
            "unrecorded": self.unrecorded.as_json(),
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
    if _at_least(state.fence_schema_version, (0, 4)):  # the guard came with fence schema 0.4
        state.tokenless_writes = guard_state(context, quoted)
    state.unrecorded = reconcile(context, state.heads, state.ledger)
    if tracks_dirty(dialect, state.fence_schema_version):
        # Pre-check mode (MySQL/MariaDB, --mode precheck on PostgreSQL) leaves revisions dirty.
        state.dirty = [
            row
            for fence in state.fences
            for row in unsettled_revisions(connection, quoted, fence.resource)
        ]
    return state



def reconcile(context: MigrationContext, heads: list[str], ledger: list[LedgerRow]) -> Unrecorded:
    """Compare the revisions the version table's heads apply (with their ancestors) with the ledger.

    Dirty ledger rows are left out: their DDL never finished, which ``dirty`` reports. Below a head
    that no revision file has, nothing is known: then ledger rows are not compared (FM403 says why).
    """
    applied = applied_revisions(context, heads)
    recorded = {row.revision for row in ledger}
    settled = {row.revision for row in ledger if row.state == "applied"}
    ledger_only = [] if applied is None else sorted(settled - applied)
    return Unrecorded(sorted((applied or set(heads)) - recorded), ledger_only)


def applied_revisions(context: MigrationContext, heads: list[str]) -> set[str] | None:
    """The heads and every revision below them; None when a head has no revision file."""
    applied = set(heads)
    script = context.script
    if script is None:
        return None
    for head in heads:
        try:
            applied.update(revision.revision for revision in script.revision_map.iterate_revisions(head, "base"))
        except Exception:  # noqa: BLE001 - alembic raises several resolution errors for a missing file
            return None
    return applied


def _at_least(version: str, minimum: tuple[int, ...]) -> bool:
    return tuple(int(part) for part in version.split(".")) >= minimum
