"""Rules about a revision's code: rolling back, and escaping the migration's transaction.

fencemigrate claims the fence in the same transaction as a revision's DDL, so the claim and the
DDL commit or roll back together. What commits early, or cannot run in a transaction block at
all, is no longer covered atomically: such a revision must say so, with an allow comment and a
reason (fencemigrate then claims before it and re-claims and verifies after it).

Only SQL written as literals in the file is seen (``op.execute("...")``, ``text("...")``,
f-strings, names assigned a literal); SQL built at run time is caught by the run itself."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator

from ..code import (
    RevisionCode,
    Statement,
    adds_enum_value,
    controls_transaction,
    is_empty,
    refuses_transaction_block,
    runs_concurrently,
)
from ..findings import Finding, Severity
from .base import CheckContext, Rule


class MissingDowngrade(Rule):
    """FM301 (warning): an upgrade() with no downgrade() to undo it."""

    id = "FM301"
    name = "missing-downgrade"
    severity = Severity.WARNING
    summary = (
        "`downgrade()` missing, empty or only `pass` while `upgrade()` does something: "
        "`downgrade` and `reapply` cannot go past this revision"
    )
    fix = "write downgrade() to undo upgrade(), or `# fencemigrate: allow FM301 because <why it cannot be undone>`"

    def check(self, context: CheckContext) -> Iterator[Finding]:
        for item in context.readable:
            if is_empty(item.function("upgrade")):
                continue
            downgrade = item.function("downgrade")
            if downgrade is None:
                yield self.at(item, item.revision_line, "there is no downgrade(): this revision cannot be rolled back")
            elif is_empty(downgrade):
                yield self.at(item, downgrade.lineno, "downgrade() is empty: this revision cannot be rolled back")


def _allow_fix(*rules: str) -> str:
    return f"`# fencemigrate: allow {','.join(rules)} because <why>`"


class _StatementRule(Rule):
    """A rule that flags SQL statements, explaining each the same way."""

    explanation: str

    @abstractmethod
    def flags(self, statement: Statement) -> bool:
        """True when ``statement`` breaks this rule."""

    def runs_well_at(self, code: RevisionCode, line: int) -> bool:
        """True when a flagged statement on ``line`` is where it runs as it should (default: nowhere)."""
        return False

    def check(self, context: CheckContext) -> Iterator[Finding]:
        for item in context.readable:
            for sql, line in context.statements(item):
                if self.flags(sql) and not self.runs_well_at(context.code(item), line):
                    yield self.at(item, line, f"`{sql.snippet}` {self.explanation}")


class AutocommitBlock(Rule):
    """FM201 (warning): ``autocommit_block()``, PostgreSQL's way to run what a transaction block
    refuses (``CREATE INDEX CONCURRENTLY``): fencemigrate claims the fence again before and after
    it, but what it ran commits on its own. An error where the project says so (``errors``)."""

    id = "FM201"
    name = "autocommit-block"
    severity = Severity.WARNING
    summary = (
        "`autocommit_block()`: what runs in it commits separately, outside the migration's transaction and "
        "its fence claim (the way to run `CREATE INDEX CONCURRENTLY`)"
    )
    fix = (
        "nothing, if what runs in it cannot run in a transaction (CREATE INDEX CONCURRENTLY); otherwise move "
        f"it into the transaction. To silence: {_allow_fix('FM201')}; to fail on it: "
        '`errors = ["FM201"]` in [tool.fencemigrate.check]'
    )

    def check(self, context: CheckContext) -> Iterator[Finding]:
        for item in context.readable:
            for call in context.code(item).autocommit_blocks():
                yield self.at(
                    item,
                    call.line,
                    f"`{call.text}` commits separately: what runs in it is outside the migration's transaction "
                    "and stays applied even if the run is then FENCED (fencemigrate claims the fence again "
                    "before and after the block; the step is reported not atomic)",
                )


class Concurrently(_StatementRule):
    """FM202: ``CONCURRENTLY`` index builds and drops, in SQL or as ``postgresql_concurrently=True``,
    outside an ``autocommit_block()`` (inside one they run as PostgreSQL wants: FM201's warning)."""

    id = "FM202"
    name = "concurrently"
    summary = (
        "`CREATE/DROP INDEX CONCURRENTLY`, `REINDEX ... CONCURRENTLY`, `DETACH PARTITION ... CONCURRENTLY`, "
        "`postgresql_concurrently=True` outside an `autocommit_block()`: cannot run in a transaction block"
    )
    fix = (
        "run it in an autocommit_block() (`with op.get_context().autocommit_block():`, a warning: FM201), "
        f"or build it in the transaction, without CONCURRENTLY (or {_allow_fix('FM202')})"
    )
    explanation = "cannot run inside the migration's transaction block: PostgreSQL refuses it there"

    def flags(self, statement: Statement) -> bool:
        return runs_concurrently(statement)

    def runs_well_at(self, code: RevisionCode, line: int) -> bool:
        return code.in_autocommit_block(line)

    def check(self, context: CheckContext) -> Iterator[Finding]:
        yield from super().check(context)
        for item in context.readable:
            code = context.code(item)
            for call in code.concurrent_index_options():
                if not self.runs_well_at(code, call.line):
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
