"""Pre-check mode's marks: a revision's ledger row written before its DDL, settled after it."""

from __future__ import annotations

from typing import Any

from alembic.runtime.migration import RevisionStep
from sqlalchemy import Connection

from ..dialects import dialect_for
from ..dialects.driver import rowcount_on_driver, scalar_on_driver
from ..dialects.fence_calls import FenceCalls
from ..errors import DatabaseError, Fenced, newer_token_wrote
from ..queries import statement
from .ledger_changes import script_sha256
from .settings import FenceSettings


class PrecheckMarks:
    """Marks and settles revision steps on the migration's connection.

    Before the DDL, one statement checks that the fence still holds the run's token and marks the
    revision's ledger row ('applying' / 'rolling_back'). On MySQL the revision's first DDL
    statement commits the mark (MySQL commits the open transaction before DDL); on PostgreSQL
    the mark is committed here. After the DDL the mark is settled in the transaction that writes
    Alembic's version row: by statements whose events the ledger's triggers write (MySQL), or by
    the fence schema's ledger functions (PostgreSQL).
    """

    def __init__(self, connection: Connection, quoted_schema: str, calls: FenceCalls, commit_marks: bool) -> None:
        self._connection = connection
        self._schema = quoted_schema
        self._calls = calls
        self._dialect = dialect_for(connection)
        self._commit_marks = commit_marks  # False when env.py holds a transaction of its own

    def begin(self, step: RevisionStep, version_table: str, settings: FenceSettings) -> None:
        """Check the fence and mark ``step``'s revision; FENCED if a newer token has written."""
        if not self._mark(step, version_table, settings):
            fence = scalar_on_driver(self._connection, self._statement("fence_token"), {"resource": settings.resource})
            raise Fenced(settings.resource, settings.token, fence, newer_token_wrote(int(fence), settings.resource))
        if self._commit_marks and not self._dialect.commits_ddl:
            dbapi_connection = self._connection.connection.dbapi_connection
            assert dbapi_connection is not None
            dbapi_connection.commit()

    def mark_ahead(self, step: RevisionStep, version_table: str, settings: FenceSettings) -> bool:
        """Check the fence and mark the next step's revision in the current step's transaction,
        which commits it with that step's version row. False (nothing written) when a newer token
        has written: :meth:`begin` then stops the run FENCED before the next step, and the current
        step still commits."""
        return self._mark(step, version_table, settings)

    def _mark(self, step: RevisionStep, version_table: str, settings: FenceSettings) -> bool:
        revision = step.revision
        params: dict[str, Any] = {
            "version_table": version_table,
            "revision": revision.revision,
            "resource": settings.resource,
            "token": settings.token,
            "holder": settings.holder,
        }
        if step.is_upgrade:
            params["script_sha256"] = script_sha256(revision.path)
        name = "begin_apply" if step.is_upgrade else "begin_rollback"
        return rowcount_on_driver(self._connection, self._statement(name), params) > 0

    def settle(self, step: RevisionStep, version_table: str, settings: FenceSettings) -> None:
        """Settle the mark of ``step``'s revision after its DDL."""
        revision = step.revision.revision
        if self._dialect.ledger_functions:
            sha = script_sha256(step.revision.path) if step.is_upgrade else None
            action = "apply" if step.is_upgrade else "rollback"
            self._calls.record_steps(
                version_table, settings.resource, settings.token, settings.holder, [(action, revision, "upgrade", sha)]
            )
            return
        name = "settle_apply" if step.is_upgrade else "settle_rollback"
        params = {"version_table": version_table, "revision": revision, "token": settings.token}
        if rowcount_on_driver(self._connection, self._statement(name), params) != 1:
            raise DatabaseError(
                f"the ledger row of {revision} is no longer marked by this run (token {settings.token}): "
                "another writer changed it while the revision ran; see `fencemigrate state`"
            )

    def _statement(self, name: str) -> Any:
        return statement(name, self._schema, self._dialect.name)
