"""PostgreSQL: the fence schema's SQL functions, called on a migration's connection or written out for --sql."""

from __future__ import annotations

from typing import Any

from ...queries import statement
from ..driver import scalar_on_driver
from .base import FenceCalls


class PostgresFenceCalls(FenceCalls):
    """Calls the fence schema's functions; FENCED is their SQLSTATE FM001, mapped by ``translated_errors``.

    One revision per transaction can also claim and record in one call (``claim_and_record``),
    with a check at COMMIT that proves Alembic's version row.
    """

    def _call(self, name: str, **params: Any) -> Any:
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

    def _xact(self, name: str, **params: Any) -> int | None:
        """Run a statement that returns the transaction id."""
        value = self._call(name, **params)
        return None if value is None else int(value)

    def claim(self, resource: str, token: int) -> int | None:
        """Claim ``resource`` with ``token``; returns the transaction id. Raises FM001 if fenced."""
        return self._xact("claim", resource=resource, token=token)

    def claim_and_record(
        self,
        resource: str,
        token: int,
        version_table: str,
        version_relation: str,
        revision: str,
        holder: str,
        script_sha256: str,
    ) -> int | None:
        """Claim, write ``revision``'s ledger row and have COMMIT prove its version row, in one call.

        ``version_relation`` is the quoted name of Alembic's version table. Returns the transaction id.
        """
        return self._xact(
            "claim_and_record",
            resource=resource,
            token=token,
            version_table=version_table,
            version_relation=version_relation,
            revision=revision,
            holder=holder,
            script_sha256=script_sha256,
        )

    def undo_record(self, version_table: str, revision: str) -> None:
        """Take back what ``claim_and_record`` wrote (the claim stays)."""
        self._call("undo_record", version_table=version_table, revision=revision)

    def check_reapply(self, version_table: str, resource: str, revisions: list[str], token: int) -> None:
        """Raise FM001 unless the fence and every revision's applied token allow ``token`` to re-apply."""
        self._call(
            "check_reapply",
            version_table=version_table,
            resource=resource,
            revisions=revisions,
            token=token,
        )

    def record_apply(
        self,
        version_table: str,
        revision: str,
        resource: str,
        token: int,
        holder: str,
        method: str,
        script_sha256: str | None,
    ) -> None:
        """Write the ledger row of an applied or stamped revision (one call per revision)."""
        self._call(
            "record_apply",
            version_table=version_table,
            revision=revision,
            resource=resource,
            token=token,
            holder=holder,
            method=method,
            script_sha256=script_sha256,
        )

    def record_rollback(self, version_table: str, revision: str, resource: str, token: int, holder: str) -> None:
        """Delete the ledger row of a rolled-back revision; the event names ``holder`` and ``token``."""
        self._call(
            "record_rollback",
            version_table=version_table,
            revision=revision,
            resource=resource,
            token=token,
            holder=holder,
        )

    def record_steps(
        self,
        version_table: str,
        resource: str,
        token: int,
        holder: str,
        rows: list[tuple[str, str, str, str | None]],
    ) -> int | None:
        """Apply ``(action, revision, method, sha256)`` ledger changes in order, in one round trip.

        Returns the transaction id, to compare with the claim's.
        """
        return self._xact(
            "record_steps",
            version_table=version_table,
            resource=resource,
            token=token,
            holder=holder,
            actions=[row[0] for row in rows],
            revisions=[row[1] for row in rows],
            methods=[row[2] for row in rows],
            shas=[row[3] for row in rows],
        )
