"""Rules for what only tampering with the fence leaves in the database (``check --db``)."""

from __future__ import annotations

from collections.abc import Iterator

from ..findings import Finding
from .base import CheckContext, Rule

_FIX = (
    "find out who lowered the fence (a guard trigger disabled or dropped: FM405, `fencemigrate install` "
    "puts it back), then check what the stale tokens wrote; own the fence by another role (README, Two roles)"
)


class LedgerAboveFence(Rule):
    """FM411: a ledger row applied under a token above its resource's fence token: no run can leave
    that, only a fence lowered behind the guard's back, after which stale tokens can write."""

    id = "FM411"
    name = "ledger-above-fence"
    summary = (
        "a ledger row applied under a token above the fence token of its resource (or with no fence row): "
        "the fence was lowered after it was written, so stale tokens may have got through"
    )
    fix = _FIX
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        assert context.database is not None, "database rules run only with --db"
        for row in context.database.state.ledger_above_fence:
            yield self.finding(row.message, revision=row.revision)


class FenceBelowLease(Rule):
    """FM412: a fence token below the last token the built-in lease service issued: every grant
    advances the fence to its token, so the fence was lowered."""

    id = "FM412"
    name = "fence-below-lease"
    summary = (
        "a fence token below the last token the built-in lease service issued (or no fence row): "
        "the fence was lowered, so stale tokens are no longer fenced"
    )
    fix = _FIX
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        assert context.database is not None, "database rules run only with --db"
        for row in context.database.state.fence_below_lease:
            yield self.finding(row.message)


class UnguardedVersionTable(Rule):
    """FM410: Alembic's version table has no guard trigger on a fenced database that never allowed
    tokenless writes: its owner dropped (or disabled) the guard, and plain alembic writes again."""

    id = "FM410"
    name = "version-table-unguarded"
    summary = (
        "Alembic's version table has no guard trigger (dropped or disabled) on a fenced database whose "
        "tokenless writes were never allowed: plain alembic writes it without a fencing token"
    )
    fix = (
        "find out who removed the guard and what was written without a token (FM407); `fencemigrate install` "
        "puts it back; with two roles the fence's owner owns the version table (`install --grant-to ROLE`)"
    )
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        assert context.database is not None, "database rules run only with --db"
        state = context.database.state
        if state.unguarded_version_table:
            yield self.finding(
                f"the version table {state.version_table} has no guard trigger, and tokenless writes were never "
                "allowed: plain alembic writes it without a fencing token"
            )


class UnexplainedToken(Rule):
    """FM413: a lease token counter, or the fence token of a resource whose tokens come from a lease
    service, that no recorded grant issued: every grant logs a GRANT event of its token, so it was
    written behind the lease service's back (a forged grant), and every later grant starts above it."""

    id = "FM413"
    name = "token-without-grant"
    summary = (
        "a lease token counter, or the fence token of a leased resource, that no recorded grant issued: it was "
        "raised behind the lease service's back, and every later grant must issue above it"
    )
    fix = (
        "find out who wrote it (with one role, the guard triggers switched off: FM405; with two roles only the "
        "owner can); tokens above the last real grant were never issued, so nothing legitimate holds them, but "
        "no grant can lower the counter: restore the rows as the owner, or move the resource to a new name"
    )
    needs_database = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        assert context.database is not None, "database rules run only with --db"
        for row in context.database.state.unexplained_tokens:
            yield self.finding(row.message)
