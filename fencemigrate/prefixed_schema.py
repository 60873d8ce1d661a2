"""What SQLite and MySQL share about their fence schema: prefixed tables and a version row."""

from __future__ import annotations

from sqlalchemy import Connection

from .errors import DatabaseError
from .queries import prefixed_table_name, statement


def installed_version(connection: Connection, quoted_schema: str) -> str | None:
    """The fence schema version in the database, or None when it is not installed."""
    dialect = connection.dialect.name
    probe = connection.execute(
        statement("installed_probe", quoted_schema, dialect),
        {"table_name": prefixed_table_name(quoted_schema, "schema_version")},
    ).scalar()
    if probe is None:
        return None
    version = connection.execute(statement("schema_version", quoted_schema, dialect)).scalar()
    return None if version is None else str(version)  # no row yet: an install in progress


def require_no_other_version(found: str | None, quoted_schema: str, version: str) -> None:
    """Refuse a fence schema at another version: there is no upgrade path on this database."""
    if found is not None and found != version:
        raise DatabaseError(
            f"fence schema {quoted_schema} is at version {found}, but this fencemigrate "
            f"needs {version} and has no upgrade path from it on this database"
        )
