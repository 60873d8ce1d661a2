"""Install the fence schema on MySQL and MariaDB from ``sql/mysql/``: prefixed tables, guard triggers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection

from ..config import sql_dir
from ..errors import DatabaseError
from .base import SchemaScripts
from .prefixed import VERSION as VERSION
from .prefixed import installed_version, run_install
from .statements import statement, with_fence_names

_INSTALL_WAIT_S = 60


def shipped_scripts() -> SchemaScripts:
    """The scripts in ``sql/mysql/``."""
    return SchemaScripts(sql_dir() / "mysql", VERSION)


def install_script(
    quoted_schema: str, version: str | None = None, start: str | None = None, scripts: SchemaScripts | None = None
) -> str:
    """The script that brings the MySQL fence schema from ``start`` (None: nothing) to ``version`` (the
    scripts' version), to run by hand with the mysql (or mariadb) client, ``DELIMITER`` lines included.

    Raises FileNotFoundError when there is no such path.
    """
    texts = (scripts or shipped_scripts()).texts(start, version)
    if texts is None:
        raise FileNotFoundError(f"no MySQL fence schema script leads from {start} to {version}")
    return with_fence_names("\n".join(texts), "@extschema@", quoted_schema, "mysql")


def install_statements(
    quoted_schema: str, version: str | None = None, start: str | None = None, scripts: SchemaScripts | None = None
) -> list[str]:
    """The statements of :func:`install_script`, one by one.

    Split as the mysql client does: at the current delimiter (``;``, or what a ``DELIMITER`` line sets).
    """
    body = install_script(quoted_schema, version, start, scripts)
    statements: list[str] = []
    delimiter, pending = ";", ""
    for line in body.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("--") or (not stripped and not pending):
            continue
        if stripped.upper().startswith("DELIMITER "):
            delimiter = stripped.split(None, 1)[1]
            continue
        pending += line
        if stripped.endswith(delimiter):
            statements.append(pending.rstrip()[: -len(delimiter)].strip())
            pending = ""
    assert not pending.strip(), f"incomplete statement at the end of the MySQL install script: {pending!r}"
    return statements


def ensure_installed(connection: Connection, quoted_schema: str, scripts: SchemaScripts | None = None) -> bool:
    """Install the fence schema unless present. True if installed now.

    MySQL commits each DDL statement on its own, so concurrent first runs take turns on a named
    lock (the ``install_lock`` statement): otherwise one could read the version table another has just
    created, before its row is in.
    """
    # A plain read first: a locking one would hold the version row while this run waits for the
    # install lock, and the installer's version UPDATE would wait for this run (a deadlock that
    # only the lock timeouts end). A stale snapshot only means taking the install lock for nothing.
    scripts = scripts or shipped_scripts()
    if installed_version(connection, quoted_schema, "schema_version_unlocked") == scripts.version:
        return False
    with install_turns(connection, quoted_schema):
        found = installed_version(connection, quoted_schema)
        if found == scripts.version:
            return False
        run_install(connection, quoted_schema, found, scripts, install_statements)
        # MySQL has committed every DDL statement of the install on its own: commit the version row
        # with them, or a rollback of the caller's transaction would leave an update's DDL in at the
        # old version, and the next run would run that update again (ADD COLUMN is not idempotent).
        connection.exec_driver_sql("COMMIT")
        return True


@contextmanager
def install_turns(connection: Connection, quoted_schema: str) -> Iterator[None]:
    """Hold the install lock (the ``install_lock`` statement), waited for at most a minute: concurrent first
    runs take turns installing the fence schema and guarding the version table (whose triggers are
    DDL; information_schema refuses to read a table under another session's DDL, error 1684)."""
    taken = connection.execute(statement("install_lock", quoted_schema, "mysql"), {"timeout_s": _INSTALL_WAIT_S})
    if taken.scalar() != 1:
        raise DatabaseError(
            f"could not install the fence schema: another run held the install lock for {_INSTALL_WAIT_S} s"
        )
    try:
        yield
    finally:
        connection.execute(statement("install_unlock", quoted_schema, "mysql"))
