"""PostgreSQL: the fence schema's SQL functions, called on a migration's connection or written out for --sql."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Dialect, bindparam
from sqlalchemy.types import UserDefinedType

from ...queries import statement
from ..driver import scalar_on_driver
from .base import FenceCalls


class PostgresFenceCalls(FenceCalls):
    """Calls the fence schema's functions; FENCED is their SQLSTATE FM001, mapped by ``translated_errors``.

    :meth:`call` also runs the ledger functions for :class:`.LedgerRecorder` (online or offline).
    """

    def call(self, name: str, **params: Any) -> Any:
        """Run the statement and return its single value; offline, write it out and return None."""
        clause = statement(name, self._schema)
        if self.offline:
            verbatim = [bindparam(key, type_=_DollarQuoted()) for key in params if key in _VERBATIM]
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

    def claim(self, resource: str, token: int) -> int | None:
        """Claim ``resource`` with ``token``; returns the transaction id. Raises FM001 if fenced."""
        return self.call_for_xact("claim", resource=resource, token=token)

    def check_reapply(self, version_table: str, resource: str, revisions: list[str], token: int) -> None:
        """Raise FM001 unless the fence and every revision's applied token allow ``token`` to re-apply."""
        self.call(
            "check_reapply",
            version_table=version_table,
            resource=resource,
            revisions=revisions,
            token=token,
        )


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
