"""What an agent reads before it re-plans: heads, fences, the ledger, the leases, and the states no
fenced run can leave, which only tampering with the fence does (``state`` and ``check --db``:
FM411, FM412, FM413).

Every write claims the fence first and the fence never goes down, so a ledger row applied under
a token above its resource's fence token means the fence was lowered (its guard trigger
disabled or dropped) after that row was written; every grant advances the fence to its token,
so a fence below the lease's last issued token was lowered too. Either way, stale tokens are no
longer fenced. Every grant also logs a GRANT event of its token, so a lease counter, or the fence
of a leased resource, at a token no GRANT event names was raised behind the lease service's back:
every later grant starts above it (at the largest token, none can be issued again)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, inspect

from ..config import format_duration
from ..dialects import dialect_for, installed_version
from ..dialects.statements import prefixed_table_name, statement
from .guard import UNGUARDED, GuardState, guard_state
from .ledger import Unsettled, unsettled_revisions, version_table_name


@dataclass(frozen=True)
class LedgerAboveFence:
    """A ledger row applied under a token above its resource's fence token (None: no fence row)."""

    version_table: str
    revision: str
    resource: str
    applied_token: int
    fence_token: int | None

    @property
    def message(self) -> str:
        """What it means, in one line."""
        head = f"the ledger row of {self.revision} ({self.version_table}) has applied_token {self.applied_token}"
        if self.fence_token is None:
            return f"{head}, but {self.resource} has no fence row: the fence row was deleted after it was written"
        return (
            f"{head}, above the fence token {self.fence_token} of {self.resource}: "
            "the fence was lowered after it was written"
        )

    def as_json(self) -> dict[str, Any]:
        """JSON form, in ``state --json``."""
        return {**vars(self), "message": self.message}


@dataclass(frozen=True)
class FenceBelowLease:
    """A fence token below the last token the built-in lease service issued (None: no fence row)."""

    resource: str
    fence_token: int | None
    lease_token: int

    @property
    def message(self) -> str:
        """What it means, in one line."""
        if self.fence_token is None:
            return (
                f"{self.resource} has no fence row, but the lease service issued token {self.lease_token}: "
                "the fence row was deleted, so any token can write"
            )
        return (
            f"the fence token of {self.resource} is {self.fence_token}, below the last token the lease "
            f"service issued ({self.lease_token}): the fence was lowered, so stale tokens down to "
            f"{self.fence_token} are no longer fenced"
        )

    def as_json(self) -> dict[str, Any]:
        """JSON form, in ``state --json``."""
        return {**vars(self), "message": self.message}


@dataclass(frozen=True)
class UnexplainedToken:
    """A lease counter (``kind`` 'lease') or a leased resource's fence token ('fence') that no recorded
    grant issued."""

    kind: str
    resource: str
    token: int
    token_source: str | None  # the fence's: 'lease service' or 'redis'; None for a lease counter

    @property
    def message(self) -> str:
        """What it means, in one line."""
        if self.kind == "lease":
            head = f"the lease token counter of {self.resource} is {self.token}"
        else:
            source = "Redis" if self.token_source == "redis" else "the lease service"
            head = f"the fence token of {self.resource} is {self.token} (tokens from {source})"
        return (
            f"{head}, but no grant of that token is recorded: it was written behind the lease service's back, "
            "and no grant can issue a token above it"
        )

    def as_json(self) -> dict[str, Any]:
        """JSON form, in ``state --json``."""
        return {**vars(self), "message": self.message}


def ledger_above_fence(connection: Connection, quoted_schema: str) -> list[LedgerAboveFence]:
    """Ledger rows, of every version table, above the fence token of their resource (none when a
    table they need was dropped: FM405 reports that)."""
    if not {"applied_revision", "agent_fence"} <= installed_tables(connection, quoted_schema):
        return []
    return [
        LedgerAboveFence(
            row.version_table,
            row.revision,
            row.resource,
            int(row.applied_token),
            None if row.fence_token is None else int(row.fence_token),
        )
        for row in connection.execute(statement("ledger_above_fence", quoted_schema, connection.dialect.name))
    ]


def fence_below_lease(connection: Connection, quoted_schema: str) -> list[FenceBelowLease]:
    """Resources whose fence token is below the lease's last issued token (none without the lease
    table: PostgreSQL's 0.1 has none, or it was dropped)."""
    if not {"lease", "agent_fence"} <= installed_tables(connection, quoted_schema):
        return []
    return [
        FenceBelowLease(row.resource, None if row.fence_token is None else int(row.fence_token), int(row.lease_token))
        for row in connection.execute(statement("fence_below_lease", quoted_schema, connection.dialect.name))
    ]


def unexplained_tokens(connection: Connection, quoted_schema: str) -> list[UnexplainedToken]:
    """Lease counters and leased fences at a token no GRANT event names (none without the tables)."""
    if not {"lease", "agent_fence", "fence_event"} <= installed_tables(connection, quoted_schema):
        return []
    return [
        UnexplainedToken(row.kind, row.resource, int(row.token), row.token_source)
        for row in connection.execute(statement("unexplained_tokens", quoted_schema, connection.dialect.name))
    ]


def installed_tables(connection: Connection, quoted_schema: str) -> set[str]:
    """The fence tables in the database, without SQLite's and MySQL's prefix."""
    from .objects import installed_fence_objects

    prefix = prefixed_table_name(quoted_schema, "") if dialect_for(connection).prefixes_tables else ""
    return {
        name.removeprefix(prefix)
        for kind, name in installed_fence_objects(connection, quoted_schema)
        if kind == "table"
    }


@dataclass(frozen=True)
class FenceRow:
    """One fenced resource and the highest token that has written to it."""

    resource: str
    token: int
    updated_at: str
    token_source: str = "external"  # or 'lease service', 'redis' (see fence.tokens); older schemas: not recorded
    incarnation: str | None = None  # what its last grant ran on (leases/epochs.py); PostgreSQL
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


def _token_sources(connection: Connection, quoted_schema: str) -> dict[str, str]:
    """``{resource: token source}``."""
    rows = connection.execute(statement("token_sources", quoted_schema, connection.dialect.name))
    return {row.resource: row.token_source for row in rows}


def _grant_replication(connection: Connection, quoted_schema: str) -> dict[str, tuple[str | None, str | None]]:
    """``{resource: (incarnation, replication)}`` of the last grants; PostgreSQL only (none when its
    lease table was dropped: ``check --db`` reports that)."""
    if not dialect_for(connection).replication_known:
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
    sources = _token_sources(connection, quoted)
    grants = _grant_replication(connection, quoted)
    state.fences = [
        FenceRow(
            row.resource,
            int(row.token),
            database.time_text(row.updated_at),
            sources[row.resource],
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
    if _has_event_log(connection, schema):
        state.ledger = _in_apply_order(connection, quoted, dialect, state.ledger)
        state.autocommit_leftovers = _autocommit_leftovers(connection, quoted, dialect, state.ledger)
    state.tokenless_writes = guard_state(context, quoted)
    state.unguarded_version_table = state.tokenless_writes.status == UNGUARDED and inspect(connection).has_table(
        context.version_table, context.version_table_schema
    )
    state.unrecorded = reconcile(context, state.heads, state.ledger)
    if database.tracks_dirty:
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


def _has_event_log(connection: Connection, schema: str) -> bool:
    """The event log exists: not dropped (`check --db` reports that)."""
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
    state.unexplained_tokens = unexplained_tokens(connection, quoted_schema)
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
