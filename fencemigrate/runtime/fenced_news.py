"""What a FENCED writer is told about the fence: that the newer token has written, or only that it
was granted; and the fence token itself when the refusal did not read it.

A grant advances the fence to the new token before its holder writes anything, so the claim alone
cannot tell the two apart; the event log can (every apply, stamp, rollback and resolve is logged in
the transaction that makes it).
"""

from __future__ import annotations

from sqlalchemy import Connection

from ..errors import Fenced
from ..queries import statement


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
