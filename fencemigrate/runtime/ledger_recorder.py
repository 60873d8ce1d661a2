"""The ledger's one writer: every row of ``applied_revision`` fencemigrate writes, in every mode.

The ledger records, per version table, each revision fencemigrate applied or stamped, with the
token it was written under (``applied_token``), and the revisions the version table had applied
when the database was first fenced, adopted under no token (0); rolled-back revisions lose their row. Transactional
runs, pre-check runs, ``stamp`` (``--purge`` too) and ``resolve`` all write it through
:class:`LedgerRecorder`, as Django's ``MigrationRecorder`` owns its table: no other module runs a
statement that inserts, updates or deletes ledger rows (``tests/test_ledger_recorder.py`` checks).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from alembic.runtime.migration import MigrationContext, RevisionStep
from sqlalchemy import Connection, TextClause

from ..dialects.driver import rowcount_on_driver
from ..dialects.fence_calls import FenceCalls, PlainStatementCalls, PostgresFenceCalls, SqliteScriptCalls
from ..errors import DatabaseError
from ..fence.events import log_event
from ..queries import statement
from .applied_downgrades import rollback_detail
from .ledger_changes import LedgerChange, LedgerMethod, RevisionFile, read_revision_file, version_table_name


class LedgerAction(Enum):
    """What a ledger row change does."""

    APPLY = "apply"  # the revision's row is written (applied or stamped)
    ROLLBACK = "rollback"  # the revision's row goes


@dataclass(frozen=True)
class LedgerRow:
    """One change to the ledger: ``revision`` recorded (with its file's sha256 and text), or its row removed."""

    action: LedgerAction
    revision: str
    method: LedgerMethod = "upgrade"
    file: RevisionFile | None = None  # APPLY only (None: a version row that names no revision file)
    detail: dict[str, Any] | None = None  # ROLLBACK only: its event's (the applied text's downgrade() ran)

    @property
    def event_kind(self) -> str:
        """The event that logs this change: APPLY, STAMP, ROLLBACK or UNSTAMP (a stamp going down)."""
        if self.action is LedgerAction.APPLY:
            return "STAMP" if self.method == "stamp" else "APPLY"
        return "UNSTAMP" if self.method == "stamp" else "ROLLBACK"

    @property
    def detail_json(self) -> str | None:
        """:attr:`detail` as JSON text, as events store it."""
        return None if self.detail is None else json.dumps(self.detail, sort_keys=True)

    @property
    def script_sha256(self) -> str | None:
        """The sha256 of the revision file the row records."""
        return None if self.file is None else self.file.sha256

    @property
    def source(self) -> str | None:
        """The text of the revision file the row records (None: not UTF-8 text)."""
        return None if self.file is None else self.file.text


class LedgerRecorder:
    """Writes the ledger rows of one run (or one ``resolve``) on the migration context's connection.

    ``resource`` and ``holder`` name who writes; each write takes the token it is made under. In one
    transaction for all steps, rows can wait (:meth:`defer`) and go in one round trip (:meth:`flush`).
    Every row of an applied revision carries its file's sha256 and text, from one read of the file
    per run (:meth:`revision_file`), passed in the statement that writes the row.
    """

    def __init__(
        self, context: MigrationContext, quoted_schema: str, calls: FenceCalls, resource: str, holder: str
    ) -> None:
        self.context = context
        self._schema = quoted_schema
        self.resource = resource
        self.holder = holder
        self._writes: _FunctionWrites | _StatementWrites | _ScriptWrites
        if isinstance(calls, PostgresFenceCalls):
            self._writes = _FunctionWrites(self, calls)
        elif isinstance(calls, SqliteScriptCalls):
            self._writes = _ScriptWrites(self, calls)
        else:
            assert isinstance(calls, PlainStatementCalls)
            self._writes = _StatementWrites(self, calls)
        self._pending: list[LedgerChange] = []
        self._files: dict[str, RevisionFile] = {}

    @property
    def version_table(self) -> str:
        """Alembic's version table, as the ledger keys its rows."""
        return version_table_name(self.context)

    @property
    def records_with_claim(self) -> bool:
        """True where one call can claim and record (the fence schema's functions, on PostgreSQL)."""
        return isinstance(self._writes, _FunctionWrites)

    def revision_file(self, path: str) -> RevisionFile:
        """The revision file at ``path``, read once per run: a step whose row is written again (a
        pre-check mark and its settling, a row taken back before an early commit) records the same
        bytes."""
        found = self._files.get(path)
        if found is None:
            found = self._files[path] = read_revision_file(path)
        return found

    def revision_row(self, step: RevisionStep) -> LedgerRow:
        """The ledger change of one revision's upgrade or downgrade."""
        revision = step.revision
        if step.is_upgrade:
            assert revision.path is not None
            return LedgerRow(LedgerAction.APPLY, revision.revision, "upgrade", self.revision_file(revision.path))
        return LedgerRow(LedgerAction.ROLLBACK, revision.revision, detail=rollback_detail(step))

    # -- transactional runs, stamp and purge ------------------------------------------------

    def rows(self, change: LedgerChange) -> list[LedgerRow]:
        """The ledger rows of a step's change: rollbacks first, then the revisions it records."""
        rows = [
            LedgerRow(LedgerAction.ROLLBACK, revision, change.method, detail=change.detail)
            for revision in change.removed
        ]
        for revision in change.added:
            path = change.paths.get(revision) or self._script_path(revision)
            rows.append(LedgerRow(LedgerAction.APPLY, revision, change.method, self.revision_file(path)))
        return rows

    def record(self, rows: Sequence[LedgerRow], token: int) -> int | None:
        """Write ``rows`` in order under ``token``; returns the transaction id (None offline, or on MySQL)."""
        return self._writes.record(rows, token)

    def defer(self, change: LedgerChange) -> None:
        """Keep ``change`` for the next flush (the caller holds the claim in this transaction)."""
        self._pending.append(change)

    def has_deferred(self) -> bool:
        """True when deferred changes wait to be written."""
        return bool(self._pending)

    def flush(self, token: int, change: LedgerChange | None = None) -> int | None:
        """Write every deferred change, then ``change``; returns the transaction id (None offline)."""
        changes = [*self._pending, *([change] if change is not None else [])]
        self._pending = []
        return self.record([row for item in changes for row in self.rows(item)], token)

    def record_with_claim(self, row: LedgerRow, token: int) -> int | None:
        """Claim the resource, write ``row`` and have COMMIT prove Alembic's version row, in one call
        (:attr:`records_with_claim` only). Returns the transaction id."""
        assert isinstance(self._writes, _FunctionWrites)
        return self._writes.record_with_claim(row, token)

    def undo_with_claim(self, revision: str) -> None:
        """Take back what :meth:`record_with_claim` wrote (the claim stays)."""
        assert isinstance(self._writes, _FunctionWrites)
        self._writes.undo_with_claim(revision)

    # -- pre-check mode ---------------------------------------------------------------------

    def mark(self, row: LedgerRow, token: int) -> bool:
        """Mark ``row``'s revision 'applying' (APPLY) or 'rolling_back' (ROLLBACK) under ``token``,
        while the fence still holds ``token``. False (nothing written) when a newer token has written."""
        params: dict[str, Any] = {**self._identity(row.revision, token)}
        if row.action is LedgerAction.APPLY:
            params["script_sha256"] = row.script_sha256
            params["source"] = row.source
        name = "begin_apply" if row.action is LedgerAction.APPLY else "begin_rollback"
        return rowcount_on_driver(self.connection, self.statement(name), params) > 0

    def settle(self, row: LedgerRow, token: int) -> None:
        """Settle the mark of ``row``'s revision after its DDL, in the transaction of its version row."""
        self._writes.settle(row, token)

    # -- resolve ----------------------------------------------------------------------------

    def resolve_applied(self, revision: str) -> None:
        """``resolve --as applied``: the dirty row of ``revision`` is settled as applied."""
        self._execute("settle_revision", {"version_table": self.version_table, "revision": revision})

    def forget(self, revision: str) -> None:
        """``resolve --as rolled-back``: the dirty row of ``revision`` goes."""
        self._execute("forget_revision", {"version_table": self.version_table, "revision": revision})

    def adopt(self, revision: str, path: str, token: int) -> None:
        """An upgrade whose version write was refused for want of a token, resolved as applied: its
        ledger row (the file at ``path`` as it is now), under the resolving ``token`` (the RESOLVE
        event tells, no APPLY event)."""
        file = self.revision_file(path)
        params = {**self._identity(revision, token), "script_sha256": file.sha256, "source": file.text}
        self._execute("record_apply", params)

    # -- adoption ---------------------------------------------------------------------------

    def record_adopted(self, revisions: Sequence[tuple[str, str | None]], detail: dict[str, Any]) -> None:
        """Record ``revisions`` (id, file path or None when the file is missing) as adopted: applied
        before the database was fenced, by no token (applied_token 0, method 'adopt'), each with its
        file's sha256 and text when the file is there; then one ADOPT event with ``detail``."""
        for revision, path in revisions:
            file = None if path is None else self.revision_file(path)
            params = {
                "version_table": self.version_table,
                "revision": revision,
                "resource": self.resource,
                "holder": self.holder,
                "script_sha256": None if file is None else file.sha256,
                "source": None if file is None else file.text,
            }
            self._execute("record_adopted", params)
        log_event(
            self.connection, self._schema, resource=self.resource, kind="ADOPT", holder=self.holder, detail=detail
        )

    # -- shared -----------------------------------------------------------------------------

    @property
    def connection(self) -> Connection:
        """The migration's connection (online only)."""
        connection = self.context.connection
        assert connection is not None
        return connection

    def statement(self, name: str) -> TextClause:
        """The ledger statement ``name`` for this connection's dialect and fence schema."""
        return statement(name, self._schema, self.context.dialect.name)

    def log(self, row: LedgerRow, token: int) -> None:
        """Log ``row``'s event (:attr:`LedgerRow.event_kind`) in the current transaction."""
        log_event(
            self.connection,
            self._schema,
            resource=self.resource,
            kind=row.event_kind,
            holder=self.holder,
            token=token,
            revision=row.revision,
            detail=row.detail,
        )

    def _identity(self, revision: str, token: int) -> dict[str, Any]:
        return {
            "version_table": self.version_table,
            "revision": revision,
            "resource": self.resource,
            "token": token,
            "holder": self.holder,
        }

    def _execute(self, name: str, params: dict[str, Any]) -> Any:
        return self.connection.execute(self.statement(name), params)

    def _script_path(self, revision: str) -> str:
        script = self.context.script
        assert script is not None
        path = script.get_revision(revision).path
        assert path is not None
        return path


class _FunctionWrites:
    """PostgreSQL: the fence schema's ledger functions (which log the events themselves); offline,
    one readable call per revision in the script."""

    def __init__(self, recorder: LedgerRecorder, calls: PostgresFenceCalls) -> None:
        self._recorder = recorder
        self._calls = calls

    def record(self, rows: Sequence[LedgerRow], token: int) -> int | None:
        recorder, calls = self._recorder, self._calls
        who = {"resource": recorder.resource, "token": token, "holder": recorder.holder}
        if calls.offline:
            for row in rows:
                where = {"version_table": recorder.version_table, "revision": row.revision}
                if row.action is LedgerAction.ROLLBACK:
                    calls.call("record_rollback", **where, **who, method=row.method, detail=row.detail_json)
                else:
                    calls.call(
                        "record_apply",
                        **where,
                        **who,
                        method=row.method,
                        script_sha256=row.script_sha256,
                        source=row.source,
                    )
            return None
        return calls.call_for_xact(
            "record_steps",
            version_table=recorder.version_table,
            **who,
            actions=[row.action.value for row in rows],
            revisions=[row.revision for row in rows],
            methods=[row.method for row in rows],
            shas=[row.script_sha256 for row in rows],
            sources=[row.source for row in rows],
            details=[row.detail_json for row in rows],
        )

    def settle(self, row: LedgerRow, token: int) -> None:
        self.record([row], token)

    def record_with_claim(self, row: LedgerRow, token: int) -> int | None:
        recorder = self._recorder
        context = recorder.context
        preparer = context.dialect.identifier_preparer
        relation = ".".join(
            preparer.quote(part) for part in (context.version_table_schema, context.version_table) if part
        )
        return self._calls.call_for_xact(
            "claim_and_record",
            resource=recorder.resource,
            token=token,
            version_table=recorder.version_table,
            version_relation=relation,
            revision=row.revision,
            holder=recorder.holder,
            script_sha256=row.script_sha256,
            source=row.source,
        )

    def undo_with_claim(self, revision: str) -> None:
        self._calls.call("undo_record", version_table=self._recorder.version_table, revision=revision)


class _StatementWrites:
    """SQLite and MySQL: plain statements, and the events logged beside them."""

    def __init__(self, recorder: LedgerRecorder, calls: PlainStatementCalls) -> None:
        self._recorder = recorder
        self._calls = calls

    def record(self, rows: Sequence[LedgerRow], token: int) -> int | None:
        recorder = self._recorder
        for row in rows:
            where = {"version_table": recorder.version_table, "revision": row.revision}
            if row.action is LedgerAction.ROLLBACK:
                recorder.connection.execute(recorder.statement("record_rollback"), where)
                recorder.log(row, token)
                continue
            stamp = row.method == "stamp"
            recorder.connection.execute(
                recorder.statement("record_stamp" if stamp else "record_apply"),
                {
                    **where,
                    "resource": recorder.resource,
                    "token": token,
                    "holder": recorder.holder,
                    "script_sha256": row.script_sha256,
                    "source": row.source,
                },
            )
            recorder.log(row, token)
        return self._calls.transaction_id()

    def settle(self, row: LedgerRow, token: int) -> None:
        """MySQL: the ledger's triggers write the events of the settled rows (a ROLLBACK's detail
        from the session variable the ``rollback_detail`` statement sets for the DELETE)."""
        recorder = self._recorder
        name = "settle_apply" if row.action is LedgerAction.APPLY else "settle_rollback"
        params = {"version_table": recorder.version_table, "revision": row.revision, "token": token}
        if row.detail is not None:
            recorder.connection.execute(recorder.statement("rollback_detail"), {"detail": row.detail_json})
        try:
            settled = rowcount_on_driver(recorder.connection, recorder.statement(name), params)
        finally:
            if row.detail is not None:
                recorder.connection.execute(recorder.statement("rollback_detail"), {"detail": None})
        if settled != 1:
            raise DatabaseError(
                f"the ledger row of {row.revision} is no longer marked by this run (token {token}): "
                "another writer changed it while the revision ran; see `fencemigrate state`"
            )


class _ScriptWrites:
    """A SQLite --sql script: the statements of :class:`_StatementWrites`, written into the script
    with their values as literals (the token the script is granted read in its session)."""

    def __init__(self, recorder: LedgerRecorder, calls: SqliteScriptCalls) -> None:
        self._recorder = recorder
        self._calls = calls

    def record(self, rows: Sequence[LedgerRow], token: int) -> int | None:
        recorder, calls = self._recorder, self._calls
        who = {"resource": recorder.resource, "holder": recorder.holder}
        for row in rows:
            where = {"version_table": recorder.version_table, "revision": row.revision}
            if row.action is LedgerAction.ROLLBACK:
                calls.write("record_rollback", **where)
            else:
                calls.write(
                    "record_stamp" if row.method == "stamp" else "record_apply",
                    **where,
                    **who,
                    token=token,
                    script_sha256=row.script_sha256,
                    source=row.source,
                )
            calls.write(
                "log_event",
                at=None,
                kind=row.event_kind,
                token=token,
                revision=row.revision,
                detail=row.detail_json,
                **who,
            )
        return None

    def settle(self, row: LedgerRow, token: int) -> None:
        self.record([row], token)
