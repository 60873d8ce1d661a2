"""Compare the fence schema in a database with what fencemigrate's install scripts create.

The expected tables, triggers and function bodies are read from the shipped scripts (``sql/``;
``sql/sqlite/`` and ``sql/mysql/`` where the tables are prefixed) at the installed version; the
installed ones from the catalogs (``sql/queries/<dialect>/check_fence_objects.sql``). A missing,
disabled or changed guard trigger, or a replaced ``claim()``, would let a stale writer through.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import Connection

from .. import mysql_schema, sqlite_schema
from ..errors import FencemigrateError
from ..fence_schema import install_script
from ..queries import prefixed_table_name, query_dialect, statement

_EVENTS = re.compile(r"\b(BEFORE|AFTER|INSTEAD OF) (.+?) ON ", re.IGNORECASE)
_IF_NOT_EXISTS = re.compile(r"\bIF NOT EXISTS\s+", re.IGNORECASE)
_IDENTIFIER_QUOTES = str.maketrans("", "", '"`')
_SHOWN_DEFINITION = 200


@dataclass(frozen=True)
class FenceObject:
    """A table, trigger or function of the fence schema; ``definition`` is None for a table."""

    kind: str
    name: str
    definition: str | None = None
    enabled: bool = True


def fence_schema_problems(connection: Connection, quoted_schema: str, version: str) -> list[str]:
    """How the installed fence schema differs from fencemigrate's at ``version`` (empty: it does not)."""
    expected = expected_fence_objects(connection.dialect.name, quoted_schema, version)
    if expected is None:
        return [f"it is at version {version}, which this fencemigrate does not know"]
    installed = installed_fence_objects(connection, quoted_schema)
    return [
        problem
        for wanted in expected
        if (problem := _difference(wanted, installed.get((wanted.kind, wanted.name)), quoted_schema))
    ]


def expected_fence_objects(dialect_name: str, quoted_schema: str, version: str) -> list[FenceObject] | None:
    """The tables, triggers and functions fencemigrate's scripts create at ``version`` (None: unknown)."""
    dialect = query_dialect(dialect_name)
    if dialect == "postgresql":
        return _postgresql_expected(quoted_schema, version)
    if dialect == "sqlite":
        return _sqlite_expected(quoted_schema, version)
    if dialect == "mysql":
        return _mysql_expected(quoted_schema, version)
    raise FencemigrateError(f"check --db cannot compare the fence schema on {dialect} yet")


def installed_fence_objects(connection: Connection, quoted_schema: str) -> dict[tuple[str, str], FenceObject]:
    """The fence schema's objects as the catalogs have them, by ``(kind, name)``."""
    dialect = query_dialect(connection.dialect.name)
    if dialect == "postgresql":
        parameters = {"quoted_schema": quoted_schema}
    else:
        parameters = {"prefix": prefixed_table_name(quoted_schema, "")}
    return {
        (row.kind, row.name): FenceObject(row.kind, row.name, row.definition, bool(row.enabled))
        for row in connection.execute(statement("check_fence_objects", quoted_schema, dialect), parameters)
    }


def _difference(wanted: FenceObject, found: FenceObject | None, quoted_schema: str) -> str | None:
    label = f"{wanted.kind} {wanted.name}" + ("()" if wanted.kind == "function" else "")
    if found is None:
        return f"{label} is missing"
    if not found.enabled:
        return f"{label} is disabled"
    if wanted.definition is None or found.definition is None:
        return None
    if wanted.kind == "function":
        if _spaced(found.definition) != _spaced(wanted.definition):
            return f"{label} was replaced: its body is not fencemigrate's"
        return None
    if _trigger_form(found.definition, quoted_schema) != _trigger_form(wanted.definition, quoted_schema):
        shown = _spaced(found.definition)
        if len(shown) > _SHOWN_DEFINITION:
            shown = shown[: _SHOWN_DEFINITION - 3] + "..."
        return f"{label} was changed: it is now `{shown}`"
    return None


