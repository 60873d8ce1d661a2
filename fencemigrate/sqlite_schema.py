"""Install the fence schema on SQLite from ``sql/sqlite/``: prefixed tables, no stored functions."""

from __future__ import annotations

import sqlite3

from sqlalchemy import Connection

from .errors import DatabaseError
from .queries import sqlite_table_name, statement, with_fence_names
from .resources import sql_dir


def install_statements(quoted_schema: str, version: str) -> list[str]:
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


def installed_version(connection: Connection, quoted_schema: str) -> str | None:
    """The fence schema version in the SQLite database, or None when it is not installed."""
    probe = connection.execute(
        statement("installed_probe", quoted_schema, "sqlite"),
        {"table_name": sqlite_table_name(quoted_schema, "schema_version")},
    ).scalar()
    if probe is None:
        return None
    return str(connection.execute(statement("schema_version", quoted_schema, "sqlite")).scalar())


def ensure_installed(connection: Connection, quoted_schema: str, version: str) -> bool:
    """Install the fence schema inside the caller's transaction unless present. True if installed now.

    SQLite lets one writer at a time in (fenced runs begin with ``BEGIN IMMEDIATE``), so
    concurrent first runs install it once, one after the other.
    """
    found = installed_version(connection, quoted_schema)
    if found == version:
        return False
    if found is not None:
        raise DatabaseError(
            f"fence schema {quoted_schema} is at version {found}, but this fencemigrate "
            f"needs {version} and has no upgrade path from it on SQLite"
        )
    for sql in install_statements(quoted_schema, version):
        connection.exec_driver_sql(sql, execution_options={"no_parameters": True})
    return True
