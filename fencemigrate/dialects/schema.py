"""The fence schema on whichever database a connection is to: its version, its install."""

from __future__ import annotations

from sqlalchemy import Connection

from ..errors import refused_step
from .base import dialect_for


def installed_version(connection: Connection, quoted_schema: str) -> str | None:
    """The fence schema version in the database, or None when it is not installed."""
    return dialect_for(connection).installed_version(connection, quoted_schema)


def ensure_installed(connection: Connection, quoted_schema: str) -> bool:
    """Install (or update) the fence schema inside the caller's transaction unless current. True if it ran.
    A read-only database's refusal is :class:`~fencemigrate.errors.ReadOnlyDatabase`."""
    with refused_step("the install of the fence schema"):
        return dialect_for(connection).ensure_installed(connection, quoted_schema)


def offline_install_script(backend: str | None, schema: str) -> str:
    """The install script to run by hand for the database ``backend`` names (SQLAlchemy's backend
    name; PostgreSQL's psql when None): for the sqlite3 shell on SQLite, the mysql client on MySQL
    and MariaDB."""
    return dialect_for(backend or "postgresql").offline_install_script(schema)
