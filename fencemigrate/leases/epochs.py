"""Token epochs: no token is issued twice across a failover.

A lease service keeps its counter where a failover can lose it: the built-in one in the migration
database (an asynchronous standby promoted without the last grants), the Redis one in Redis (a
replica promoted, a restart without the last write). A grant that finds itself on another
*incarnation* than the resource's last grant (on PostgreSQL the ``incarnation`` query: system identifier,
WAL timeline, database OID; plus the Redis server's run id for Redis grants) cannot know how many
grants the lost history issued, so it issues the first token of an epoch ``timeline`` epochs on,
``((highest >> 32) + timeline) << 32``: above every token the lost history issued, even a grant
there that moved epochs itself (on the old primary's lower timeline, so fewer), unless that history
granted the resource more times than are left in an epoch (2^32, so billions). A grant that finds
no incarnation recorded (the resource's first grant, or its fence schema, was lost with the old
primary) still starts no lower than its WAL timeline's epoch, ``(timeline - 1) << 32``: timeline 1
issues 1, 2, ..., a promoted standby on timeline 2 no token below 2^32. Tokens stay plain integers.
SQLite and MySQL have no incarnation here: their grants never move epochs.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection

from ..config import MAX_TOKEN
from ..dialects import dialect_for
from ..dialects.statements import statement
from ..errors import TokensExhausted
from ..fence.tokens import check_room

EPOCH_BITS = 32


@dataclass(frozen=True)
class Incarnation:
    """The incarnation a grant runs on now, and the one the resource's last grant recorded.

    Written ``<database>`` or ``<database>+redis:<run id>``; compared part by part, so a resource
    that moves between the built-in service and Redis does not count as a change."""

    current: str | None  # None: this database (and lease service) cannot tell
    recorded: str | None  # None: no grant recorded one (never granted)
    timeline: int = 1  # the WAL timeline the database writes on now (1 where there is none)

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
        return Incarnation(part if self.current is None else f"{self.current}+{part}", self.recorded, self.timeline)

    @property
    def least(self) -> int:
        """No token below this one is issued here: the first of the WAL timeline's epoch."""
        return (self.timeline - 1) << EPOCH_BITS


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
    if not dialect_for(connection).replication_known:
        return Incarnation(None, None)
    row = connection.execute(statement("incarnation", quoted_schema), {"resource": resource}).one()
    return Incarnation(str(row.current), None if row.recorded is None else str(row.recorded), int(row.timeline))


def epoch_of(token: int) -> int:
    """The epoch ``token`` belongs to (0 until the first failover a grant saw)."""
    return token >> EPOCH_BITS


def next_token(resource: str, highest: int, incarnation: Incarnation) -> int:
    """The token a grant issues above ``highest`` (the last token issued, or the fence's): the next
    one; when the incarnation changed, the first of the epoch ``timeline`` epochs on, so that a
    promoted standby (a higher timeline) lands above a lost grant that moved epochs itself on the
    old primary; never below the timeline's epoch (:attr:`Incarnation.least`). TokensExhausted when
    none is left."""
    check_room(resource, highest)
    if not incarnation.changed:
        return max(highest + 1, incarnation.least)
    token = (epoch_of(highest) + incarnation.timeline) << EPOCH_BITS
    if token > MAX_TOKEN:
        raise TokensExhausted(
            f"no epoch is left for {resource}: its last token {highest} is too close to the largest token there "
            f"is to move {incarnation.timeline} epochs on, as a grant on another incarnation must (nothing was changed)"
        )
    return token
