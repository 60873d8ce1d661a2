"""The fence schema's SQL functions, called on a migration's connection or written out for --sql."""

from __future__ import annotations

from typing import Any

from alembic.runtime.migration import MigrationContext

from ..queries import statement


class FenceCalls:
    """Calls claim/record/check in the migration context's current transaction."""

    def __init__(self, context: MigrationContext, quoted_schema: str) -> None:
        self._context = context
        self._schema = quoted_schema

    @property
    def offline(self) -> bool:
        """True in --sql mode: calls are written to the script instead of executed."""
        return bool(self._context.as_sql)

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
        return connection.execute(clause, params).scalar()

    def _xact(self, name: str, **params: Any) -> int | None:
        """Run a statement that returns the transaction id."""
        value = self._call(name, **params)
        return None if value is None else int(value)

    def claim(self, resource: str, token: int) -> int | None:
        """Claim ``resource`` with ``token``; returns the transaction id. Raises FM001 if fenced."""
        return self._xact("claim", resource=resource, token=token)

    def current_xact(self) -> int | None:
        """The current transaction id, None if this transaction has written nothing."""
        return self._xact("current_xact")

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
    ) -> int | None:
        """Write the ledger row of an applied or stamped revision; returns the transaction id."""
        return self._xact(
            "record_apply",
            version_table=version_table,
            revision=revision,
            resource=resource,
            token=token,
            holder=holder,
            method=method,
            script_sha256=script_sha256,
        )

    def record_rollback(self, version_table: str, revision: str) -> int | None:
        """Delete the ledger row of a rolled-back revision; returns the transaction id."""
        return self._xact("record_rollback", version_table=version_table, revision=revision)
