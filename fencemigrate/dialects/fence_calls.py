"""What a fenced run asks of the fence schema: the fence calls of a migration context, one class
per way of making them, each dialect choosing its own (:meth:`Dialect.fence_calls`).

- :class:`PostgresFenceCalls`: the fence schema's SQL functions, called on a migration's
  connection or written out for --sql.
- :class:`PlainStatementCalls` (and :class:`SqliteFenceCalls`): plain statements, for databases
  without our stored functions (SQLite, MySQL).
- :class:`SqliteScriptCalls`: SQLite --sql scripts, the claim, the grant and the ledger rows as
  statements the sqlite3 shell runs. SQLite has no stored functions, and ``RAISE()`` only works
  inside a trigger: the script creates TEMP tables and TEMP triggers in its own session
  (``script_objects`` in ``sql/queries/sqlite.sql``, the ``script_grant_objects`` statement;
  nothing is added to the database) and fires each check with a plain ``INSERT``. A refusal fails
  that statement; the script's ``.bail on`` stops the shell there, which rolls back the
  transaction left open.
- :class:`MysqlScriptCalls`: MySQL/MariaDB --sql scripts, the named locks, the grant, the claims
  and the ledger rows as plain statements the mysql (or mariadb) client runs. MySQL raises errors
  only inside stored programs, and its DDL commits on its own: every check is a plain statement
  that leaves its refusal in the session variable ``@fencemigrate_refusal`` (NULL when it passed),
  followed by the ``script_stop`` statement, which raises it through the fence schema's
  ``script_refusal`` table (the client stops at the error in batch mode) and, should the client go
  on (``--force``), ends the script's own session.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from alembic.runtime.migration import MigrationContext
from sqlalchemy import BindParameter, Connection, CursorResult, Dialect, bindparam
from sqlalchemy.types import UserDefinedType

from ..errors import Fenced, UsageError, refuse_token, sqlstate_of
from .sqlite_transactions import transaction_number
from .statements import rowcount_on_driver, scalar_on_driver, statement
from .waits import WaitBound, claimant_name, fence_holders, terminate_older, wait_in_slices


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

    @abstractmethod
    def ledger_writes(self, writers: LedgerWriters[_Writes]) -> _Writes:
        """How the ledger writes its rows through these calls: the one of ``writers`` for them."""

    # -- a --sql script: by default it claims as a run does online; what else it writes, and --
    # -- when, is the dialect's (a database whose scripts cannot do it refuses)               --

    def open_script(self, resource: str, version_table: str | None, heads: Sequence[str]) -> bool:
        """Start a --sql script with the objects of its own session, before anything else in it; with
        ``version_table`` (quoted: the script takes its own lease) its grant's, which refuses unless
        the version table holds exactly ``heads``. True when the script's grant and first claim go
        into its first step's transaction (:meth:`grant_in_first_step`); False (here): nothing to
        start, the run writes them now."""
        return False

    def grant_in_first_step(self, resource: str, holder: str, ttl_ms: int, heads: Sequence[str]) -> None:  # noqa: B027 (a hook)
        """Write the script's own grant at the start of its first step's transaction, when
        :meth:`open_script` left it there (nothing here)."""

    def grant_for_script(
        self, resource: str, holder: str, grant: tuple[int, int], version_table: str, heads: Sequence[str]
    ) -> None:
        """Write the script's own grant as it opens (``grant``: TTL and wait, in ms), which refuses
        unless ``version_table`` holds exactly ``heads`` when the script runs."""
        raise UsageError("a --sql script cannot take its own lease on this database (nothing was written)")

    def claim_version_write(self, resource: str, token: int) -> bool:
        """Offline, before a step's ledger and version rows: write the claim that also lets the version
        write through the version table's guard (cleared after it: :meth:`clear_version_write`). True
        when written; False (here): the run claims again as it does online."""
        return False

    def clear_version_write(self) -> None:  # noqa: B027 (a hook)
        """Offline, after Alembic's version write: tokenless writes are refused again (nothing here)."""

    def release_for_script(self) -> None:
        """Write the release of the lease the script was granted, after its last version write."""
        raise UsageError("a --sql script cannot take its own lease on this database (nothing was written)")

    def require_applied_file(self, version_table: str, revision: str, script_sha256: str) -> None:
        """A --sql script's downgrade: write the check that the database applied the file whose
        downgrade() the script holds (or recorded no sha256 of it); else it stops there."""
        raise UsageError("a downgrade cannot be written as a --sql script on this database (nothing was written)")


