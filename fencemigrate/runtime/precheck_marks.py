"""Pre-check mode's marks: a revision's ledger row written before its DDL, settled after it."""

from __future__ import annotations

from alembic.runtime.migration import RevisionStep
from sqlalchemy import Connection

from ..dialects import dialect_for
from ..dialects.driver import scalar_on_driver
from ..errors import Fenced, newer_token_wrote
from ..queries import statement
from .ledger_recorder import LedgerRecorder


class PrecheckMarks:
    """Marks and settles revision steps on the migration's connection.

    Before the DDL, one statement checks that the fence still holds the run's token and marks the
    revision's ledger row ('applying' / 'rolling_back'). On MySQL the revision's first DDL
    statement commits the mark (MySQL commits the open transaction before DDL); on PostgreSQL
    the mark is committed here. After the DDL the mark is settled in the transaction that writes
    Alembic's version row: by statements whose events the ledger's triggers write (MySQL), or by
    the fence schema's ledger functions (PostgreSQL). The :class:`LedgerRecorder` writes both.
    """

    def __init__(
        self, connection: Connection, quoted_schema: str, recorder: LedgerRecorder, commit_marks: bool
    ) -> None:
        self._connection = connection
        self._schema = quoted_schema
        self._recorder = recorder
        self._dialect = dialect_for(connection)
        self._commit_marks = commit_marks  # False when env.py holds a transaction of its own

    def begin(self, step: RevisionStep, token: int) -> None:
        """Check the fence and mark ``step``'s revision; FENCED if a newer token has written."""
        if not self._recorder.mark(self._recorder.revision_row(step), token):
            resource = self._recorder.resource
            clause = statement("fence_token", self._schema, self._dialect.name)
            fence = scalar_on_driver(self._connection, clause, {"resource": resource})
            raise Fenced(resource, token, fence, newer_token_wrote(int(fence), resource))
        if self._commit_marks and not self._dialect.commits_ddl:
            dbapi_connection = self._connection.connection.dbapi_connection
            assert dbapi_connection is not None
            dbapi_connection.commit()

    def mark_ahead(self, step: RevisionStep, token: int) -> bool:
        """Check the fence and mark the next step's revision in the current step's transaction,
        which commits it with that step's version row. False (nothing written) when a newer token
        has written: :meth:`begin` then stops the run FENCED before the next step, and the current
        step still commits."""
        return self._recorder.mark(self._recorder.revision_row(step), token)

    def settle(self, step: RevisionStep, token: int) -> None:
        """Settle the mark of ``step``'s revision after its DDL."""
        self._recorder.settle(self._recorder.revision_row(step), token)
