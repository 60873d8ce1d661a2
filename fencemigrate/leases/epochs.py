"""Token epochs: no token is issued twice across a failover.

A lease service keeps its counter where a failover can lose it: the built-in one in the migration
database (an asynchronous standby promoted without the last grants), the Redis one in Redis (a
replica promoted, a restart without the last write). A grant that finds itself on another
*incarnation* than the resource's last grant (on PostgreSQL ``incarnation.sql``: system identifier,
WAL timeline, database OID; plus the Redis server's run id for Redis grants) cannot know how many
grants the lost history issued, so it issues the first token of the next epoch,
``((highest >> 32) + 1) << 32``: above every token the lost history issued, unless that history
granted the resource more times than are left in the epoch of the highest token that survived
(2^32 per epoch, so billions). Tokens stay plain integers. SQLite and MySQL have no incarnation
here: their grants never move epochs.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from ..queries import query_dialect, statement
from ..token_sources import check_room

EPOCH_BITS = 32


@dataclass(frozen=True)
class Incarnation:
    """The incarnation a grant runs on now, and the one the resource's last grant recorded.

    Written ``<database>`` or ``<database>+redis:<run id>``; compared part by part, so a resource
    that moves between the built-in service and Redis does not count as a change."""

    current: str | None  # None: this database (and lease service) cannot tell
    recorded: str | None  # None: no grant recorded one (never granted, or before fence schema 0.6)

    @property
    def changed(self) -> bool:
        """Whether grants may have been lost since the last one: a part both record differs."""
        if self.current is None or self.recorded is None:
            return False
        recorded = _parts(self.recorded)
        return any(kind in recorded and recorded[kind] != value for kind, value in _parts(self.current).items())

    def also(self, kind: str, value: str) -> Incarnation:
        """This incarnation with the lease service's own part (``redis``, its run id) appended."""
        part = f"{kind}:{value}"
        return Incarnation(part if self.current is None else f"{self.current}+{part}", self.recorded)


def _parts(incarnation: str) -> dict[str, str]:
    """``{'database': ..., 'redis': ...}`` from ``<database>+redis:<run id>`` (either may be absent)."""
    parts = {}
    for piece in incarnation.split("+"):
        kind, _, value = piece.rpartition(":")
        parts[kind or "database"] = value
    return parts


def read_incarnation(connection: Connection, quoted_schema: str, resource: str) -> Incarnation:
    """The database's incarnation now and the one recorded on ``resource``'s fence row (PostgreSQL;
    elsewhere unknown). Inside the grant's transaction, which holds the fence row."""
    if query_dialect(connection.dialect.name) != "postgresql":
        return Incarnation(None, None)
    row = connection.execute(statement("incarnation", quoted_schema), {"resource": resource}).one()
    return Incarnation(str(row.current), None if row.recorded is None else str(row.recorded))


def epoch_of(token: int) -> int:
    """The epoch ``token`` belongs to (0 until the first failover a grant saw)."""
    return token >> EPOCH_BITS


def next_token(resource: str, highest: int, incarnation: Incarnation) -> int:
    """The token a grant issues above ``highest`` (the last token issued, or the fence's): the next
    one, or the first of the next epoch when the incarnation changed. TokensExhausted when none is
    left."""
    check_room(resource, highest)  # below 2^62 now, so the next epoch's first token is at most 2^62
    return (epoch_of(highest) + 1) << EPOCH_BITS if incarnation.changed else highest + 1
