"""Notice, through SQLAlchemy, when a revision may end the migration's transaction."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, event

# Statements that end a transaction; a false positive (END in a function body) only costs
# an early ledger write and one verification round trip.
_TRANSACTION_END = re.compile(r"\b(COMMIT|END|ROLLBACK|ABORT|PREPARE\s+TRANSACTION)\b", re.IGNORECASE)

# In a --sql script only a statement that is exactly one of these ends the transaction.
_SCRIPT_TRANSACTION_ENDS = {"COMMIT", "COMMIT TRANSACTION", "COMMIT WORK", "END", "END TRANSACTION", "ROLLBACK"}


def ends_transaction_in_script(text: str) -> bool:
    """True when a statement written to a --sql script is a bare COMMIT/END/ROLLBACK."""
    return text.strip().rstrip(";").strip().upper() in _SCRIPT_TRANSACTION_ENDS


class TransactionEndWatch:
    """Calls ``before_end`` before a statement or commit that may end the transaction runs.

    Listens on one SQLAlchemy connection for a whole run; ``seen`` tells whether it fired since
    the last ``reset()``. A commit through the raw DBAPI connection is not seen here; the
    transaction-id check when ledger rows are written catches it.
    """

    def __init__(self, connection: Connection, before_end: Callable[[], object]) -> None:
        self.seen = False
        self._connection = connection
        self._before_end = before_end
        event.listen(connection, "before_cursor_execute", self._before_execute)
        event.listen(connection, "commit", self._before_commit)

    def reset(self) -> None:
        """Start watching a new step."""
        self.seen = False

    def close(self) -> None:
        """Stop listening."""
        event.remove(self._connection, "before_cursor_execute", self._before_execute)
        event.remove(self._connection, "commit", self._before_commit)

    def _before_execute(self, _conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if _TRANSACTION_END.search(statement):
            self._fire()

    def _before_commit(self, _conn: Any) -> None:
        self._fire()

    def _fire(self) -> None:
        self.seen = True
        self._before_end()