_Writes = TypeVar("_Writes")
_Written = TypeVar("_Written", covariant=True)


class LedgerWriters(Protocol[_Written]):
    """The ledger's ways of writing its rows (``fence.ledger``), one per kind of fence calls."""

    def by_functions(self, calls: PostgresFenceCalls) -> _Written:
        """Calls of the fence schema's functions, online or in a --sql script (PostgreSQL)."""

    def by_statements(self, calls: PlainStatementCalls) -> _Written:
        """Plain statements in the run's transaction (online SQLite, MySQL)."""

    def by_script(self, calls: SqliteScriptCalls) -> _Written:
        """Rows written by the triggers of a SQLite --sql script's own session."""


class PlainStatementCalls(FenceCalls):
    """Runs statements of ``sql/queries/<dialect>.sql`` in the current transaction; FENCED is raised here.

    The claim is ``UPDATE agent_fence SET token = :t WHERE resource = :r AND token <= :t``
    (seeding the row when the resource has none); 0 rows is FENCED. MySQL uses these calls as
    they are: it commits DDL on its own, so no transaction id is ever compared there (pre-check
    mode); SQLite numbers its transactions (:class:`SqliteFenceCalls`).
    """

    def claim(self, resource: str, token: int) -> int | None:
        """Claim ``resource`` with ``token``; returns the transaction id. FENCED if a higher token wrote."""
        claim_fence(self._connection(), self._schema, resource, token)
        return self.transaction_id()

    def check_reapply(self, version_table: str, resource: str, revisions: list[str], token: int) -> None:
        """FENCED unless the fence and every revision's applied token allow ``token`` to re-apply.

        Called before the claim, so a rejection reports the fence token as committed.
        """
        row = self._run("fence_source", resource=resource).one_or_none()
        fence = None if row is None else int(row.token)
        if row is not None:
            refuse_token(resource, token, int(row.token), row.token_source)
        for revision in revisions:
            applied = self._run("applied_token", version_table=version_table, revision=revision).scalar()
            if applied is None:
                raise Fenced(
                    resource,
                    token,
                    fence,
                    f"{revision} has no fence record (it was applied outside fencemigrate), "
                    "so no token may re-apply it",
                )
            if applied == 0:  # adopted: applied before fencing
                raise Fenced(
                    resource,
                    token,
                    fence,
                    f"{revision} was applied before fencing (adopted: no token applied it), "
                    "so no token may re-apply it",
                )
            if applied != token:
                raise Fenced(resource, token, fence, f"{revision} was applied under token {applied}, not yours")

    def transaction_id(self) -> int | None:
        """The id of the current transaction, where the dialect has one to compare (None: MySQL)."""
        return None

    def ledger_writes(self, writers: LedgerWriters[_Writes]) -> _Writes:
        return writers.by_statements(self)

    def _run(self, name: str, **params: Any) -> CursorResult[Any]:
        connection = self._connection()
        return connection.execute(statement(name, self._schema, connection.dialect.name), params)

    def _connection(self) -> Connection:
        connection = self._context.connection
        assert connection is not None
        return connection


def claim_fence(connection: Connection, quoted_schema: str, resource: str, token: int) -> None:
    """Claim ``resource`` for ``token`` in the connection's transaction (seeding its fence row on
    the first claim); FENCED if a higher token has written, or if the resource's lease service
    never issued ``token``."""

    def run(name: str) -> CursorResult[Any]:
        clause = statement(name, quoted_schema, connection.dialect.name)
        return connection.execute(clause, {"resource": resource, "token": token})

    if not run("claim").rowcount and not run("seed_fence").rowcount:
        row = run("fence_source").one()
        refuse_token(resource, token, int(row.token), row.token_source)
        raise AssertionError(f"the claim of {resource} matched no row, yet token {token} is acceptable")