def _spaced(text: str) -> str:
    return " ".join(text.split()).rstrip(";").strip()


def _trigger_form(definition: str, quoted_schema: str) -> str:
    """A trigger definition as compared: one line, no IF NOT EXISTS, no schema qualifiers (the
    catalogs add them only when the schema is not on the search path), no identifier quotes
    (double quotes, MySQL's backquotes), events in order."""
    text = _IF_NOT_EXISTS.sub("", _spaced(definition)).replace(f"{quoted_schema}.", "").translate(_IDENTIFIER_QUOTES)

    def sorted_events(match: re.Match[str]) -> str:
        events = sorted(event.strip().upper() for event in match.group(2).split(" OR "))
        return f"{match.group(1)} {' OR '.join(events)} ON "

    return _EVENTS.sub(sorted_events, text).casefold()


def _postgresql_expected(quoted_schema: str, version: str) -> list[FenceObject] | None:
    """Tables, triggers and final function bodies of the script that installs ``version``."""
    try:
        script = install_script(quoted_schema, version)
    except FileNotFoundError:
        return None
    schema = re.escape(quoted_schema)
    objects: dict[tuple[str, str], FenceObject] = {}
    pattern = re.compile(
        rf"CREATE TABLE {schema}\.(?P<table>\w+)"
        rf"|(?P<trigger_sql>CREATE (?:CONSTRAINT )?TRIGGER (?P<trigger>\w+)\b[^;]*)"
        rf"|CREATE (?:OR REPLACE )?FUNCTION {schema}\.(?P<function>\w+)\(.*?\bAS \$\$(?P<body>.*?)\$\$"
        rf"|ALTER FUNCTION {schema}\.(?P<old>\w+)\([^)]*\)\s+RENAME TO (?P<new>\w+)",
        re.DOTALL,
    )
    for match in pattern.finditer(script):
        if match.group("table"):
            objects[("table", match.group("table"))] = FenceObject("table", match.group("table"))
        elif match.group("trigger"):
            name = match.group("trigger")
            objects[("trigger", name)] = FenceObject("trigger", name, match.group("trigger_sql"))
        elif match.group("function"):
            name = match.group("function")
            objects[("function", name)] = FenceObject("function", name, match.group("body"))
        else:
            renamed = objects.pop(("function", match.group("old")))
            objects[("function", match.group("new"))] = FenceObject("function", match.group("new"), renamed.definition)
    return sorted(objects.values(), key=lambda item: (item.kind, item.name))


def _sqlite_expected(quoted_schema: str, version: str) -> list[FenceObject] | None:
    """Tables and triggers of the SQLite install script for ``version``."""
    try:
        sql = sqlite_schema.install_statements(quoted_schema, version)
    except FileNotFoundError:
        return None
    return _created_objects(sql, '"')


def _mysql_expected(quoted_schema: str, version: str) -> list[FenceObject] | None:
    """Tables and triggers of the MySQL install script for ``version``."""
    try:
        sql = mysql_schema.install_statements(quoted_schema, version)
    except FileNotFoundError:
        return None
    return _created_objects(sql, "`")


def _created_objects(sql: list[str], quote: str) -> list[FenceObject]:
    """The tables and triggers that the statements ``sql`` create, their names quoted with ``quote``."""
    name = re.compile(rf"CREATE (TABLE|TRIGGER) (?:IF NOT EXISTS )?{quote}((?:[^{quote}]|{quote}{quote})+){quote}")
    objects: list[FenceObject] = []
    for text in sql:
        match = name.match(text)
        if match:
            kind, created = match.group(1).lower(), match.group(2).replace(quote * 2, quote)
            objects.append(FenceObject(kind, created, text if kind == "trigger" else None))
    return sorted(objects, key=lambda item: (item.kind, item.name))
