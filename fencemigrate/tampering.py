"""States no fenced run can leave, which only tampering with the fence does: read for ``state``
and ``check --db`` (FM411, FM412, FM413).

Every write claims the fence first and the fence never goes down, so a ledger row applied under
a token above its resource's fence token means the fence was lowered (its guard trigger
disabled or dropped) after that row was written; every grant advances the fence to its token,
so a fence below the lease's last issued token was lowered too. Either way, stale tokens are no
longer fenced. Every grant also logs a GRANT event of its token, so a lease counter, or the fence
of a leased resource, at a token no GRANT event names was raised behind the lease service's back:
every later grant starts above it (at the largest token, none can be issued again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from .dialects import dialect_for, version_at_least
from .queries import prefixed_table_name, statement


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


def unexplained_tokens(connection: Connection, quoted_schema: str, schema_version: str) -> list[UnexplainedToken]:
    """Lease counters and leased fences at a token no GRANT event names (none without the tables, or
    before fence schema 0.4, which records where a fence's tokens come from)."""
    if not version_at_least(schema_version, (0, 4)) or not {"lease", "agent_fence", "fence_event"} <= installed_tables(
        connection, quoted_schema
    ):
        return []
    return [
        UnexplainedToken(row.kind, row.resource, int(row.token), row.token_source)
        for row in connection.execute(statement("unexplained_tokens", quoted_schema, connection.dialect.name))
    ]


def installed_tables(connection: Connection, quoted_schema: str) -> set[str]:
    """The fence tables in the database, without SQLite's and MySQL's prefix."""
    from .fence.objects import installed_fence_objects

    prefix = prefixed_table_name(quoted_schema, "") if dialect_for(connection).prefixes_tables else ""
    return {
        name.removeprefix(prefix)
        for kind, name in installed_fence_objects(connection, quoted_schema)
        if kind == "table"
    }
