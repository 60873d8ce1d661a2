"""Statements sent straight to the DBAPI cursor, compiled once per dialect.

The fence calls run once or more per migration step; going to the driver with a statement
compiled once keeps their cost close to a bare round trip. They run in whatever transaction the
DBAPI connection is in. Errors are the driver's own: ``translated_errors`` maps them. One that says
the session is gone invalidates the SQLAlchemy connection, as SQLAlchemy's own statements do
(:func:`..connections.invalidate_if_lost`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Dialect, TextClause
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.sql.compiler import Compiled

from ..connections import invalidate_if_lost

_compiled: dict[tuple[int, str], Compiled] = {}


def scalar_on_driver(connection: Connection, clause: TextClause, params: dict[str, Any]) -> Any:
    """Run ``clause`` on ``connection``'s DBAPI connection; the first column of its first row (or None)."""
    return scalar_on_dbapi(_dbapi(connection), connection.dialect, clause, params, owner=connection)


def rowcount_on_driver(connection: Connection, clause: TextClause, params: dict[str, Any]) -> int:
    """Run ``clause`` on ``connection``'s DBAPI connection; the number of rows it changed."""
    _, count = _execute(_dbapi(connection), connection.dialect, clause, params, fetch=False, owner=connection)
    return count


def scalar_on_dbapi(
    dbapi_connection: DBAPIConnection,
    dialect: Dialect,
    clause: TextClause,
    params: dict[str, Any],
    owner: Connection | None = None,
) -> Any:
    """As :func:`scalar_on_driver`, on a DBAPI connection (one SQLAlchemy may have closed already);
    ``owner``: the SQLAlchemy connection it belongs to."""
    row, _ = _execute(dbapi_connection, dialect, clause, params, fetch=True, owner=owner)
    return None if row is None else row[0]


def _dbapi(connection: Connection) -> DBAPIConnection:
    dbapi_connection = connection.connection.dbapi_connection
    assert dbapi_connection is not None
    return dbapi_connection


def _execute(
    dbapi_connection: DBAPIConnection,
    dialect: Dialect,
    clause: TextClause,
    params: dict[str, Any],
    fetch: bool,
    owner: Connection | None,
) -> tuple[Any, int]:
    key = (id(clause), f"{dialect.name}/{dialect.paramstyle}")
    compiled = _compiled.get(key)
    if compiled is None:
        compiled = _compiled[key] = clause.compile(dialect=dialect)
    bound = compiled.construct_params(params)
    assert bound is not None
    positions = getattr(compiled, "positiontup", None)
    arguments: Any = tuple(bound[name] for name in positions) if positions else bound
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(compiled.string, arguments)
        return (cursor.fetchone() if fetch else None), int(cursor.rowcount)
    except Exception as error:
        if owner is not None:
            invalidate_if_lost(owner, error)
        raise
    finally:
        cursor.close()