class SqliteScriptCalls(FenceCalls):
    """Writes the fence calls of a SQLite ``--sql`` script (offline only); each ``INSERT`` into a
    TEMP table fires the trigger that refuses or does the work when the script runs."""

    def write(self, name: str, **params: Any) -> None:
        """Write the statement ``name`` with ``params`` as literals; a :class:`.ScriptToken` is the
        expression that reads the token the script was granted in its session (the ``script_token`` statement)."""
        read_in_script = statement("script_token", self._schema, "sqlite").text
        tokens: list[BindParameter[Any]] = [
            bindparam(key, type_=ReadInScript(read_in_script))
            for key, value in params.items()
            if isinstance(value, ScriptToken)
        ]
        compiled = (
            statement(name, self._schema, "sqlite")
            .bindparams(*tokens)
            .bindparams(**params)
            .compile(dialect=self._context.dialect, compile_kwargs={"literal_binds": True})
        )
        self._context.impl.static_output(str(compiled) + self._context.impl.command_terminator)

    def __init__(self, context: MigrationContext, quoted_schema: str, schema_version: str) -> None:
        """``schema_version``: the fence schema version the script needs, which its grant checks."""
        super().__init__(context, quoted_schema)
        self._schema_version = schema_version

    def open_script(self, resource: str, version_table: str | None, heads: Sequence[str]) -> bool:
        """The script's TEMP objects: the claim's and the downgrade check's; with ``version_table``
        the grant's too. The grant reads the version table, which Alembic creates (from base) in the
        first step's transaction: it goes there, with the first claim."""
        said = {"resource": resource}
        self._objects("script_objects", said)
        if version_table is not None:
            said |= {"heads": ", ".join(heads) or "base", "schema_version": self._schema_version}
            self._objects("script_grant_objects", said, version_table)
        return True

    def grant_in_first_step(self, resource: str, holder: str, ttl_ms: int, heads: Sequence[str]) -> None:
        """The script's own grant, refused unless the version table holds exactly ``heads``."""
        self.write(
            "script_grant",
            fence_table=_unquoted(self._schema) + "_schema_version",
            schema_version=self._schema_version,
            resource=resource,
            holder=holder,
            ttl_ms=ttl_ms,
            heads=",".join(sorted(heads)),
        )

    def claim(self, resource: str, token: int) -> int | None:
        """Write the claim of ``resource`` with ``token`` (FENCED when the script runs, if fenced)."""
        self.write("script_claim", resource=resource, token=token, marks_version_write=0)
        return None

    def claim_version_write(self, resource: str, token: int) -> bool:
        self.write("script_claim", resource=resource, token=token, marks_version_write=1)
        return True

    def clear_version_write(self) -> None:
        self.write("clear_version_write")

    def release_for_script(self) -> None:
        self.write("script_release")

    def require_applied_file(self, version_table: str, revision: str, script_sha256: str) -> None:
        self.write("script_applied_file", version_table=version_table, revision=revision, script_sha256=script_sha256)

    def ledger_writes(self, writers: LedgerWriters[_Writes]) -> _Writes:
        return writers.by_script(self)

    def check_reapply(self, version_table: str, resource: str, revisions: list[str], token: int) -> None:
        """``reapply`` is never written as a script."""
        raise UsageError("reapply cannot be written as a --sql script on SQLite (nothing was written)")

    def _objects(self, name: str, said: dict[str, str], version_table: str | None = None) -> None:
        """Write the TEMP objects of ``name``, ``said`` written into their messages (string
        literals) and ``version_table`` (quoted) read by their checks."""
        text = statement(name, self._schema, "sqlite").text
        for key, value in said.items():
            text = text.replace("{" + key + "}", value.replace("'", "''"))
        if version_table is not None:
            text = text.replace("{version_table}", version_table)
        self._context.impl.static_output(text)


def _unquoted(quoted_schema: str) -> str:
    """The fence schema's name from its quoted form (``"fencemigrate"``)."""
    return quoted_schema[1:-1].replace('""', '"') if quoted_schema.startswith('"') else quoted_schema


SCRIPT_TOKEN_VARIABLE = "@fencemigrate_token"
"""Where a script that takes its own lease keeps the token it was granted (the ``script_grant`` statement)."""


