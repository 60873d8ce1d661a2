"""What a FENCED writer is told about the newer token: that it has written, or only that it was granted.

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
