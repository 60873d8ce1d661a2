"""SQLite: the claim and the ledger writes as plain statements (SQLite has no stored functions)."""

from __future__ import annotations

from .plain import PlainStatementCalls, claim_fence
from ..sqlite_transactions import transaction_number


class SqliteFenceCalls(PlainStatementCalls):
    """Runs ``sql/queries/sqlite/`` statements in the current transaction; FENCED is raised here.

    The claim is ``UPDATE agent_fence SET token = :t WHERE resource = :r AND token <= :t``
    (seeding the row when the resource has none); 0 rows is FENCED. Transaction ids are
    :func:`transaction_number`s. Online only: offline scripts are refused on SQLite.
    """

    def claim(self, resource: str, token: int) -> int:
        """Claim ``resource`` with ``token``; returns the transaction number. FENCED if a higher token wrote."""
        claim_fence(self._connection(), self._schema, resource, token)
        return transaction_number(self._connection())

    def record_steps(
        self,
        version_table: str,
        resource: str,
        token: int,
        holder: str,
        rows: list[tuple[str, str, str, str | None]],
    ) -> int:
        """Apply ``(action, revision, method, sha256)`` ledger changes in order; returns the transaction number."""
        self.write_rows(version_table, resource, token, holder, rows)
        return transaction_number(self._connection())
