"""Rules about revisions that escape the migration's transaction.

fencemigrate claims the fence in the same transaction as a revision's DDL, so the claim and the
DDL commit or roll back together. What commits early, or cannot run in a transaction block at
all, is no longer covered atomically: such a revision must say so, with an allow comment and a
reason (fencemigrate then claims before it and re-claims and verifies after it).

Only SQL written as literals in the file is seen (``op.execute("...")``, ``text("...")``,
f-strings, names assigned a literal); SQL built at run time is caught by the run itself.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator

from ..findings import Finding, Severity
from ..sql_statements import (
    Statement,
    adds_enum_value,
    controls_transaction,
    refuses_transaction_block,
    runs_concurrently,
)
from .base import CheckContext, Rule


def _allow_fix(*rules: str) -> str:
    return f"`# fencemigrate: allow {','.join(rules)} because <why>`"


class _StatementRule(Rule):
    """A rule that flags SQL statements, explaining each the same way."""

    explanation: str

    @abstractmethod
    def flags(self, statement: Statement) -> bool:
        """True when ``statement`` breaks this rule."""

    def check(self, context: CheckContext) -> Iterator[Finding]:
        for item in context.readable:
            for sql, line in context.statements(item):
                if self.flags(sql):
                    yield self.at(item, line, f"`{sql.snippet}` {self.explanation}")


class AutocommitBlock(Rule):
    """FM201: ``autocommit_block()``."""

    id = "FM201"
    name = "autocommit-block"
    summary = "`autocommit_block()`: commits the migration's transaction and runs the rest outside it"
    fix = f"keep it in the transaction if PostgreSQL allows it; if not, say so: {_allow_fix('FM201')}"

    def check(self, context: CheckContext) -> Iterator[Finding]:
        for item in context.readable:
            for call in context.code(item).autocommit_blocks():
                yield self.at(
                    item,
                    call.line,
                    f"`{call.text}` commits the migration's transaction: the fence claim cannot cover what runs in it",
                )


class Concurrently(_StatementRule):
    """FM202: ``CONCURRENTLY`` index builds and drops, in SQL or as ``postgresql_concurrently=True``."""

    id = "FM202"
    name = "concurrently"
    summary = (
        "`CREATE/DROP INDEX CONCURRENTLY`, `REINDEX ... CONCURRENTLY`, `DETACH PARTITION ... CONCURRENTLY`, "
        "`postgresql_concurrently=True`: cannot run in a transaction block"
    )
    fix = (
        "build it in the transaction, without CONCURRENTLY; if it must be concurrent, run it in an "
        f"autocommit_block() and say so: {_allow_fix('FM201', 'FM202')}"
    )
    explanation = "cannot run inside a transaction block, so this revision cannot be fenced atomically"

    def flags(self, statement: Statement) -> bool:
        return runs_concurrently(statement)

    def check(self, context: CheckContext) -> Iterator[Finding]:
        yield from super().check(context)
        for item in context.readable:
            for call in context.code(item).concurrent_index_options():
                yield self.at(item, call.line, f"`{call.text}` works CONCURRENTLY, which {self.explanation}")


class ExplicitCommit(Rule):
    """FM203: ``commit()`` or ``rollback()`` on the migration's connection (``op.get_bind()``, its
    ``.connection``, or names assigned them)."""

    id = "FM203"
    name = "explicit-commit"
    summary = "`commit()` or `rollback()` on the migration's connection (`op.get_bind()`, its `.connection`)"
    fix = f"remove it: fencemigrate commits the revision together with its claim (or {_allow_fix('FM203')})"

    def check(self, context: CheckContext) -> Iterator[Finding]:
        for item in context.readable:
            for call in context.code(item).transaction_end_calls():
                yield self.at(
                    item,
                    call.line,
                    f"`{call.text}` ends the migration's transaction: what follows is not covered by the fence claim",
                )


class TransactionControlSql(_StatementRule):
    """FM204: COMMIT, BEGIN and friends sent as SQL."""

    id = "FM204"
    name = "transaction-control-sql"
    summary = "`COMMIT`, `BEGIN`, `END`, `ROLLBACK`, `ABORT`, `START TRANSACTION`, `PREPARE TRANSACTION` run as SQL"
    fix = f"remove it: fencemigrate commits the revision together with its claim (or {_allow_fix('FM204')})"
    explanation = "ends or starts a transaction from SQL: what follows is not covered by the fence claim"

    def flags(self, statement: Statement) -> bool:
        return controls_transaction(statement)


class NoTransactionStatement(_StatementRule):
    """FM205: statements PostgreSQL refuses inside a transaction block."""

    id = "FM205"
    name = "no-transaction-statement"
    summary = (
        "`VACUUM`, `CLUSTER` (bare), `CREATE/DROP DATABASE`, `CREATE/DROP TABLESPACE`, `ALTER SYSTEM`, "
        "`REINDEX DATABASE/SYSTEM`, `CREATE/DROP SUBSCRIPTION`, `COMMIT/ROLLBACK PREPARED`: "
        "PostgreSQL refuses them in a transaction block"
    )
    fix = (
        "run it outside migrations (a maintenance job), or in an autocommit_block() with "
        f"{_allow_fix('FM201', 'FM205')}"
    )
    explanation = "cannot run inside a transaction block, so this revision cannot be fenced atomically"

    def flags(self, statement: Statement) -> bool:
        return refuses_transaction_block(statement)


class EnumAddValue(_StatementRule):
    """FM206 (warning): ``ALTER TYPE ... ADD VALUE``."""

    id = "FM206"
    name = "enum-add-value"
    severity = Severity.WARNING
    summary = (
        "`ALTER TYPE ... ADD VALUE`: runs in the transaction on PostgreSQL 12 and later (fencemigrate "
        "needs 14), but the new value cannot be used before the transaction commits"
    )
    fix = (
        "use the new value only in a later revision run in a transaction of its own "
        f"(transaction_per_migration=True), or {_allow_fix('FM206')}"
    )
    explanation = (
        "adds an enum value that cannot be used before the transaction commits "
        "(by this revision, or a later one in the same transaction)"
    )

    def flags(self, statement: Statement) -> bool:
        return adds_enum_value(statement)
