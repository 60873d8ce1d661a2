"""MySQL/MariaDB --sql scripts: the named locks, the grant, the claims and the ledger rows as plain
statements the mysql (or mariadb) client runs.

MySQL raises errors only inside stored programs, and its DDL commits on its own: every check is a
plain statement that leaves its refusal in the session variable ``@fencemigrate_refusal`` (NULL
when it passed), followed by the ``script_stop`` statement, which raises it through the fence schema's
``script_refusal`` table (the client stops at the error in batch mode) and, should the client go on
(``--force``), ends the script's own session.
"""

from __future__ import annotations

from typing import Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy import BindParameter, bindparam

from ...queries import statement
from .base import ReadInScript, ScriptToken

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
