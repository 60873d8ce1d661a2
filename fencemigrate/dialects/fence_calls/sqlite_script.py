"""SQLite --sql scripts: the claim, the grant and the ledger rows as statements the sqlite3 shell runs.

SQLite has no stored functions, and ``RAISE()`` only works inside a trigger: the script creates TEMP
tables and TEMP triggers in its own session (``script_objects`` in ``sql/queries/sqlite.sql``,
the ``script_grant_objects`` statement; nothing is added to the database) and fires each check with a plain
``INSERT``. A refusal fails that statement; the script's ``.bail on`` stops the shell there, which
rolls back the transaction left open.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import BindParameter, bindparam

from ...errors import UsageError
from ...queries import statement
from .base import FenceCalls, ReadInScript, ScriptToken


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

    def open_script(self, resource: str, grant: tuple[str, Sequence[str], str] | None) -> None:
        """The script's TEMP objects: the claim's and the downgrade check's; with ``grant``
        (version table, heads, fence schema version) the grant's too."""
        said = {"resource": resource}
        self._objects("script_objects", said)
        if grant is not None:
            version_table, heads, schema_version = grant
            said |= {"heads": ", ".join(heads) or "base", "schema_version": schema_version}
            self._objects("script_grant_objects", said, version_table)

    def grant(self, resource: str, holder: str, ttl_ms: int, heads: Sequence[str], schema_version: str) -> None:
        """The script's own grant, refused unless the version table holds exactly ``heads``."""
        self.write(
            "script_grant",
            fence_table=_unquoted(self._schema) + "_schema_version",
            schema_version=schema_version,
            resource=resource,
            holder=holder,
            ttl_ms=ttl_ms,
            heads=",".join(sorted(heads)),
        )

    def claim(self, resource: str, token: int) -> int | None:
        """Write the claim of ``resource`` with ``token`` (FENCED when the script runs, if fenced)."""
        self.write("script_claim", resource=resource, token=token, marks_version_write=0)
        return None

    def claim_version_write(self, resource: str, token: int) -> None:
        """The claim before a step's ledger and version rows, which lets the version write through
        the version table's guard (cleared after it: :meth:`clear_version_write`)."""
        self.write("script_claim", resource=resource, token=token, marks_version_write=1)

    def clear_version_write(self) -> None:
        """After Alembic's version write: tokenless writes are refused again."""
        self.write("clear_version_write")

    def release(self) -> None:
        """The release of the lease the script was granted, after its last version write."""
        self.write("script_release")

    def require_applied_file(self, version_table: str, revision: str, script_sha256: str) -> None:
        """A downgrade's check that the database applied the file the script rolls back with."""
        self.write("script_applied_file", version_table=version_table, revision=revision, script_sha256=script_sha256)

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
