"""What a fenced run asks of the fence schema, whatever the dialect."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Dialect
from sqlalchemy.types import UserDefinedType

from ..waits import WaitBound


class ScriptToken(int):
    """The token an offline script is granted by the database's lease service when it runs: unknown
    when the script is written, so its fence calls read it in the script's session instead of taking
    a literal. Its value, 0, is no token: written literally by mistake, a claim refuses it."""


SCRIPT_TOKEN = ScriptToken(0)


class ReadInScript(UserDefinedType[int]):
    """A :class:`.ScriptToken` written into a --sql script as the expression that reads the token the
    script was granted in its own session, whatever the value."""

    cache_ok = True

    def __init__(self, expression: str) -> None:
        self.expression = expression

    def get_col_spec(self, **kw: Any) -> str:
        return "bigint"

    def literal_processor(self, dialect: Dialect) -> Any:
        return lambda value: self.expression


class FenceCalls(ABC):
    """Claim and re-apply check, in the migration context's current transaction (ledger rows:
    :class:`~fencemigrate.fence.ledger.Ledger`).

    A "transaction id" returned here identifies the transaction the call ran in: two calls that
    return different ids were separated by a commit.
    """

    def __init__(self, context: MigrationContext, quoted_schema: str) -> None:
        self._context = context
        self._schema = quoted_schema

    @property
    def offline(self) -> bool:
        """True in --sql mode: calls are written to the script instead of executed."""
        return bool(self._context.as_sql)

    def wait_for_fence(self, resource: str, token: int, holder: str, bound: WaitBound) -> None:  # noqa: B027 (a hook)
        """Before a transaction's first claim: wait, in slices that report who holds it (and with
        ``--preempt`` end a stale holder), until no other transaction holds the fence of
        ``resource``; busy after ``bound.wait_ms``. Nothing here where the claim itself never
        waits: SQLite's transaction waited for the write lock at its BEGIN, and pre-check mode
        for its named lock."""

    @abstractmethod
    def claim(self, resource: str, token: int) -> int | None:
        """Claim ``resource`` with ``token``; returns the transaction id (None offline).

        FENCED if a higher token wrote."""

    @abstractmethod
    def check_reapply(self, version_table: str, resource: str, revisions: list[str], token: int) -> None:
        """FENCED unless the fence and every revision's applied token allow ``token`` to re-apply."""
