"""The fence's own database objects: which they are, and whether the installed ones are the shipped ones.

The fence tables (SQLite and MySQL keep them, prefixed, beside the application's) and on
PostgreSQL the fence schema (reflected with ``include_schemas=True``) are fencemigrate's, not the
models': ``revision --autogenerate`` would write ``op.drop_table`` for each, and ``check --db``'s
FM408 would report them. Both add :func:`is_fence_object` to env.py's ``include_name`` while
Alembic compares, so what is left is exactly what Alembic writes for the application's tables.

The expected tables, triggers and function bodies are read from the shipped scripts at the
installed version (each dialect's :meth:`~fencemigrate.dialects.Dialect.expected_fence_objects`); the
installed ones from the catalogs (``check_fence_objects`` in ``sql/queries/<dialect>.sql``). A missing,
disabled or changed guard trigger, or a replaced ``claim()``, would let a stale writer through."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection

from ..dialects import FenceObject, dialect_for
from ..dialects.statements import statement

_EVENTS = re.compile(r"\b(BEFORE|AFTER|INSTEAD OF) (.+?) ON ", re.IGNORECASE)
_IF_NOT_EXISTS = re.compile(r"\bIF NOT EXISTS\s+", re.IGNORECASE)
_IDENTIFIER_QUOTES = str.maketrans("", "", '"`')
_SHOWN_DEFINITION = 200


def fence_schema_problems(connection: Connection, quoted_schema: str, version: str) -> list[str]:
    """How the installed fence schema differs from fencemigrate's at ``version`` (empty: it does not)."""
    expected = dialect_for(connection).expected_fence_objects(quoted_schema, version)
    if expected is None:
        return [f"it is at version {version}, which this fencemigrate does not know"]
    installed = installed_fence_objects(connection, quoted_schema)
    return [
        problem
        for wanted in expected
        if (problem := _difference(wanted, installed.get((wanted.kind, wanted.name)), quoted_schema))
    ]


def installed_fence_objects(connection: Connection, quoted_schema: str) -> dict[tuple[str, str], FenceObject]:
    """The fence schema's objects as the catalogs have them, by ``(kind, name)``."""
    parameters = dialect_for(connection).fence_object_parameters(quoted_schema)
    return {
        (row.kind, row.name): FenceObject(row.kind, row.name, row.definition, bool(row.enabled))
        for row in connection.execute(
            statement("check_fence_objects", quoted_schema, connection.dialect.name), parameters
        )
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


@dataclass(frozen=True)
class FenceObjects:
    """The fence's schema (None where its tables are prefixed in the application's) and tables,
    as Alembic names them: ``(schema, table)``, schema None for the default one."""

    schema: str | None
    tables: frozenset[tuple[str | None, str]]


def fence_objects(context: MigrationContext, schema: str) -> FenceObjects:
    """The fence objects in the database ``context`` is connected to (fence schema ``schema``)."""
    if not dialect_for(context).prefixes_tables:
        return FenceObjects(schema, frozenset())
    connection = context.connection
    assert connection is not None, "autogenerate needs a connection"
    quoted = context.dialect.identifier_preparer.quote(schema)
    names = {name for kind, name in installed_fence_objects(connection, quoted) if kind == "table"}
    return FenceObjects(None, frozenset((None, name) for name in names))


def is_fence_object(fence: FenceObjects, name: str | None, type_: str, parent_names: dict[str, Any]) -> bool:
    """True for the fence schema and the fence tables (their indexes and constraints go with them);
    arguments as Alembic gives ``include_name``."""
    if type_ == "schema":
        return fence.schema is not None and name == fence.schema
    if type_ == "table":
        return (parent_names.get("schema_name"), name) in fence.tables
    return False


@contextmanager
def fence_left_out(context: MigrationContext, schema: str) -> Iterator[None]:
    """While Alembic compares on ``context``: env.py's ``include_name`` (if any) also leaves out the
    fence objects. Restored afterwards."""
    fence = fence_objects(context, schema)
    own = context.opts.get("include_name")

    def include_name(name: str | None, type_: str, parent_names: dict[str, Any]) -> bool:
        if is_fence_object(fence, name, type_, parent_names):
            return False
        return own is None or bool(own(name, type_, parent_names))

    context.opts["include_name"] = include_name
    try:
        yield
    finally:
        if own is None:
            del context.opts["include_name"]
        else:
            context.opts["include_name"] = own
