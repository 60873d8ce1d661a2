"""Install the fence schema from the same scripts ``CREATE EXTENSION`` would run."""

from __future__ import annotations

import re
from functools import cache

from sqlalchemy import Connection

from .errors import DatabaseError
from .queries import statement
from .resources import sql_dir

_EXTENSION = "fencemigrate"


@cache
def default_version() -> str:
    """``default_version`` from ``sql/fencemigrate.control``."""
    control = (sql_dir() / f"{_EXTENSION}.control").read_text(encoding="utf-8")
    match = re.search(r"^default_version\s*=\s*'([^']+)'", control, re.MULTILINE)
    if match is None:
        raise RuntimeError("fencemigrate.control has no default_version")
    return match.group(1)


def install_script(quoted_schema: str) -> str:
    """The SQL that installs the fence schema into ``quoted_schema``, for psql or the runner."""
    source = (sql_dir() / f"{_EXTENSION}--{default_version()}.sql").read_text(encoding="utf-8")
    body = "\n".join(line for line in source.splitlines() if not line.startswith("\\echo"))
    return f"CREATE SCHEMA IF NOT EXISTS {quoted_schema};\n" + body.replace("@extschema@", quoted_schema)


def installed_version(connection: Connection, quoted_schema: str) -> str | None:
    """The fence schema version in the database, or None when it is not installed."""
    probe = connection.execute(
        statement("installed_probe", quoted_schema),
        {"function_name": f"{quoted_schema}.schema_version()"},
    ).scalar()
    if probe is None:
        return None
    return str(connection.execute(statement("schema_version", quoted_schema)).scalar())


def ensure_installed(connection: Connection, quoted_schema: str) -> bool:
    """Install the fence schema inside the caller's transaction unless present. True if installed now.

    Concurrent first runs serialise on a transaction-level advisory lock, so exactly one installs.
    """
    if installed_version(connection, quoted_schema) == default_version():
        return False
    connection.execute(statement("install_lock", quoted_schema))
    found = installed_version(connection, quoted_schema)
    if found == default_version():
        return False
    if found is not None:
        raise DatabaseError(
            f"fence schema {quoted_schema} is at version {found}, but this fencemigrate "
            f"needs {default_version()} and has no upgrade path from it"
        )
    connection.exec_driver_sql(install_script(quoted_schema), execution_options={"no_parameters": True})
    return True
