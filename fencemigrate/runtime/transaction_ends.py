"""Notice, through SQLAlchemy, when a revision may end the migration's transaction."""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from sqlalchemy import Connection, event

# Statements that end a transaction; a false positive (END in a function body) only costs
# an early ledger write and one verification round trip.
_TRANSACTION_END = re.compile(r"\b(COMMIT|END|ROLLBACK|ABORT|PREPARE\s+TRANSACTION)\b", re.IGNORECASE)


@contextmanager
def watching_transaction_ends(connection: Connection, before_end: Callable[[], object]) -> Iterator[list[bool]]:
    """Call ``before_end`` before a statement or commit that may end the transaction runs.

    Yields a one-element list that becomes ``[True]`` once that happened. A commit through the
    raw DBAPI connection is not seen here; the transaction-id check after the step catches it.
    """
    seen = [False]

    def before_execute(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if _TRANSACTION_END.search(statement):
            seen[0] = True
            before_end()

    def before_commit(_conn: Any) -> None:
        seen[0] = True
        before_end()

    event.listen(connection, "before_cursor_execute", before_execute)
    event.listen(connection, "commit", before_commit)
    try:
        yield seen
    finally:
        event.remove(connection, "before_cursor_execute", before_execute)
        event.remove(connection, "commit", before_commit)
