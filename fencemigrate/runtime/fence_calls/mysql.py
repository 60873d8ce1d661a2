"""MySQL and MariaDB: the fence calls as plain statements, used by pre-check mode."""

from __future__ import annotations

from .plain import PlainStatementCalls, claim_fence


class MysqlFenceCalls(PlainStatementCalls):
    """Runs ``sql/queries/mysql/`` statements. No transaction ids: MySQL commits DDL on its own, so
    pre-check mode never proves that a claim shares a transaction with the DDL."""

    def claim(self, resource: str, token: int) -> None:
        """Claim ``resource`` with ``token``. FENCED if a higher token wrote."""
        claim_fence(self._connection(), self._schema, resource, token)

    def record_steps(
        self,
        version_table: str,
        resource: str,
        token: int,
        holder: str,
        rows: list[tuple[str, str, str, str | None]],
    ) -> None:
        """Apply ``(action, revision, method, sha256)`` ledger changes in order."""
        self.write_rows(version_table, resource, token, holder, rows)
