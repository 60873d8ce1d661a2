"""Which database objects are the fence's own, left out of Alembic's autogenerate.

The fence tables (SQLite and MySQL keep them, prefixed, beside the application's) and on
PostgreSQL the fence schema (reflected with ``include_schemas=True``) are fencemigrate's, not the
models': ``revision --autogenerate`` would write ``op.drop_table`` for each, and ``check --db``'s
FM408 would report them. Both add :func:`is_fence_object` to env.py's ``include_name`` while
Alembic compares, so what is left is exactly what Alembic writes for the application's tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from alembic.runtime.migration import MigrationContext

from ..dialects import dialect_for
from .fence_objects import installed_fence_objects


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
