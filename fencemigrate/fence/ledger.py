"""The ledger, ``applied_revision``: one class, :class:`Ledger`, reads and writes its rows.

The ledger records, per version table, each revision fencemigrate applied or stamped, with the
token it was written under (``applied_token``), its file's sha256 and text, and the revisions the
version table had applied when the database was first fenced, adopted under no token (0);
rolled-back revisions lose their row. Transactional runs, pre-check runs (a mark before the DDL,
settled after it), ``stamp`` (``--purge`` too), ``resolve`` and adoption all write it through
:class:`Ledger`, as Django's ``MigrationRecorder`` owns its table: no other module runs a statement
that inserts, updates or deletes ledger rows (``tests/test_ledger_recorder.py`` checks). The reads
that need no migration context (dirty revisions, applied texts) are the functions below it.

A dirty revision: a pre-check run marked its ledger row before its DDL and never settled it.

Every ledger row keeps the text of the revision file it records (``applied_revision.source``),
written with the row; a row without it (adopted with no readable file, or a file that is not UTF-8
text) keeps its sha256 only: its text is "source not recorded".
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from alembic.runtime.migration import MigrationContext, RevisionStep, StampStep
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionMap
from alembic.util import CommandError
from sqlalchemy import Connection, Row, TextClause

from ..dialects import Dialect, dialect_for, installed_version
from ..dialects.fence_calls import FenceCalls, PlainStatementCalls, PostgresFenceCalls, SqliteScriptCalls
from ..dialects.statements import rowcount_on_driver, scalar_on_driver, statement
from ..errors import DatabaseError, Dirty, Fenced, NotApplied, newer_token_wrote
from .events import log_event

LedgerMethod = Literal["upgrade", "stamp"]
"""How a revision came to be recorded: it ran, or it was stamped."""


@dataclass(frozen=True)
class LedgerChange:
    """Revisions that become applied, and revisions that stop being applied, with a step."""

    method: LedgerMethod
    added: tuple[str, ...]
    removed: tuple[str, ...]
    paths: dict[str, str] = field(default_factory=dict)  # revision files already at hand
    detail: dict[str, Any] | None = None  # the ROLLBACK event's, of a downgrade that ran the applied text


def version_table_name(context: MigrationContext) -> str:
    """Alembic's version table as the ledger keys its rows: ``schema.table``, or ``table``."""
    schema = context.version_table_schema
    return f"{schema}.{context.version_table}" if schema else context.version_table


@dataclass(frozen=True)
class RevisionFile:
    """A revision file as the ledger records it: its sha256 and its text, from one read of its bytes."""

    sha256: str
    text: str | None  # the bytes decoded as UTF-8; None when they are not UTF-8 text (nothing to show then)


def read_revision_file(path: str) -> RevisionFile:
    """Read a revision file once, as it is on disk now: the sha256 of its bytes and their text."""
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and "\x00" in text:  # not text (a sourceless .pyc); PostgreSQL's text cannot hold it
        text = None
    return RevisionFile(hashlib.sha256(data).hexdigest(), text)


def covered(script: ScriptDirectory, revisions: tuple[str, ...]) -> set[str]:
    """``revisions`` and all their ancestors."""
    if not revisions:
        return set()
    return {sc.revision for sc in script.revision_map.iterate_revisions(revisions, "base")}


def ledger_change(script: ScriptDirectory, step: Any, detail: dict[str, Any] | None = None) -> LedgerChange:
    """The ledger rows that ``step`` adds and removes (``detail``: its ROLLBACK event's)."""
    if isinstance(step, RevisionStep):
        revision = (step.revision.revision,)
        if step.is_upgrade:
            return LedgerChange("upgrade", added=revision, removed=(), paths={revision[0]: step.revision.path})
        return LedgerChange("upgrade", added=(), removed=revision, detail=detail)
    if isinstance(step, PurgeStep):  # its version row may name no revision file
        return LedgerChange("stamp", added=(), removed=step.ledger_removed())
    before = covered(script, step.from_)
    after = covered(script, step.to_)
    return LedgerChange("stamp", added=tuple(sorted(after - before)), removed=tuple(sorted(before - after)))


