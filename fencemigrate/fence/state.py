"""What an agent reads before it re-plans: heads, fences and the ledger."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, inspect

from ..dialects import dialect_for, installed_version, version_at_least
from ..dirty import Unsettled, unsettled_revisions
from ..durations import format_duration
from ..queries import statement
from ..runtime.ledger_changes import version_table_name
from ..tampering import (
    FenceBelowLease,
    LedgerAboveFence,
    UnexplainedToken,
    fence_below_lease,
    installed_tables,
    ledger_above_fence,
    unexplained_tokens,
)
from ..version_guard import UNGUARDED, GuardState, guard_state


@dataclass(frozen=True)
class FenceRow:
    """One fenced resource and the highest token that has written to it."""

    resource: str
    token: int
    updated_at: str
    token_source: str = "external"  # or 'lease service', 'redis' (see token_sources); older schemas: not recorded
    incarnation: str | None = None  # what its last grant ran on (leases/epochs.py); PostgreSQL, schema 0.6 on
    replication: str | None = None  # its held lease's grant: 'synchronous' (confirmed by a standby), 'asynchronous'


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
class AutocommitLeftover:
    """A FENCED run in which revisions had run statements in an autocommit block: committed on
    their own, outside the fenced transaction, they may have been left applied."""

    resource: str
    revisions: list[str]
    holder: str | None
    token: int | None
    fenced_at: str


@dataclass(frozen=True)
class Unrecorded:
    """Where the version table and the ledger disagree: written without a fencing token."""

    version_table_only: list[str] = field(default_factory=list)  # applied, no ledger row
    ledger_only: list[str] = field(default_factory=list)  # a ledger row, not applied by the version table

    def as_json(self) -> dict[str, list[str]]:
        """JSON form, in ``state --json``."""
        return {"version_table_only": self.version_table_only, "ledger_only": self.ledger_only}


@dataclass(frozen=True)
class ImplausibleLease:
    """A held lease granted further in the future than its TTL by the database's clock (by this
    machine's on SQLite): a clock was ahead when it was granted, or stepped back since. Counted as
    expired; the next grant takes it over."""

    resource: str
    holder: str
    token: int
    granted_at: str
    ttl_ms: int

    @property
    def message(self) -> str:
        """The ``WARNING:`` line of ``state``."""
        return (
            f"the lease of {self.resource} (held by {self.holder}, token {self.token}) was granted at "
            f"{self.granted_at}, further in the future than its TTL ({format_duration(self.ttl_ms)}): a clock was "
            "ahead when it was granted, or stepped back since; it is implausible and treated as expired (the next "
            "grant takes it over)"
        )

    def as_json(self) -> dict[str, Any]:
        """JSON form, in ``state --json``."""
        return {**vars(self), "message": self.message}


@dataclass
class State:
    """The database as it is now."""

    version_table: str
    heads: list[str] = field(default_factory=list)
    fence_schema_version: str | None = None
    fences: list[FenceRow] = field(default_factory=list)
    ledger: list[LedgerRow] = field(default_factory=list)
    dirty: list[Unsettled] = field(default_factory=list)
    autocommit_leftovers: list[AutocommitLeftover] = field(default_factory=list)
    # What only tampering with the fence leaves (errors): see tampering.py and check --db's FM405.
    ledger_above_fence: list[LedgerAboveFence] = field(default_factory=list)
    fence_below_lease: list[FenceBelowLease] = field(default_factory=list)
    implausible_leases: list[ImplausibleLease] = field(default_factory=list)
    unexplained_tokens: list[UnexplainedToken] = field(default_factory=list)
    fence_schema_problems: list[str] = field(default_factory=list)
    tokenless_writes: GuardState | None = None
    unguarded_version_table: bool = False  # it exists, unguarded, and tokenless writes were never allowed
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
            "autocommit_leftovers": [vars(row) for row in self.autocommit_leftovers],
            "ledger_above_fence": [row.as_json() for row in self.ledger_above_fence],
            "fence_below_lease": [row.as_json() for row in self.fence_below_lease],
            "implausible_leases": [row.as_json() for row in self.implausible_leases],
            "unexplained_tokens": [row.as_json() for row in self.unexplained_tokens],
            "fence_schema_problems": self.fence_schema_problems,
            "tokenless_writes": None if self.tokenless_writes is None else self.tokenless_writes.as_json(),
            "unrecorded": self.unrecorded.as_json(),
        }


NOT_RECORDED = "not recorded (fence schema before 0.4)"


def _token_sources(connection: Connection, quoted_schema: str, schema_version: str) -> dict[str, str]:
    """``{resource: token source}``; empty before fence schema 0.4, which records them."""
    if not version_at_least(schema_version, (0, 4)):
        return {}
    rows = connection.execute(statement("token_sources", quoted_schema, connection.dialect.name))
    return {row.resource: row.token_source for row in rows}


def _grant_replication(
    connection: Connection, quoted_schema: str, schema_version: str
) -> dict[str, tuple[str | None, str | None]]:
    """``{resource: (incarnation, replication)}`` of the last grants; PostgreSQL from fence schema 0.6
    (none when its lease table was dropped: ``check --db`` reports that)."""
    if dialect_for(connection).prefixes_tables or not version_at_least(schema_version, (0, 6)):
        return {}
    if "lease" not in installed_tables(connection, quoted_schema):
        return {}
    rows = connection.execute(statement("grant_replication", quoted_schema, connection.dialect.name))
    return {row.resource: (row.incarnation, row.replication) for row in rows}


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
    database = dialect_for(connection)
    sources = _token_sources(connection, quoted, state.fence_schema_version)
    grants = _grant_replication(connection, quoted, state.fence_schema_version)
    state.fences = [
        FenceRow(
            row.resource,
            int(row.token),
            database.time_text(row.updated_at),
            sources.get(row.resource, NOT_RECORDED),
            *grants.get(row.resource, (None, None)),
        )
        for row in connection.execute(statement("fence_rows", quoted, dialect))
    ]
    state.ledger = [
        LedgerRow(
            row.revision,
            row.resource,
            int(row.applied_token),
            row.holder,
            row.method,
            database.time_text(row.applied_at),
            row.script_sha256,
            row._mapping.get("state", "applied"),
        )
        for row in connection.execute(statement("ledger_rows", quoted, dialect), {"version_table": version_table})
    ]
    if _has_event_log(connection, schema, state.fence_schema_version):
        state.ledger = _in_apply_order(connection, quoted, dialect, state.ledger)
        state.autocommit_leftovers = _autocommit_leftovers(connection, quoted, dialect, state.ledger)
    if version_at_least(state.fence_schema_version, (0, 4)):  # the guard came with fence schema 0.4
        state.tokenless_writes = guard_state(context, quoted)
        state.unguarded_version_table = state.tokenless_writes.status == UNGUARDED and inspect(connection).has_table(
            context.version_table, context.version_table_schema
        )
    state.unrecorded = reconcile(context, state.heads, state.ledger)
    if database.tracks_dirty(state.fence_schema_version):
        # Pre-check mode (MySQL/MariaDB, --mode precheck on PostgreSQL) leaves revisions dirty.
        state.dirty = [row for fence in state.fences for row in unsettled_revisions(connection, quoted, fence.resource)]
    _read_tampering(connection, quoted, state)
    state.implausible_leases = _implausible_leases(connection, quoted)
    return state


def _implausible_leases(connection: Connection, quoted_schema: str) -> list[ImplausibleLease]:
    """Held leases granted further in the future than their TTL (none without the lease table)."""
    if "lease" not in installed_tables(connection, quoted_schema):
        return []
    database = dialect_for(connection)
    return [
        ImplausibleLease(row.resource, row.holder, int(row.token), database.time_text(row.granted_at), int(row.ttl_ms))
        for row in connection.execute(statement("implausible_leases", quoted_schema, connection.dialect.name))
    ]


def _has_event_log(connection: Connection, schema: str, version: str) -> bool:
    """The event log exists: installed from 0.2 on, and not dropped (`check --db` reports that)."""
    if not version_at_least(version, (0, 2)):
        return False
    if dialect_for(connection).prefixes_tables:
        return inspect(connection).has_table(f"{schema}_fence_event")
    return inspect(connection).has_table("fence_event", schema=schema)


def _in_apply_order(connection: Connection, quoted: str, dialect: str, ledger: list[LedgerRow]) -> list[LedgerRow]:
    """The ledger in the order its revisions were applied: by applied_at, then by their APPLY or
    STAMP events, which tell apart the rows that share an applied_at (PostgreSQL's is the start of
    their transaction; SQLite's clock counts milliseconds)."""
    logged = {
        (row.resource, row.revision): int(row.seq)
        for row in connection.execute(statement("apply_order", quoted, dialect))
    }
    return sorted(ledger, key=lambda row: (_moment(row.applied_at), logged.get((row.resource, row.revision), 0)))


def _autocommit_leftovers(
    connection: Connection, quoted: str, dialect: str, ledger: list[LedgerRow]
) -> list[AutocommitLeftover]:
    """FENCED runs whose autocommit blocks ran, for each revision not applied (by anyone) since."""
    applied_at = {row.revision: _moment(row.applied_at) for row in ledger}
    found = []
    for row in connection.execute(statement("autocommit_fenced", quoted, dialect)):
        at = dialect_for(connection).time_text(row.at)
        try:
            named = json.loads(row.detail).get("autocommitted", [])
        except (ValueError, AttributeError):  # not a detail fencemigrate wrote
            continue
        revisions = [revision for revision in named if revision not in applied_at or applied_at[revision] < _moment(at)]
        if revisions:
            token = None if row.token is None else int(row.token)
            found.append(AutocommitLeftover(row.resource, revisions, row.holder, token, at))
    return found


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _read_tampering(connection: Connection, quoted_schema: str, state: State) -> None:
    """The impossible states tampering leaves, and how the fence schema differs from fencemigrate's."""
    from .objects import fence_schema_problems

    assert state.fence_schema_version is not None
    state.ledger_above_fence = ledger_above_fence(connection, quoted_schema)
    state.fence_below_lease = fence_below_lease(connection, quoted_schema)
    state.unexplained_tokens = unexplained_tokens(connection, quoted_schema, state.fence_schema_version)
    state.fence_schema_problems = fence_schema_problems(connection, quoted_schema, state.fence_schema_version)


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
