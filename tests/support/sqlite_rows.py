"""Read a SQLite test database straight with the ``sqlite3`` module: the SQLite twin of fence_rows.py.

Every helper opens its own short-lived connection in autocommit mode, so it sees only what has
been committed and holds no lock afterwards. Nothing here imports fencemigrate: the tests check
the database, not the package's own view of it.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from support.project import Project, create_project, sqlite_url

PREFIX = "fencemigrate_"  # SQLite has no schemas: the fence tables carry the schema name as a prefix
FENCE_TABLES = [
    "agent_fence",
    "applied_revision",
    "fence_event",
    "lease",
    "redis_grant",
    "schema_version",
    "tokenless_writes_allowed",
    "version_write_claim",
]
EVENTS = f"{PREFIX}fence_event"


def make_sqlite_project(tmp_path: Path, name: str = "project", database: str = "db.sqlite") -> Project:
    """A real ``alembic init -t generic`` project in ``tmp_path / name`` on the SQLite file ``tmp_path / database``."""
    return create_project(tmp_path / name, sqlite_url(tmp_path / database))


def query(database: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows of one statement, run in autocommit mode."""
    with closing(sqlite3.connect(database, isolation_level=None)) as connection:
        return connection.execute(sql, params).fetchall()


def table_names(database: Path) -> list[str]:
    """Sorted names of the tables in the file (without SQLite's own)."""
    rows = query(
        database, "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY 1"
    )
    return [str(row[0]) for row in rows]


def user_tables(database: Path) -> list[str]:
    """Tables that are neither Alembic's version table nor fencemigrate's."""
    return [name for name in table_names(database) if name != "alembic_version" and not name.startswith(PREFIX)]


def column_names(database: Path, table: str) -> list[str]:
    """Column names of ``table`` in order."""
    return [str(row[1]) for row in query(database, f'PRAGMA table_info("{table}")')]


def alembic_versions(database: Path) -> list[str] | None:
    """Sorted ``version_num`` values; None when Alembic's version table does not exist."""
    if "alembic_version" not in table_names(database):
        return None
    return [str(row[0]) for row in query(database, "SELECT version_num FROM alembic_version ORDER BY 1")]


def fence_installed(database: Path, prefix: str = PREFIX) -> bool:
    """True when the fence tables exist."""
    return all(f"{prefix}{table}" in table_names(database) for table in FENCE_TABLES)


def fence_tokens(database: Path) -> dict[str, int]:
    """``{resource: token}``; ``{}`` when the fence schema is not installed."""
    if not fence_installed(database):
        return {}
    return {str(r): int(t) for r, t in query(database, f"SELECT resource, token FROM {PREFIX}agent_fence")}


def ledger(database: Path) -> dict[str, tuple[int, str, str]]:
    """``{revision: (applied_token, holder, method)}`` for ``alembic_version``; ``{}`` when not installed."""
    if not fence_installed(database):
        return {}
    rows = query(
        database,
        f"SELECT revision, applied_token, holder, method FROM {PREFIX}applied_revision "
        "WHERE version_table = 'alembic_version' ORDER BY revision",
    )
    return {str(rev): (int(token), str(holder), str(method)) for rev, token, holder, method in rows}


def events(database: Path, *kinds: str) -> list[tuple[str, str, int, str]]:
    """``(kind, holder, token, revision)`` of the logged events (only ``kinds`` if given), in order."""
    if not fence_installed(database):
        return []
    rows = query(database, f"SELECT kind, holder, token, revision FROM {EVENTS} ORDER BY id")
    return [(str(k), str(h), int(t), str(r)) for k, h, t, r in rows if not kinds or k in kinds]


def snapshot(database: Path) -> dict[str, Any]:
    """The whole database (schema and every row) except the append-only event log."""
    schema = query(database, "SELECT type, name, sql FROM sqlite_master ORDER BY type, name")
    tables = [name for name in table_names(database) if name != EVENTS]
    rows = {name: sorted(query(database, f'SELECT * FROM "{name}"'), key=repr) for name in tables}
    return {"schema": schema, "rows": rows}
