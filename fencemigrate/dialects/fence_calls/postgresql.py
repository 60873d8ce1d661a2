"""PostgreSQL: the fence schema's SQL functions, called on a migration's connection or written out for --sql."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import BindParameter, Connection, Dialect, bindparam
from sqlalchemy.types import UserDefinedType

from ...errors import sqlstate_of
from ...queries import statement
from ..driver import rowcount_on_driver, scalar_on_driver
from ..fence_holders import claimant_name, fence_holders, terminate_older
from ..postgresql_schema import default_version
from ..waits import WaitBound, wait_in_slices
from .base import FenceCalls, ReadInScript, ScriptToken

_LOCK_NOT_AVAILABLE = "55P03"


class PostgresFenceCalls(FenceCalls):
    """Calls the fence schema's functions; FENCED is their SQLSTATE FM001, mapped by ``translated_errors``.

    :meth:`call` also runs the ledger functions for :class:`~fencemigrate.fence.ledger.Ledger` (online or offline).
    """

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
        """Claim in slices of ``lock_timeout`` (:func:`wait_in_lock_timeout_slices`); then name this
        transaction for whoever waits behind it (the ``claimant`` statement) and restore ``lock_timeout``. The
        claim the step makes next finds the locks held already."""
        connection = self._context.connection
        assert connection is not None and not self.offline
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
            schema_version=default_version(),
        )

    def release_for_script(self) -> None:
        """Offline: write the release of the lease the script was granted (the ``script_release`` statement)."""
        self.call("script_release")

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
            if sqlstate_of(error) != _LOCK_NOT_AVAILABLE:
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
