"""Reading a MySQL/MariaDB test database: fence tables (prefixed ``fencemigrate_``), schema, versions."""

from __future__ import annotations

from typing import Any

from support.mysql_server import mysql_rows, mysql_table_names

FENCE_TABLES = (
    "fencemigrate_agent_fence",
    "fencemigrate_applied_revision",
    "fencemigrate_fence_event",
    "fencemigrate_lease",
    "fencemigrate_redis_grant",
    "fencemigrate_schema_version",
    "fencemigrate_script_refusal",
    "fencemigrate_tokenless_write",
    "fencemigrate_tokenless_writes_allowed",
)


def versions(url: str) -> list[str]:
    """Alembic's version rows, sorted (``[]`` when the table does not exist)."""
    if "alembic_version" not in mysql_table_names(url):
        return []
    return sorted(row[0] for row in mysql_rows(url, "SELECT version_num FROM alembic_version"))


def fence_tokens(url: str) -> dict[str, int]:
    """``{resource: token}`` of the fence table."""
    return {row[0]: int(row[1]) for row in mysql_rows(url, "SELECT resource, token FROM fencemigrate_agent_fence")}


def ledger(url: str) -> dict[str, tuple[int, str, str]]:
    """``{revision: (applied_token, holder, state)}`` of the ledger."""
    rows = mysql_rows(url, "SELECT revision, applied_token, holder, state FROM fencemigrate_applied_revision")
    return {row[0]: (int(row[1]), row[2], row[3]) for row in rows}


def events(url: str) -> list[tuple[str, str | None, int | None, str | None]]:
    """``(kind, holder, token, revision)`` of every event, in order."""
    rows = mysql_rows(url, "SELECT kind, holder, token, revision FROM fencemigrate_fence_event ORDER BY id")
    return [(row[0], row[1], None if row[2] is None else int(row[2]), row[3]) for row in rows]


def columns(url: str, table: str) -> list[str]:
    """The column names of ``table``, in order."""
    rows = mysql_rows(
        url,
        "SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() "
        "AND table_name = %s ORDER BY ordinal_position",
        (table,),
    )
    return [row[0] for row in rows]


def app_tables(url: str) -> list[str]:
    """The database's tables apart from the fence tables."""
    return [name for name in mysql_table_names(url) if name not in FENCE_TABLES]


def snapshot(url: str) -> dict[str, Any]:
    """Everything a refused write must leave as it was: tables and columns, versions, fence rows,
    ledger rows and the lease (events may grow: a FENCED rejection is logged)."""
    present = mysql_table_names(url)
    state: dict[str, Any] = {
        "columns": mysql_rows(
            url,
            "SELECT table_name, column_name, column_type FROM information_schema.columns "
            "WHERE table_schema = DATABASE() ORDER BY table_name, ordinal_position",
        ),
        "versions": versions(url),
    }
    for table, order in (
        ("fencemigrate_agent_fence", "resource"),
        ("fencemigrate_applied_revision", "revision"),
        ("fencemigrate_lease", "resource"),
    ):
        state[table] = mysql_rows(url, f"SELECT * FROM {table} ORDER BY {order}") if table in present else None
    return state
