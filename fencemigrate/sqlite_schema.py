"""Install the fence schema on SQLite from ``sql/sqlite/``: prefixed tables, no stored functions."""

from __future__ import annotations

import sqlite3

from sqlalchemy import Connection

from .prefixed_schema import installed_version, require_no_other_version
from .queries import with_fence_names
from .resources import sql_dir


VERSION = "0.2"
"""The fence schema version on SQLite (pre-check mode, which 0.3 adds elsewhere, is not for SQLite)."""


def install_statements(quoted_schema: str, version: str = VERSION) -> list[str]:
    """The statements of the SQLite install script for ``version``, one by one.

    pysqlite runs one statement per call (its ``executescript`` would COMMIT first).
    """
    source = (sql_dir() / "sqlite" / f"fencemigrate--{version}.sql").read_text(encoding="utf-8")
    body = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("--"))
    statements: list[str] = []
    pending = ""
    for line in with_fence_names(body, "@extschema@", quoted_schema, "sqlite").splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):  # a trigger body's own semicolons do not end it
            statements.append(pending.strip())
            pending = ""
    assert not pending.strip(), f"incomplete statement at the end of the SQLite install script: {pending!r}"
    return statements


def install_script(quoted_schema: str) -> str:
    """The install script to run by hand (the ``sqlite3`` shell), in one transaction."""
    return "\n".join(["BEGIN IMMEDIATE;", *install_statements(quoted_schema), "COMMIT;"])


def ensure_installed(connection: Connection, quoted_schema: str, version: str = VERSION) -> bool:
    """Install the fence schema inside the caller's transaction unless present. True if installed now.

    SQLite lets one writer at a time in (fenced runs begin with ``BEGIN IMMEDIATE``), so
    concurrent first runs install it once, one after the other.
    """
    found = installed_version(connection, quoted_schema)
    if found == version:
        return False
    require_no_other_version(found, quoted_schema, version)
    for sql in install_statements(quoted_schema, version):
        connection.exec_driver_sql(sql, execution_options={"no_parameters": True})
    return True
