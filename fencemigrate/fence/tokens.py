"""Where a resource's fencing tokens come from, and the grant's fence advance that records it.

``external``: a harness runs its own leases and passes ``--token`` (the first claim of a resource
seeds its fence row so); any token at or above the fence writes, as it always has. ``lease
service`` (built in) or ``redis``: a grant advanced the fence to the token it issued, so the fence
token is the last token issued, and the database refuses every higher token as never issued
(claim() on PostgreSQL, the ``claim`` statement elsewhere). A grant makes a resource its service's;
``fencemigrate lease detach`` gives it back to external tokens.

A resource's tokens come from one source at a time: while they come from a lease service, the
other service grants nothing on it, detaches nothing and renews none of its own older leases
(:func:`recorded_source`). The built-in service cannot see Redis's leases, so it refuses a
``redis`` resource outright (:func:`redis_only`); Redis, asked about a ``lease service`` resource,
looks at the built-in lease in the database and waits for it as for any live holder.

The database holds direct SQL to the same rules (the lease guard, FM006:
no fence above the lease service's last token, no detach behind a live lease, no lease row given to
another holder while live; on PostgreSQL, nothing a grant does not write). For ``redis`` it
cannot read Redis's counter, so each Redis grant records the token it issued (``redis_grant``,
before the fence advance; on PostgreSQL inside ``advance_fence()``, on SQLite and MySQL by
the ``record_redis_grant`` statement), and the lease guard refuses a ``redis`` fence above that record,
whoever writes; on PostgreSQL only the owner's ``advance_fence()`` raises such a fence, which with
two roles keeps the migration role's plain SQL out.

A FENCED writer is told about the fence (:func:`with_newer_token_news`): that the newer token has
written, or only that it was granted, and the fence token itself when the refusal did not read it.
A grant advances the fence to the new token before its holder writes anything, so the claim alone
cannot tell the two apart; the event log can (every apply, stamp, rollback and resolve is logged in
the transaction that makes it).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, CursorResult

from ..config import MAX_TOKEN
from ..dialects.statements import statement
from ..errors import (
    EXTERNAL,
    LEASE_SERVICE,
    NONE_YET,
    REDIS,
    DatabaseError,
    Fenced,
    OtherTokenSource,
    TokensExhausted,
    UsageError,
)

REDIS_URL_HINT = "redis://HOST:PORT/DB"
"""How the messages write the Redis URL, which the database does not record."""


def described(source: str) -> str:
    """A token source in words: ``Redis``, ``the built-in lease service``, ``external tokens``."""
    return {REDIS: "Redis", LEASE_SERVICE: "the built-in lease service", EXTERNAL: "external tokens"}.get(
        source, source
    )


def recorded_source(connection: Connection, quoted_schema: str, resource: str, locked: bool = False) -> str:
    """Where the tokens of ``resource`` come from now (its fence row's ``token_source``; NONE_YET
    without a row). ``locked``: the caller has locked the fence row (a grant or detach after its
    ``lock_fence``), so the read is of the committed row, also on MySQL inside a snapshot."""
    name = "locked_fence_source" if locked else "fence_source"
    row = connection.execute(
        statement(name, quoted_schema, connection.dialect.name), {"resource": resource}
    ).one_or_none()
    return NONE_YET if row is None else str(row.token_source)


def superseded_by(source: str) -> str:
    """Why a renew of a lease whose service no longer issues the resource's tokens is LEASE LOST."""
    return f"its tokens now come from {described(source)}: a grant there has superseded this lease"


def redis_only(resource: str, call: str) -> OtherTokenSource:
    """The built-in lease service asked to ``call`` (``grant``, ``renew``, ``detach``) a resource whose tokens
    come from Redis: refused outright, the database cannot see whether a Redis lease is live."""
    moves = f"`fencemigrate lease detach --lease-url {REDIS_URL_HINT} --resource {resource}`"
    if call == "grant":
        what = (
            f"so the built-in lease service grants nothing on it: pass --lease-url {REDIS_URL_HINT} (or set "
            f"fencemigrate_lease_url) to be granted by Redis, or first give it back to external tokens with {moves}, "
            "which checks Redis for a live lease"
        )
    elif call == "renew":
        what = (
            "so the built-in lease service renews no lease on it: a Redis lease is renewed with "
            f"--lease-url {REDIS_URL_HINT} (or fencemigrate_lease_url set)"
        )
    else:
        what = f"so `lease detach` without --lease-url cannot tell whether a Redis lease on it is live: run {moves}"
    return OtherTokenSource(
        resource,
        REDIS,
        f"{resource} takes its tokens from Redis (its fence's token source is 'redis'), whose leases the "
        f"migration database cannot see, {what}; nothing was changed",
    )


def check_room(resource: str, highest: int | None) -> None:
    """TokensExhausted when no token is left above ``highest`` (the fence, or a lease counter)."""
    if highest is not None and highest >= MAX_TOKEN:
        raise TokensExhausted(
            f"no token is left for {resource}: its fence token is {highest}, the largest token there is, "
            "so no grant can issue a higher one (nothing was changed)"
        )


def advance_fence(
    connection: Connection, quoted_schema: str, resource: str, token: int, source: str, incarnation: str | None
) -> None:
    """A grant's fence advance, in its transaction: the fence moves up to ``token``, just issued by
    ``source`` on the database's ``incarnation`` (PostgreSQL records it, see leases/epochs.py),
    whose resource it is from now on. Every older holder is fenced once this commits."""

    def run(name: str) -> CursorResult[Any]:
        clause = statement(name, quoted_schema, connection.dialect.name)
        params = {"resource": resource, "token": token, "source": source, "incarnation": incarnation}
        return connection.execute(clause, params)

    if not run("grant_fence").rowcount and not run("seed_granted_fence").rowcount:
        raise DatabaseError(
            f"the grant of token {token} could not advance the fence of {resource}: a higher token "
            "has written meanwhile (nothing was changed)"
        )


def detach_fence(connection: Connection, quoted_schema: str, resource: str) -> None:
    """``lease detach``'s write: ``resource`` takes external tokens above its fence from now on."""
    clause = statement("detach_fence", quoted_schema, connection.dialect.name)
    if not connection.execute(clause, {"resource": resource}).rowcount:
        raise UsageError(
            f"{resource} has no fence row yet: its first write (--token) or grant decides where its "
            "tokens come from (nothing was changed)"
        )


def with_newer_token_news(connection: Connection, quoted_schema: str, fenced: Fenced) -> Fenced:
    """``fenced``, saying "was granted" instead of "has since written" when the event log has no
    write by the newer token; read on ``connection``, after the rejected transaction rolled back."""
    if not fenced.by_newer_writer:
        return fenced
    wrote = connection.execute(
        statement("token_wrote", quoted_schema, connection.dialect.name),
        {"resource": fenced.resource, "token": fenced.fence_token},
    ).scalar()
    return fenced if wrote else fenced.granted_not_written()


def with_fence_token(connection: Connection, quoted_schema: str, fenced: Fenced) -> Fenced:
    """``fenced`` with the resource's fence token as committed, when the refusal (made after a claim,
    which set the fence to the run's own token before it rolled back) did not give one."""
    if fenced.fence_token is not None:
        return fenced
    token = connection.execute(
        statement("fence_token", quoted_schema, connection.dialect.name), {"resource": fenced.resource}
    ).scalar()
    return fenced.at_fence(None if token is None else int(token))
