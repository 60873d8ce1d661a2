"""The fence calls as plain statements, for databases without our stored functions (SQLite, MySQL)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, CursorResult

from ...errors import Fenced, refuse_token
from ...queries import statement
from .base import FenceCalls


class PlainStatementCalls(FenceCalls):
    """Runs statements of ``sql/queries/<dialect>.sql`` in the current transaction; FENCED is raised here.

    The claim is ``UPDATE agent_fence SET token = :t WHERE resource = :r AND token <= :t``
    (seeding the row when the resource has none); 0 rows is FENCED. MySQL uses these calls as
    they are: it commits DDL on its own, so no transaction id is ever compared there (pre-check
    mode); SQLite numbers its transactions (:class:`SqliteFenceCalls`).
    """

    def claim(self, resource: str, token: int) -> int | None:
        """Claim ``resource`` with ``token``; returns the transaction id. FENCED if a higher token wrote."""
        claim_fence(self._connection(), self._schema, resource, token)
        return self.transaction_id()

    def check_reapply(self, version_table: str, resource: str, revisions: list[str], token: int) -> None:
        """FENCED unless the fence and every revision's applied token allow ``token`` to re-apply.

        Called before the claim, so a rejection reports the fence token as committed.
        """
        row = self._run("fence_source", resource=resource).one_or_none()
        fence = None if row is None else int(row.token)
        if row is not None:
            refuse_token(resource, token, int(row.token), row.token_source)
        for revision in revisions:
            applied = self._run("applied_token", version_table=version_table, revision=revision).scalar()
            if applied is None:
                raise Fenced(
                    resource,
                    token,
                    fence,
                    f"{revision} has no fence record (it was applied outside fencemigrate), "
                    "so no token may re-apply it",
                )
            if applied == 0:  # adopted: applied before fencing
                raise Fenced(
                    resource,
                    token,
                    fence,
                    f"{revision} was applied before fencing (adopted: no token applied it), "
                    "so no token may re-apply it",
                )
            if applied != token:
                raise Fenced(resource, token, fence, f"{revision} was applied under token {applied}, not yours")

    def transaction_id(self) -> int | None:
        """The id of the current transaction, where the dialect has one to compare (None: MySQL)."""
        return None

    def _run(self, name: str, **params: Any) -> CursorResult[Any]:
        connection = self._connection()
        return connection.execute(statement(name, self._schema, connection.dialect.name), params)

    def _connection(self) -> Connection:
        connection = self._context.connection
        assert connection is not None
        return connection


def claim_fence(connection: Connection, quoted_schema: str, resource: str, token: int) -> None:
    """Claim ``resource`` for ``token`` in the connection's transaction (seeding its fence row on
    the first claim); FENCED if a higher token has written, or if the resource's lease service
    never issued ``token``."""

    def run(name: str) -> CursorResult[Any]:
        clause = statement(name, quoted_schema, connection.dialect.name)
        return connection.execute(clause, {"resource": resource, "token": token})

    if not run("claim").rowcount and not run("seed_fence").rowcount:
        row = run("fence_source").one()
        refuse_token(resource, token, int(row.token), row.token_source)
        raise AssertionError(f"the claim of {resource} matched no row, yet token {token} is acceptable")
