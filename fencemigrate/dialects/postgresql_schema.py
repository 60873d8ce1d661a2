"""Install the fence schema on PostgreSQL from the same scripts ``CREATE EXTENSION`` would run."""

from __future__ import annotations

import re
from functools import cache

from sqlalchemy import Connection

from ..config import sql_dir
from ..errors import DatabaseError
from ..queries import statement

_EXTENSION = "fencemigrate"
_BASE_VERSION = "0.1"  # the oldest install script: versions without their own are reached from it


@cache
def default_version() -> str:
    """``default_version`` from ``sql/fencemigrate.control``."""
    control = (sql_dir() / f"{_EXTENSION}.control").read_text(encoding="utf-8")
    match = re.search(r"^default_version\s*=\s*'([^']+)'", control, re.MULTILINE)
    if match is None:
        raise RuntimeError("fencemigrate.control has no default_version")
    return match.group(1)


def _script_text(name: str) -> str:
    source = (sql_dir() / name).read_text(encoding="utf-8")
    return "\n".join(line for line in source.splitlines() if not line.startswith("\\echo"))


@cache
def _update_path(start: str, target: str | None = None) -> tuple[str, ...] | None:
    """The update scripts leading from version ``start`` to ``target`` (the default version), in order."""
    steps: dict[str, tuple[str, str]] = {}
    for path in sql_dir().glob(f"{_EXTENSION}--*--*.sql"):
        source, step_target = path.name[len(_EXTENSION) + 2 : -len(".sql")].split("--")
        steps[source] = (step_target, path.name)
    names: list[str] = []
    version = start
    while version != (target or default_version()):
        if version not in steps or len(names) > len(steps):
            return None
        version, name = steps[version]
        names.append(name)
    return tuple(names)


def install_script(quoted_schema: str, version: str | None = None) -> str:
    """The SQL that installs the fence schema at ``version`` (the default version) into ``quoted_schema``,
    for psql or the runner.

    As ``CREATE EXTENSION`` does: the version's own full install script when there is one, else the
    oldest install script and the update scripts from it. Raises FileNotFoundError when neither exists.
    """
    version = version or default_version()
    if (sql_dir() / f"{_EXTENSION}--{version}.sql").is_file():
        script = _script_text(f"{_EXTENSION}--{version}.sql").replace("@extschema@", quoted_schema)
    else:
        updates = _update_path(_BASE_VERSION, version)
        if updates is None:
            raise FileNotFoundError(f"no PostgreSQL fence schema script leads to version {version}")
        script = "\n".join(_script_text(name) for name in (f"{_EXTENSION}--{_BASE_VERSION}.sql", *updates))
        script = script.replace("@extschema@", quoted_schema)
    return f"CREATE SCHEMA IF NOT EXISTS {quoted_schema};\n{script}"


def update_script(quoted_schema: str, start: str) -> str | None:
    """The SQL that brings a fence schema at version ``start`` to the default version, or None."""
    update = _update_path(start)
    if update is None:
        return None
    return "\n".join(_script_text(name) for name in update).replace("@extschema@", quoted_schema)


def installed_version(connection: Connection, quoted_schema: str) -> str | None:
    """The fence schema version in the database, or None when it is not installed."""
    probe = connection.execute(statement("installed_probe", quoted_schema), {"quoted_schema": quoted_schema}).scalar()
    if probe is None:
        return None
    return str(connection.execute(statement("schema_version", quoted_schema)).scalar())


def ensure_installed(connection: Connection, quoted_schema: str) -> bool:
    """Install (or update) the fence schema inside the caller's transaction unless current. True if it ran.

    Concurrent first runs serialise on a transaction-level advisory lock, so exactly one installs.
    """
    if installed_version(connection, quoted_schema) == default_version():
        return False
    connection.execute(statement("install_lock", quoted_schema))
    found = installed_version(connection, quoted_schema)
    if found == default_version():
        return False
    if found is None:
        script = install_script(quoted_schema)
    elif (
        connection.execute(statement("extension_version", quoted_schema), {"quoted_schema": quoted_schema}).scalar()
        is not None
    ):
        # Loaded with CREATE EXTENSION: update it as an extension, from the server's own files.
        script = f"ALTER EXTENSION {_EXTENSION} UPDATE TO '{default_version()}'"
    else:
        update = update_script(quoted_schema, found)
        if update is None:
            raise DatabaseError(
                f"fence schema {quoted_schema} is at version {found}, but this fencemigrate "
                f"needs {default_version()} and has no upgrade path from it"
            )
        script = update
    connection.exec_driver_sql(script, execution_options={"no_parameters": True})
    return True