class PurgeStep(StampStep):
    """``stamp --purge``, fenced: deletes one version row (as a stamp down to base does), claiming the
    fence first, instead of Alembic's DELETE before the migration function (before any claim);
    ``ledger_removed`` reads the ledger rows the step removes, when the step runs (after its claim,
    in its transaction): the first step takes every ledger row of the version table, so that after
    the stamp the ledger holds exactly the revisions the version table applies."""

    def __init__(self, head: str, context: MigrationContext, ledger_removed: Callable[[], tuple[str, ...]]) -> None:
        super().__init__(head, None, is_upgrade=False, branch_move=True, revision_map=_revision_map(context))
        self.ledger_removed = ledger_removed


def purge_steps(heads: tuple[str, ...], context: MigrationContext, schema: str) -> list[PurgeStep]:
    """One step per version row; the first removes the whole ledger of the version table."""
    return [
        PurgeStep(head, context, (lambda: ledger_revisions(context, schema)) if index == 0 else tuple)
        for index, head in enumerate(sorted(heads))
    ]


def _revision_map(context: MigrationContext) -> RevisionMap:
    assert context.script is not None
    return context.script.revision_map


class LedgerAction(Enum):
    """What a ledger row change does."""

    APPLY = "apply"  # the revision's row is written (applied or stamped)
    ROLLBACK = "rollback"  # the revision's row goes


@dataclass(frozen=True)
class LedgerWrite:
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


class Ledger:
    """Reads and writes the ledger rows of one run (or one ``resolve``, or one adoption) on the
    migration context's connection.

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
        self._writes = calls.ledger_writes(_Writers(self))
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

    def revision_row(self, step: RevisionStep, detail: dict[str, Any] | None = None) -> LedgerWrite:
        """The ledger change of one revision's upgrade or downgrade (``detail``: its ROLLBACK event's)."""
        revision = step.revision
        if step.is_upgrade:
            assert revision.path is not None
            return LedgerWrite(LedgerAction.APPLY, revision.revision, "upgrade", self.revision_file(revision.path))
        return LedgerWrite(LedgerAction.ROLLBACK, revision.revision, detail=detail)

    # -- transactional runs, stamp and purge ------------------------------------------------

    def rows(self, change: LedgerChange) -> list[LedgerWrite]:
        """The ledger rows of a step's change: rollbacks first, then the revisions it records."""
        rows = [
            LedgerWrite(LedgerAction.ROLLBACK, revision, change.method, detail=change.detail)
            for revision in change.removed
        ]
        for revision in change.added:
            path = change.paths.get(revision) or self._script_path(revision)
            rows.append(LedgerWrite(LedgerAction.APPLY, revision, change.method, self.revision_file(path)))
        return rows

    def record(self, rows: Sequence[LedgerWrite], token: int) -> int | None:
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

    def record_with_claim(self, row: LedgerWrite, token: int, claimant: str | None = None) -> int | None:
        """Claim the resource, write ``row`` and have COMMIT prove Alembic's version row, in one call
        (:attr:`records_with_claim` only). Returns the transaction id. With ``claimant`` (the name
        waiters see), only if no other transaction holds the claim's locks now: None (nothing
        written) when one does."""
        assert isinstance(self._writes, _FunctionWrites)
        return self._writes.record_with_claim(row, token, claimant)

    def undo_with_claim(self, revision: str) -> None:
        """Take back what :meth:`record_with_claim` wrote (the claim stays)."""
        assert isinstance(self._writes, _FunctionWrites)
        self._writes.undo_with_claim(revision)

    # -- pre-check mode: a mark before the DDL, settled after it ---------------------------------

    def mark(self, step: RevisionStep, token: int, detail: dict[str, Any] | None = None) -> bool:
        """Mark ``step``'s revision 'applying' (upgrade) or 'rolling_back' (downgrade) under ``token``,
        while the fence still holds ``token``. False (nothing written) when a newer token has written."""
        row = self.revision_row(step, detail)
        params: dict[str, Any] = {**self._identity(row.revision, token)}
        if row.action is LedgerAction.APPLY:
            params["script_sha256"] = row.script_sha256
            params["source"] = row.source
        name = "begin_apply" if row.action is LedgerAction.APPLY else "begin_rollback"
        return rowcount_on_driver(self.connection, self.statement(name), params) > 0

    def mark_or_fenced(self, step: RevisionStep, token: int, detail: dict[str, Any] | None = None) -> None:
        """:meth:`mark`, or FENCED (nothing written) when a newer token has written."""
        if not self.mark(step, token, detail):
            fence = scalar_on_driver(self.connection, self.statement("fence_token"), {"resource": self.resource})
            raise Fenced(self.resource, token, fence, newer_token_wrote(int(fence), self.resource))

    def settle(self, step: RevisionStep, token: int, detail: dict[str, Any] | None = None) -> None:
        """Settle the mark of ``step``'s revision after its DDL, in the transaction of its version row:
        by statements whose events the ledger's triggers write (MySQL), or by the fence schema's
        ledger functions (PostgreSQL)."""
        self._writes.settle(self.revision_row(step, detail), token)

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

    def log(self, row: LedgerWrite, token: int) -> None:
        """Log ``row``'s event (:attr:`LedgerWrite.event_kind`) in the current transaction."""
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


