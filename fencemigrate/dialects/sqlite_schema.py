"""Install the fence schema on SQLite from ``sql/sqlite/``: prefixed tables, no stored functions."""

from __future__ import annotations

import sqlite3

from sqlalchemy import Connection

from ..queries import with_fence_names
from .prefixed_schema import installed_version, run_install, script_chain

VERSION = "0.8"
"""The fence schema version on SQLite (pre-check mode, which 0.3 adds elsewhere, is not for SQLite)."""

BASE_VERSION = "0.2"
"""The oldest SQLite fence schema: a version without its own install script (``fencemigrate--<version>.sql``)
is installed from this one's and the update scripts."""


def install_statements(quoted_schema: str, version: str = VERSION, start: str | None = None) -> list[str]:
    """The statements that bring the SQLite fence schema from ``start`` (None: nothing) to ``version``.

    pysqlite runs one statement per call (its ``executescript`` would COMMIT first). Raises
    FileNotFoundError when there is no such path.
    """
    scripts = script_chain("sqlite", BASE_VERSION, start, version)
    if scripts is None:
        raise FileNotFoundError(f"no SQLite fence schema script leads from {start} to {version}")
    statements: list[str] = []
    for source in scripts:
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


def ensure_installed(connection: Connection, quoted_schema: str, version: str = VERSION) -> bool:
    """Install (or update) the fence schema inside the caller's transaction unless current. True if it ran.

    SQLite lets one writer at a time in (fenced runs begin with ``BEGIN IMMEDIATE``), so
    concurrent first runs install it once, one after the other.
    """
    found = installed_version(connection, quoted_schema)
    if found == version:
        return False
    run_install(connection, quoted_schema, version, found, install_statements)
    return True
