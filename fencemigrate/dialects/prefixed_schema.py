"""What SQLite and MySQL share about their fence schema: prefixed tables and a version row."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection

from ..errors import DatabaseError
from .base import SchemaScripts, refuse_pre_release
from .statements import prefixed_table_name, statement


def installed_version(connection: Connection, quoted_schema: str, query: str = "schema_version") -> str | None:
    """The fence schema version in the database, or None when it is not installed.

    ``query``: the statement that reads the version row (MySQL has a locking and a plain one).
    """
    dialect = connection.dialect.name
    probe = connection.execute(
        statement("installed_probe", quoted_schema, dialect),
        {"table_name": prefixed_table_name(quoted_schema, "schema_version")},
    ).scalar()
    if probe is None:
        return None
    version = connection.execute(statement(query, quoted_schema, dialect)).scalar()
    return None if version is None else str(version)  # no row yet: an install in progress


VERSION = "1.0"
"""The fence schema version on SQLite and MySQL (PostgreSQL's is its control file's ``default_version``)."""


def require_no_other_version(found: str | None, quoted_schema: str, version: str) -> None:
    """Refuse a fence schema at another version: there is no upgrade path on this database."""
    if found is None or found == version:
        return
    removal = (
        "`DROP TRIGGER` the version table's guard triggers `<version_table>_no_tokenless_insert`, `_update` "
        f"and `_delete`, then `DROP TABLE` each `{prefixed_table_name(quoted_schema, '')}*` table"
    )
    refuse_pre_release(quoted_schema, found, version, removal)
    raise DatabaseError(
        f"fence schema {quoted_schema} is at version {found}, but this fencemigrate "
        f"needs {version} and has no upgrade path from it on this database"
    )


def run_install(
    connection: Connection,
    quoted_schema: str,
    found: str | None,
    scripts: SchemaScripts,
    install_statements: Callable[[str, str | None, str | None, SchemaScripts], list[str]],
) -> None:
    """Bring the fence schema from ``found`` (None: not installed) to the version of ``scripts``, one
    statement at a time; a version with no path from it is refused (:func:`require_no_other_version`)."""
    if found is not None and scripts.paths(found) is None:
        require_no_other_version(found, quoted_schema, scripts.version)
    statements = install_statements(quoted_schema, None, found, scripts)
    for sql in statements:
        connection.exec_driver_sql(sql, execution_options={"no_parameters": True})