class _Writers:
    """The ledger's writes for each kind of fence calls (:meth:`FenceCalls.ledger_writes` picks one)."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def by_functions(self, calls: PostgresFenceCalls) -> _Writes:
        return _FunctionWrites(self._ledger, calls)

    def by_statements(self, calls: PlainStatementCalls) -> _Writes:
        return _StatementWrites(self._ledger, calls)

    def by_script(self, calls: SqliteScriptCalls) -> _Writes:
        return _ScriptWrites(self._ledger, calls)


class _FunctionWrites:
    """PostgreSQL: the fence schema's ledger functions (which log the events themselves); offline,
    one readable call per revision in the script."""

    def __init__(self, ledger: Ledger, calls: PostgresFenceCalls) -> None:
        self._ledger = ledger
        self._calls = calls

    def record(self, rows: Sequence[LedgerWrite], token: int) -> int | None:
        ledger, calls = self._ledger, self._calls
        who = {"resource": ledger.resource, "token": token, "holder": ledger.holder}
        if calls.offline:
            for row in rows:
                where = {"version_table": ledger.version_table, "revision": row.revision}
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
            version_table=ledger.version_table,
            **who,
            actions=[row.action.value for row in rows],
            revisions=[row.revision for row in rows],
            methods=[row.method for row in rows],
            shas=[row.script_sha256 for row in rows],
            sources=[row.source for row in rows],
            details=[row.detail_json for row in rows],
        )

    def settle(self, row: LedgerWrite, token: int) -> None:
        self.record([row], token)

    def record_with_claim(self, row: LedgerWrite, token: int, claimant: str | None) -> int | None:
        ledger = self._ledger
        context = ledger.context
        preparer = context.dialect.identifier_preparer
        relation = ".".join(
            preparer.quote(part) for part in (context.version_table_schema, context.version_table) if part
        )
        return self._calls.call_for_xact(
            "claim_and_record" if claimant is None else "claim_and_record_now",
            **({} if claimant is None else {"application_name": claimant}),
            resource=ledger.resource,
            token=token,
            version_table=ledger.version_table,
            version_relation=relation,
            revision=row.revision,
            holder=ledger.holder,
            script_sha256=row.script_sha256,
            source=row.source,
        )

    def undo_with_claim(self, revision: str) -> None:
        self._calls.call("undo_record", version_table=self._ledger.version_table, revision=revision)


class _StatementWrites:
    """SQLite and MySQL: plain statements, and the events logged beside them."""

    def __init__(self, ledger: Ledger, calls: PlainStatementCalls) -> None:
        self._ledger = ledger
        self._calls = calls

    def record(self, rows: Sequence[LedgerWrite], token: int) -> int | None:
        ledger = self._ledger
        for row in rows:
            where = {"version_table": ledger.version_table, "revision": row.revision}
            if row.action is LedgerAction.ROLLBACK:
                ledger.connection.execute(ledger.statement("record_rollback"), where)
                ledger.log(row, token)
                continue
            stamp = row.method == "stamp"
            ledger.connection.execute(
                ledger.statement("record_stamp" if stamp else "record_apply"),
                {
                    **where,
                    "resource": ledger.resource,
                    "token": token,
                    "holder": ledger.holder,
                    "script_sha256": row.script_sha256,
                    "source": row.source,
                },
            )
            ledger.log(row, token)
        return self._calls.transaction_id()

    def settle(self, row: LedgerWrite, token: int) -> None:
        """MySQL: the ledger's triggers write the events of the settled rows (a ROLLBACK's detail
        from the session variable the ``rollback_detail`` statement sets for the DELETE)."""
        ledger = self._ledger
        name = "settle_apply" if row.action is LedgerAction.APPLY else "settle_rollback"
        params = {"version_table": ledger.version_table, "revision": row.revision, "token": token}
        if row.detail is not None:
            ledger.connection.execute(ledger.statement("rollback_detail"), {"detail": row.detail_json})
        try:
            settled = rowcount_on_driver(ledger.connection, ledger.statement(name), params)
        finally:
            if row.detail is not None:
                ledger.connection.execute(ledger.statement("rollback_detail"), {"detail": None})
        if settled != 1:
            raise DatabaseError(
                f"the ledger row of {row.revision} is no longer marked by this run (token {token}): "
                "another writer changed it while the revision ran; see `fencemigrate state`"
            )


class _ScriptWrites:
    """A SQLite --sql script: the statements of :class:`_StatementWrites`, written into the script
    with their values as literals (the token the script is granted read in its session)."""

    def __init__(self, ledger: Ledger, calls: SqliteScriptCalls) -> None:
        self._ledger = ledger
        self._calls = calls

    def record(self, rows: Sequence[LedgerWrite], token: int) -> int | None:
        ledger, calls = self._ledger, self._calls
        who = {"resource": ledger.resource, "holder": ledger.holder}
        for row in rows:
            where = {"version_table": ledger.version_table, "revision": row.revision}
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

    def settle(self, row: LedgerWrite, token: int) -> None:
        self.record([row], token)


_Writes = _FunctionWrites | _StatementWrites | _ScriptWrites


@dataclass(frozen=True)
class Unsettled:
    """One dirty revision: its DDL started (``state`` 'applying' or 'rolling_back') and never finished."""

    version_table: str
    revision: str
    state: str
    token: int
    holder: str
    since: str

    def as_json(self) -> dict[str, Any]:
        """JSON form, in ``state --json`` and in the DIRTY error."""
        return vars(self).copy()


TOKENLESS_HOLDER = "(a write without a fencing token)"
"""The holder of a dirty revision that a refused write without a token left (its token is 0)."""


def unsettled_revisions(connection: Connection, quoted_schema: str, resource: str) -> list[Unsettled]:
    """The dirty revisions of ``resource``, oldest first; on MySQL also those that refused writes
    without a token left (any resource's: they name none)."""
    dialect = dialect_for(connection)
    rows = connection.execute(
        statement("unsettled_revisions", quoted_schema, connection.dialect.name), {"resource": resource}
    )
    found = [
        Unsettled(
            row.version_table,
            row.revision,
            row.state,
            int(row.state_token),
            row.state_holder,
            dialect.time_text(row.state_since),
        )
        for row in rows
    ]
    if dialect.records_tokenless_writes:
        found += [
            Unsettled(row.version_table, row.revision, row.state, 0, TOKENLESS_HOLDER, dialect.time_text(row.at))
            for row in connection.execute(statement("tokenless_writes", quoted_schema, connection.dialect.name))
        ]
    return found


def refuse_if_dirty(connection: Connection, quoted_schema: str, resource: str) -> None:
    """Raise DIRTY, naming the oldest dirty revision of ``resource``, if there is one."""
    dirty = unsettled_revisions(connection, quoted_schema, resource)
    if dirty:
        first = dirty[0]
        raise Dirty(resource, first.revision, first.state, first.token, first.holder, first.since)


NOT_RECORDED = "source not recorded"


@dataclass(frozen=True)
class AppliedSource:
    """A revision's ledger row: who applied it, under which token and when, and its file's text."""

    revision: str
    version_table: str
    resource: str
    token: int
    holder: str
    method: str  # 'upgrade' or 'stamp'
    applied_at: str
    state: str  # 'applied', or 'applying' / 'rolling_back' while pre-check mode left it dirty
    script_sha256: str | None
    source: str | None  # None: not recorded (written before the fence schema kept it, or not UTF-8 text)

    def as_json(self) -> dict[str, Any]:
        """The object ``show REV --applied --json`` prints."""
        return {
            "status": "ok",
            "revision": self.revision,
            "version_table": self.version_table,
            "resource": self.resource,
            "token": self.token,
            "holder": self.holder,
            "method": self.method,
            "applied_at": self.applied_at,
            "state": self.state,
            "script_sha256": self.script_sha256,
            "source_recorded": self.source is not None,
            "source": self.source,
        }


def read_applied_source(context: MigrationContext, schema: str, revision: str) -> AppliedSource | None:
    """The ledger row of ``revision`` in the migration context's version table, with its text;
    None when the ledger has no row for it (or the fence schema is not installed)."""
    reader = _Reader(context, schema)
    return None if reader.version is None else reader.read(revision)


def applied_source(context: MigrationContext, schema: str, rev: str) -> AppliedSource:
    """What the database has applied as ``rev``: a revision id as the ledger has it (its file may be
    gone), or what Alembic's revision map resolves ``rev`` to (a prefix, ``head``). NotApplied when
    the ledger has no row for it."""
    found = read_applied_source(context, schema, rev)
    if found is not None:
        return found
    revision = _resolved(context, rev)
    found = None if revision in (None, rev) else read_applied_source(context, schema, revision)
    if found is None:
        raise NotApplied(revision or rev, version_table_name(context))
    return found


def _resolved(context: MigrationContext, rev: str) -> str | None:
    """The one revision id Alembic's revision map resolves ``rev`` to; None when it names none or several."""
    script = context.script
    assert script is not None
    try:
        revision = script.get_revision(rev)
    except CommandError:
        return None
    return None if revision is None else revision.revision


def read_applied_texts(context: MigrationContext, schema: str, revisions: Iterable[str]) -> dict[str, str | None]:
    """The recorded text of each of ``revisions`` that has a ledger row (None: not recorded)."""
    return {revision: row.source for revision, row in read_applied_sources(context, schema, revisions).items()}


def read_applied_sources(context: MigrationContext, schema: str, revisions: Iterable[str]) -> dict[str, AppliedSource]:
    """The ledger row, with its text, of each of ``revisions`` that has one."""
    reader = _Reader(context, schema)
    if reader.version is None:
        return {}
    found = (reader.read(revision) for revision in revisions)
    return {row.revision: row for row in found if row is not None}


class _Reader:
    """Reads ledger rows with their text."""

    def __init__(self, context: MigrationContext, schema: str) -> None:
        connection = context.connection
        assert connection is not None
        self._connection: Connection = connection
        self._quoted = context.dialect.identifier_preparer.quote(schema)
        self._dialect: Dialect = dialect_for(connection)
        self._version_table = version_table_name(context)
        self.version = installed_version(connection, self._quoted)

    def read(self, revision: str) -> AppliedSource | None:
        params = {"version_table": self._version_table, "revision": revision}
        row = self._run("applied_source", params).one_or_none()
        return None if row is None else self._applied(row)

    def _run(self, name: str, params: dict[str, str]) -> Any:
        return self._connection.execute(statement(name, self._quoted, self._dialect.name), params)

    def _applied(self, row: Row[Any]) -> AppliedSource:
        values = row._mapping
        return AppliedSource(
            revision=row.revision,
            version_table=self._version_table,
            resource=row.resource,
            token=int(row.applied_token),
            holder=row.holder,
            method=row.method,
            applied_at=self._dialect.time_text(row.applied_at),
            state=values.get("state", "applied"),
            script_sha256=row.script_sha256,
            source=values.get("source"),
        )


def ledger_revisions(context: MigrationContext, schema: str) -> tuple[str, ...]:
    """Every revision the ledger records for the context's version table (none before install)."""
    connection = context.connection
    if connection is None or context.as_sql:
        return ()
    quoted = context.dialect.identifier_preparer.quote(schema)
    if installed_version(connection, quoted) is None:
        return ()
    rows = connection.execute(
        statement("ledger_rows", quoted, connection.dialect.name), {"version_table": version_table_name(context)}
    )
    return tuple(row.revision for row in rows)
