"""What SQLite and MySQL share about their fence schema: prefixed tables and a version row."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection

from ..config import sql_dir
from ..errors import DatabaseError
from ..queries import prefixed_table_name, statement


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


def script_chain(dialect: str, base: str, start: str | None, target: str) -> list[str] | None:
    """The script texts of ``sql/<dialect>/`` that bring the fence schema from ``start`` to ``target``.

    As on PostgreSQL: a fresh install (``start`` None) is ``target``'s own full install script
    ``fencemigrate--<target>.sql`` when there is one, else the ``base`` version's install script,
    then the update scripts ``fencemigrate--A--B.sql`` in order. None when there is no such path.
    """
    directory = sql_dir() / dialect
    if start is None and (directory / f"fencemigrate--{target}.sql").is_file():
        return [(directory / f"fencemigrate--{target}.sql").read_text(encoding="utf-8")]
    steps: dict[str, str] = {}
    for path in directory.glob("fencemigrate--*--*.sql"):
        source, step_target = path.name[len("fencemigrate--") : -len(".sql")].split("--")
        steps[source] = step_target
    names: list[str] = []
    version = base
    if start is None:
        names.append(f"fencemigrate--{base}.sql")
    else:
        version = start
    while version != target:
        if version not in steps or len(names) > len(steps) + 1:
            return None
        names.append(f"fencemigrate--{version}--{steps[version]}.sql")
        version = steps[version]
    if not all((directory / name).is_file() for name in names):
        return None
    return [(directory / name).read_text(encoding="utf-8") for name in names]


def require_no_other_version(found: str | None, quoted_schema: str, version: str) -> None:
    """Refuse a fence schema at another version: there is no upgrade path on this database."""
    if found is not None and found != version:
        raise DatabaseError(
            f"fence schema {quoted_schema} is at version {found}, but this fencemigrate "
            f"needs {version} and has no upgrade path from it on this database"
        )


def run_install(
    connection: Connection,
    quoted_schema: str,
    version: str,
    found: str | None,
    install_statements: Callable[[str, str, str | None], list[str]],
) -> None:
    """Bring the fence schema from ``found`` (None: not installed) to ``version``, one statement at a
    time; a version with no path from it is refused (:func:`require_no_other_version`)."""
    try:
        statements = install_statements(quoted_schema, version, found)
    except FileNotFoundError:
        require_no_other_version(found, quoted_schema, version)
        raise
    for sql in statements:
        connection.exec_driver_sql(sql, execution_options={"no_parameters": True})