class MysqlScriptCalls:
    """Writes the statements of ``sql/queries/mysql.sql`` into a MySQL ``--sql`` script, their
    parameters as literals; a :class:`.ScriptToken` is the token the script was granted."""

    def __init__(self, context: MigrationContext, quoted_schema: str) -> None:
        self._context = context
        self._schema = quoted_schema

    def write_statement(self, name: str, **params: Any) -> None:
        """Write the statement(s) of ``name`` with ``params`` as literals."""
        tokens: list[BindParameter[Any]] = [
            bindparam(key, type_=ReadInScript(SCRIPT_TOKEN_VARIABLE))
            for key, value in params.items()
            if isinstance(value, ScriptToken)
        ]
        compiled = (
            statement(name, self._schema, "mysql")
            .bindparams(*tokens)
            .bindparams(**params)
            .compile(dialect=self._context.dialect, compile_kwargs={"literal_binds": True})
        )
        self._context.impl.static_output(str(compiled) + self._context.impl.command_terminator)

    def write_check(self, name: str, **params: Any) -> None:
        """Write the check ``name``, then the statements that stop the script if it refused."""
        self.write_statement(name, **params)
        self.write_statement("script_stop")


LOCK_NOT_AVAILABLE = "55P03"  # PostgreSQL: a lock_timeout ran out


class PostgresFenceCalls(FenceCalls):
    """Calls the fence schema's functions; FENCED is their SQLSTATE FM001, mapped by ``translated_errors``.

    :meth:`call` also runs the ledger functions for :class:`~fencemigrate.fence.ledger.Ledger` (online or offline).
    """

    def __init__(self, context: MigrationContext, quoted_schema: str, schema_version: str) -> None:
        """``schema_version``: the fence schema version a script's own grant checks for."""
        super().__init__(context, quoted_schema)
        self._schema_version = schema_version

    def call(self, name: str, **params: Any) -> Any:
        """Run the statement and return its single value; offline, write it out and return None."""
        clause = statement(name, self._schema)
        if self.offline:
            verbatim: list[BindParameter[Any]] = [
                bindparam(key, type_=_DollarQuoted()) for key in params if key in _VERBATIM
            ]
            read_in_script = statement("script_token", self._schema).text
            verbatim += [
                bindparam(key, type_=ReadInScript(read_in_script))
                for key, value in params.items()
                if isinstance(value, ScriptToken)
            ]
            compiled = (
                clause.bindparams(*verbatim)
                .bindparams(**params)
                .compile(dialect=self._context.dialect, compile_kwargs={"literal_binds": True})
            )
            self._context.impl.static_output(str(compiled) + self._context.impl.command_terminator)
            return None
        connection = self._context.connection
        assert connection is not None
        return scalar_on_driver(connection, clause, params)

    def call_for_xact(self, name: str, **params: Any) -> int | None:
        """Run a statement that returns the transaction id."""
        value = self.call(name, **params)
        return None if value is None else int(value)

    def wait_for_fence(self, resource: str, token: int, holder: str, bound: WaitBound) -> None:
        """Take the claim's locks at once when no other transaction holds them (the ``claim_locks_now``
        statement, which names this transaction too: one round trip, the usual case); else claim in
        slices of ``lock_timeout`` (:func:`wait_in_lock_timeout_slices`), then name this transaction for
        whoever waits behind it (the ``claimant`` statement) and restore ``lock_timeout``. The claim the
        step makes next finds the locks held already."""
        connection = self._context.connection
        assert connection is not None and not self.offline
        if self.call("claim_locks_now", resource=resource, application_name=claimant_name(holder, token)):
            return
        lock_timeout = wait_in_lock_timeout_slices(
            connection,
            self._schema,
            resource,
            bound,
            lambda: self.call("claim", resource=resource, token=token),
            token,
        )
        self.call("claimant", lock_timeout=lock_timeout, application_name=claimant_name(holder, token))

    def claim(self, resource: str, token: int) -> int | None:
        """Claim ``resource`` with ``token``; returns the transaction id. Raises FM001 if fenced."""
        return self.call_for_xact("claim", resource=resource, token=token)

    def grant_for_script(
        self, resource: str, holder: str, grant: tuple[int, int], version_table: str, heads: Sequence[str]
    ) -> None:
        """Offline: write the script's own grant (``grant``: TTL and wait, in ms), which refuses
        unless ``version_table`` holds exactly ``heads`` when the script runs
        (the ``script_grant_function`` statement)."""
        ttl_ms, wait_ms = grant
        function = statement("script_grant_function", self._schema).text
        self._context.impl.static_output(function + self._context.impl.command_terminator)
        self.call(
            "script_grant",
            resource=resource,
            holder=holder,
            ttl_ms=ttl_ms,
            wait_ms=wait_ms,
            version_table=version_table,
            heads=text_array(heads),
            schema_version=self._schema_version,
        )

    def release_for_script(self) -> None:
        """Offline: write the release of the lease the script was granted (the ``script_release`` statement)."""
        self.call("script_release")

    def require_applied_file(self, version_table: str, revision: str, script_sha256: str) -> None:
        self.call("require_applied_file", version_table=version_table, revision=revision, script_sha256=script_sha256)

    def ledger_writes(self, writers: LedgerWriters[_Writes]) -> _Writes:
        return writers.by_functions(self)

    def check_reapply(self, version_table: str, resource: str, revisions: list[str], token: int) -> None:
        """Raise FM001 unless the fence and every revision's applied token allow ``token`` to re-apply."""
        self.call(
            "check_reapply",
            version_table=version_table,
            resource=resource,
            revisions=revisions,
            token=token,
        )


