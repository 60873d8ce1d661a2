"""Named SQL statements, read from the sections of ``sql/queries/<dialect>.sql``.

A section is ``-- name: <name>`` on a line of its own, then its comment lines, then the statement,
up to the next section: the format aiosql reads (aiosql itself is not imported: its package loads
all its driver adapters, tens of milliseconds at every command's start). SQLite and MySQL share the
statements they spell alike in ``prefixed.sql``.

Statements can also go straight to the DBAPI cursor, compiled once per dialect: the fence calls
run once or more per migration step; going to the driver with a statement compiled once keeps
their cost close to a bare round trip. They run in whatever transaction the DBAPI connection is
in. Errors are the driver's own: ``translated_errors`` maps them. One that says the session is
gone invalidates the SQLAlchemy connection, as SQLAlchemy's own statements do
(:func:`invalidate_if_lost`).
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from sqlalchemy import Connection, Dialect, TextClause, text
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.sql.compiler import Compiled

from ..config import sql_dir

# SQLite has no schemas, and MySQL's schemas are databases: there the fence tables are named with
# the fence schema as a prefix.
_PREFIXED_FENCE_NAME = r"_(\w+)"
_QUOTES = {"sqlite": '"', "mysql": "`"}
_DIRECTORIES = {"mariadb": "mysql"}  # SQLAlchemy dialect names whose statements are another's
_SHARED = "prefixed"  # the file of the statements SQLite and MySQL share
_SECTION = re.compile(r"^-- name: (\w+)[ \t]*$", re.MULTILINE)


def _directory(dialect_name: str) -> str:
    """The file of ``sql/queries/`` for a SQLAlchemy dialect name (MariaDB uses MySQL's)."""
    return _DIRECTORIES.get(dialect_name, dialect_name)


@cache
def sections(file: str) -> dict[str, str]:
    """The sections of ``sql/queries/<file>.sql``: name -> its text, comment lines included."""
    parts = _SECTION.split((sql_dir() / "queries" / f"{file}.sql").read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in found:
            raise RuntimeError(f"sql/queries/{file}.sql has two sections named {name}")
        found[name] = body
    return found


@cache
def statements_of(dialect: str) -> dict[str, str]:
    """Every section a dialect's statements are read from: its own file's, and on SQLite and MySQL
    the shared ones (a name in both files is an error)."""
    own = sections(_directory(dialect))
    if _directory(dialect) not in _QUOTES:
        return own
    shared = sections(_SHARED)
    if own.keys() & shared.keys():
        raise RuntimeError(f"sql/queries/{_SHARED}.sql repeats {sorted(own.keys() & shared.keys())}")
    return own | shared


@cache
def _source(dialect: str, name: str) -> str:
    lines = statements_of(dialect)[name].splitlines()
    source = "\n".join(line for line in lines if not line.lstrip().startswith("--"))
    for key, value in advisory_lock_keys().items():
        source = source.replace("{" + key + "}", value)
    return source


@cache
def advisory_lock_keys() -> dict[str, str]:
    """The PostgreSQL advisory-lock keys named in ``sql/advisory_locks.conf``: name -> SQL literal."""
    keys: dict[str, str] = {}
    for line in (sql_dir() / "advisory_locks.conf").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, value = line.split("=", 1)
            keys[name.strip()] = value.strip()
    return keys


@cache
def statement(name: str, schema: str, dialect: str = "postgresql") -> TextClause:
    """The statement ``name`` with ``{schema}`` replaced by the quoted fence schema (immutable, shared).

    On SQLite and MySQL, ``{schema}_agent_fence`` becomes the quoted table name ``"<schema>_agent_fence"``.
    """
    dialect = _directory(dialect)
    return text(with_fence_names(_source(dialect, name), "{schema}", schema, dialect).strip())


def with_fence_names(source: str, placeholder: str, quoted_schema: str, dialect: str) -> str:
    """``source`` with ``placeholder`` naming the fence schema ``quoted_schema`` (as the dialect quotes it).

    PostgreSQL: ``placeholder.agent_fence`` -> ``schema.agent_fence``. SQLite and MySQL, where the
    tables are prefixed: ``placeholder_agent_fence`` -> ``"schema_agent_fence"`` (backquotes on
    MySQL), one quoted identifier.
    """
    dialect = _directory(dialect)
    if dialect not in _QUOTES:
        return source.replace(placeholder, quoted_schema)
    quote = _QUOTES[dialect]
    return re.sub(
        re.escape(placeholder) + _PREFIXED_FENCE_NAME,
        lambda match: quote + prefixed_table_name(quoted_schema, match.group(1)).replace(quote, quote * 2) + quote,
        source,
    )


def prefixed_table_name(quoted_schema: str, table: str) -> str:
    """The (unquoted) name of fence table ``table`` on SQLite and MySQL: ``<schema>_<table>``."""
    schema = quoted_schema
    if len(schema) >= 2 and schema[0] == schema[-1] and schema[0] in _QUOTES.values():
        quote = schema[0]
        schema = schema[1:-1].replace(quote * 2, quote)
    return f"{schema}_{table}"


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


def invalidate_if_lost(connection: Connection, error: BaseException) -> None:
    """After ``error`` from a statement sent straight to ``connection``'s driver: invalidate the
    connection when the dialect says its session is gone, as SQLAlchemy does after its own."""
    if connection.closed or connection.invalidated:
        return
    dialect = connection.dialect
    if isinstance(error, dialect.loaded_dbapi.Error) and dialect.is_disconnect(
        error, connection.connection.dbapi_connection, None
    ):
        connection.invalidate(error)


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
