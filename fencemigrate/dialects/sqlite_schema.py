"""Install the fence schema on SQLite from ``sql/sqlite/``: prefixed tables, no stored functions."""

from __future__ import annotations

import sqlite3

from sqlalchemy import Connection

from ..config import sql_dir
from .base import SchemaScripts
from .prefixed import VERSION as VERSION
from .prefixed import installed_version, run_install
from .statements import with_fence_names


def shipped_scripts() -> SchemaScripts:
    """The scripts in ``sql/sqlite/``."""
    return SchemaScripts(sql_dir() / "sqlite", VERSION)


def install_statements(
    quoted_schema: str, version: str | None = None, start: str | None = None, scripts: SchemaScripts | None = None
) -> list[str]:
    """The statements that bring the SQLite fence schema from ``start`` (None: nothing) to ``version``
    (the scripts' version).

    pysqlite runs one statement per call (its ``executescript`` would COMMIT first). Raises
    FileNotFoundError when there is no such path.
    """
    texts = (scripts or shipped_scripts()).texts(start, version)
    if texts is None:
        raise FileNotFoundError(f"no SQLite fence schema script leads from {start} to {version}")
    statements: list[str] = []
    for source in texts:
        body = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("--"))
        pending = ""
        for line in with_fence_names(body, "@extschema@", quoted_schema, "sqlite").splitlines(keepends=True):
            pending += line
            if sqlite3.complete_statement(pending):  # a trigger body's own semicolons do not end it
                statements.append(pending.strip())
                pending = ""
        assert not pending.strip(), f"incomplete statement at the end of a SQLite fence script: {pending!r}"
    return statements


def install_script(quoted_schema: str) -> str:
    """The install script to run by hand (the ``sqlite3`` shell), in one transaction."""
    return "\n".join(["BEGIN IMMEDIATE;", *install_statements(quoted_schema), "COMMIT;"])


def ensure_installed(connection: Connection, quoted_schema: str, scripts: SchemaScripts | None = None) -> bool:
    """Install (or update) the fence schema inside the caller's transaction unless current. True if it ran.

    SQLite lets one writer at a time in (fenced runs begin with ``BEGIN IMMEDIATE``), so
    concurrent first runs install it once, one after the other.
    """
    scripts = scripts or shipped_scripts()
    found = installed_version(connection, quoted_schema)
    if found == scripts.version:
        return False
    run_install(connection, quoted_schema, found, scripts, install_statements)
    return True
