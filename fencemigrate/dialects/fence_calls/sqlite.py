"""SQLite: the claim as plain statements (SQLite has no stored functions)."""

from __future__ import annotations

from ..sqlite_transactions import transaction_number
from .plain import PlainStatementCalls


class SqliteFenceCalls(PlainStatementCalls):
    """Runs statements of ``sql/queries/sqlite.sql`` in the current transaction; FENCED is raised here.

    Transaction ids are :func:`transaction_number`s. Online only: a --sql script's are
    :class:`.SqliteScriptCalls`.
    """

    def transaction_id(self) -> int:
        return transaction_number(self._connection())
