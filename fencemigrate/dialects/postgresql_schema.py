"""Install the fence schema on PostgreSQL from the same scripts ``CREATE EXTENSION`` would run."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from sqlalchemy import Connection

from ..config import sql_dir
from ..errors import DatabaseError
from .base import SchemaScripts, refuse_pre_release
from .statements import statement

_EXTENSION = "fencemigrate"


@cache
def default_version() -> str:
    """``default_version`` from ``sql/fencemigrate.control``."""
    control = (sql_dir() / f"{_EXTENSION}.control").read_text(encoding="utf-8")
    match = re.search(r"^default_version\s*=\s*'([^']+)'", control, re.MULTILINE)
    if match is None:
        raise RuntimeError("fencemigrate.control has no default_version")
    return match.group(1)


def shipped_scripts() -> SchemaScripts:
    """The scripts in ``sql/``, at the control file's default version."""
    return SchemaScripts(sql_dir(), default_version())


def _script_text(paths: list[Path], quoted_schema: str) -> str:
    lines = (line for path in paths for line in path.read_text(encoding="utf-8").splitlines())
    return "\n".join(line for line in lines if not line.startswith("\\echo")).replace("@extschema@", quoted_schema)


def install_script(quoted_schema: str, version: str | None = None, scripts: SchemaScripts | None = None) -> str:
    """The SQL that installs the fence schema at ``version`` (the scripts' version) into ``quoted_schema``,
    for psql or the runner.

    As ``CREATE EXTENSION`` does: the version's own full install script when there is one, else an
    older full install script and the upgrade scripts from it (:class:`SchemaScripts`). Raises
    FileNotFoundError when neither exists.
    """
    paths = (scripts or shipped_scripts()).paths(None, version)
    if paths is None:
        raise FileNotFoundError(f"no PostgreSQL fence schema script leads to version {version}")
    return f"CREATE SCHEMA IF NOT EXISTS {quoted_schema};\n{_script_text(paths, quoted_schema)}"


def update_script(quoted_schema: str, start: str, scripts: SchemaScripts | None = None) -> str | None:
    """The SQL that brings a fence schema at version ``start`` to the scripts' version, or None."""
    paths = (scripts or shipped_scripts()).paths(start)
    return None if paths is None else _script_text(paths, quoted_schema)


def installed_version(connection: Connection, quoted_schema: str) -> str | None:
    """The fence schema version in the database, or None when it is not installed."""
    probe = connection.execute(statement("installed_probe", quoted_schema), {"quoted_schema": quoted_schema}).scalar()
    if probe is None:
        return None
    return str(connection.execute(statement("schema_version", quoted_schema)).scalar())


def ensure_installed(connection: Connection, quoted_schema: str, scripts: SchemaScripts | None = None) -> bool:
    """Install (or update) the fence schema inside the caller's transaction unless current. True if it ran.

    Concurrent first runs serialise on a transaction-level advisory lock, so exactly one installs.
    """
    scripts = scripts or shipped_scripts()
    if installed_version(connection, quoted_schema) == scripts.version:
        return False
    connection.execute(statement("install_lock", quoted_schema))
    found = installed_version(connection, quoted_schema)
    if found == scripts.version:
        return False
    if found is not None:
        removal = (
            f"`DROP EXTENSION {_EXTENSION} CASCADE` if it was loaded with CREATE EXTENSION, then "
            f"`DROP SCHEMA {quoted_schema} CASCADE`"
        )
        refuse_pre_release(quoted_schema, found, scripts.version, removal)
    if found is None:
        script = install_script(quoted_schema, scripts=scripts)
    elif (
        connection.execute(statement("extension_version", quoted_schema), {"quoted_schema": quoted_schema}).scalar()
        is not None
    ):
        # Loaded with CREATE EXTENSION: update it as an extension, from the server's own files.
        script = f"ALTER EXTENSION {_EXTENSION} UPDATE TO '{scripts.version}'"
    else:
        update = update_script(quoted_schema, found, scripts)
        if update is None:
            raise DatabaseError(
                f"fence schema {quoted_schema} is at version {found}, but this fencemigrate "
                f"needs {scripts.version} and has no upgrade path from it"
            )
        script = update
    connection.exec_driver_sql(script, execution_options={"no_parameters": True})
    return True
