"""Small synchronous helpers to inspect a test database.

Every helper takes a URL -- a SQLAlchemy one (``postgresql+psycopg://...``) is fine,
the driver part is dropped -- and opens its own short-lived autocommit psycopg
connection, so it sees whatever other processes (``fencemigrate``, ``alembic``)
have committed and never holds locks afterwards.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql as pgsql

Params = Sequence[Any] | Mapping[str, Any] | None
SQL = str | pgsql.SQL | pgsql.Composed


def libpq_url(url: str) -> str:
    """Turn a SQLAlchemy URL into a libpq one: ``postgresql+psycopg://`` -> ``postgresql://``."""
    return re.sub(r"^postgresql\+[A-Za-z0-9_]+://", "postgresql://", url)


def connect(url: str) -> psycopg.Connection[tuple[Any, ...]]:
    """Open an autocommit psycopg connection to ``url`` (caller closes it, e.g. with ``with``)."""
    return psycopg.connect(libpq_url(url), autocommit=True)


def query(url: str, sql: SQL, params: Params = None) -> list[tuple[Any, ...]]:
    """Run SQL in autocommit mode and return the rows of its last statement.

    ``sql`` is a string or a :mod:`psycopg.sql` ``SQL`` / ``Composed``. ``params`` uses psycopg
    placeholders (``%s`` / ``%(name)s``); with ``params=None`` the SQL is sent as is
    (a literal ``%`` needs no escaping and several ``;``-separated statements are
    allowed). Returns ``[]`` for statements that produce no rows.
    """
    with connect(url) as conn:
        cur = conn.execute(sql, params)
        rows = cur.fetchall() if cur.description is not None else []
        while cur.nextset():  # several statements: keep the last one's rows
            rows = cur.fetchall() if cur.description is not None else []
        return rows


def execute(url: str, sql: SQL, params: Params = None) -> None:
    """Run one statement (or several, ``;``-separated, when ``params`` is None) in autocommit mode."""
    query(url, sql, params)


def table_names(url: str, schema: str = "public") -> list[str]:
    """Return the sorted names of ordinary and partitioned tables in ``schema``."""
    rows = query(
        url,
        "SELECT c.relname FROM pg_catalog.pg_class c "
        "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') ORDER BY c.relname",
        (schema,),
    )
    return [row[0] for row in rows]


def table_exists(url: str, table: str, schema: str = "public") -> bool:
    """Tell whether ``schema.table`` exists as an ordinary or partitioned table."""
    return table in table_names(url, schema)


def column_names(url: str, table: str, schema: str = "public") -> list[str]:
    """Return the column names of ``schema.table`` in ordinal order (``[]`` if no such table)."""
    rows = query(
        url,
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
        (schema, table),
    )
    return [row[0] for row in rows]


def schema_names(url: str) -> list[str]:
    """Return the sorted user schema names (without ``pg_*`` and ``information_schema``)."""
    rows = query(
        url,
        "SELECT nspname FROM pg_catalog.pg_namespace "
        "WHERE nspname NOT LIKE 'pg\\_%%' AND nspname <> 'information_schema' ORDER BY 1",
        (),
    )
    return [row[0] for row in rows]


def alembic_versions(url: str, table: str = "alembic_version", schema: str = "public") -> list[str] | None:
    """Return the sorted ``version_num`` values of Alembic's version table.

    ``None`` means the table does not exist (nothing ever ran); ``[]`` means it
    exists but is empty (e.g. everything downgraded to base).
    """
    if not table_exists(url, table, schema):
        return None
    rows = query(
        url,
        pgsql.SQL("SELECT version_num FROM {}.{} ORDER BY 1").format(pgsql.Identifier(schema), pgsql.Identifier(table)),
    )
    return [row[0] for row in rows]