def wait_in_lock_timeout_slices(
    connection: Connection,
    quoted_schema: str,
    resource: str,
    bound: WaitBound,
    action: Callable[[], object],
    token: int | None = None,
) -> str:
    """Run ``action`` (a statement that may wait for the fence's locks: a claim, the registration of
    the resource's lock key) in slices of ``lock_timeout``, each in a savepoint: a slice that runs
    out rolls back to it and the transaction goes on (:func:`~fencemigrate.dialects.waits.wait_in_slices`:
    reported, bounded by ``bound``; with ``token``, ``--preempt`` ends holders under older tokens).
    Returns the ``lock_timeout`` the transaction had before, for the caller to restore."""
    lock_timeout = str(scalar_on_driver(connection, statement("current_lock_timeout", quoted_schema), {}))

    def attempt(slice_ms: int) -> bool:
        rowcount_on_driver(connection, statement("fence_wait_savepoint", quoted_schema), {})
        try:
            scalar_on_driver(connection, statement("lock_timeout", quoted_schema), {"timeout_ms": str(slice_ms)})
            action()
        except Exception as error:
            if sqlstate_of(error) != LOCK_NOT_AVAILABLE:
                raise  # FENCED, a lost session...: the transaction is doomed, as after a claim
            rowcount_on_driver(connection, statement("fence_wait_rollback", quoted_schema), {})
            return False
        rowcount_on_driver(connection, statement("fence_wait_release", quoted_schema), {})
        return True

    wait_in_slices(
        resource,
        "the fence",
        bound,
        attempt,
        lambda: fence_holders(connection, quoted_schema, resource),
        None if token is None else (lambda holders: terminate_older(connection, quoted_schema, holders, token)),
    )
    return lock_timeout


_VERBATIM = frozenset({"source"})
"""Parameters that carry a revision file's text: written dollar-quoted into --sql scripts."""


class _DollarQuoted(UserDefinedType[str]):
    """Text written into a --sql script as a dollar-quoted literal: PostgreSQL reads it as it is,
    whatever ``standard_conforming_strings`` says of backslashes, and psql substitutes no variables
    in it."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "text"

    def literal_processor(self, dialect: Dialect) -> Any:
        return dollar_quoted


def dollar_quoted(text: str | None) -> str:
    """``text`` as a dollar-quoted literal, with a tag the text does not contain (NULL for None)."""
    if text is None:
        return "NULL"
    tag, number = "fencemigrate_source", 0
    while f"${tag}" in text:
        number += 1
        tag = f"fencemigrate_source_{number}"
    return f"${tag}${text}${tag}$"


def text_array(items: Sequence[str]) -> str:
    """``items`` as the text of a PostgreSQL array (``{"a","b"}``, ``{}`` for none), each element quoted."""
    quoted = ('"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"' for item in items)
    return "{" + ",".join(quoted) + "}"


class SqliteFenceCalls(PlainStatementCalls):
    """Runs statements of ``sql/queries/sqlite.sql`` in the current transaction; FENCED is raised here.

    Transaction ids are :func:`transaction_number`s. Online only: a --sql script's are
    :class:`.SqliteScriptCalls`.
    """

    def transaction_id(self) -> int:
        return transaction_number(self._connection())


__all__ = [
    "FenceCalls",
    "PlainStatementCalls",
    "PostgresFenceCalls",
    "SqliteFenceCalls",
    "SqliteScriptCalls",
    "claim_fence",
]
