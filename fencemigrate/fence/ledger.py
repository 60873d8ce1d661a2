"""Dirty revisions: a pre-check run marked their ledger rows before their DDL and never settled them.

What the database has applied of a revision: the text of its file as the ledger recorded it.

Every ledger row keeps the text of the revision file it records (``applied_revision.source``),
written with the row; a row without it (adopted with no readable file, or a file that is not UTF-8
text) keeps its sha256 only: its text is "source not recorded".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from alembic.runtime.migration import MigrationContext
from alembic.util import CommandError
from sqlalchemy import Connection, Row

from ..dialects import Dialect, dialect_for, installed_version
from ..errors import Dirty, NotApplied
from ..queries import statement
from ..runtime.ledger_changes import version_table_name


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
