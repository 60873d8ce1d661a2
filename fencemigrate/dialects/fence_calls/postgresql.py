"""PostgreSQL: the fence schema's SQL functions, called on a migration's connection or written out for --sql."""

from __future__ import annotations

from typing import Any

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
            compiled = clause.bindparams(**params).compile(
                dialect=self._context.dialect, compile_kwargs={"literal_binds": True}
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
