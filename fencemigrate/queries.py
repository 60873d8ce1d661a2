"""Named SQL statements, read from ``sql/queries/<dialect>/<name>.sql``."""

from __future__ import annotations

import re
from functools import cache

from sqlalchemy import TextClause, text

from .resources import sql_dir

# SQLite has no schemas: the fence tables are named with the fence schema as a prefix.
_SQLITE_FENCE_NAME = r"_(\w+)"


@cache
def _source(dialect: str, name: str) -> str:
    path = sql_dir() / "queries" / dialect / f"{name}.sql"
    lines = path.read_text(encoding="utf-8").splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("--"))


@cache
def statement(name: str, schema: str, dialect: str = "postgresql") -> TextClause:
    """The statement ``name`` with ``{schema}`` replaced by the quoted fence schema (immutable, shared).

    On SQLite, ``{schema}_agent_fence`` becomes the quoted table name ``"<schema>_agent_fence"``.
    """
    return text(with_fence_names(_source(dialect, name), "{schema}", schema, dialect).strip())


def with_fence_names(source: str, placeholder: str, quoted_schema: str, dialect: str) -> str:
    """``source`` with ``placeholder`` naming the fence schema ``quoted_schema`` (as the dialect quotes it).

    PostgreSQL: ``placeholder.agent_fence`` -> ``schema.agent_fence``. SQLite, which has no schemas:
    ``placeholder_agent_fence`` -> ``"schema_agent_fence"``, one quoted identifier.
    """
    if dialect != "sqlite":
        return source.replace(placeholder, quoted_schema)
    return re.sub(
        re.escape(placeholder) + _SQLITE_FENCE_NAME,
        lambda match: '"' + sqlite_table_name(quoted_schema, match.group(1)).replace('"', '""') + '"',
        source,
    )


def sqlite_table_name(quoted_schema: str, table: str) -> str:
    """The (unquoted) name of fence table ``table`` on SQLite: ``<schema>_<table>``."""
    schema = quoted_schema
    if len(schema) >= 2 and schema[0] == schema[-1] == '"':
        schema = schema[1:-1].replace('""', '"')
    return f"{schema}_{table}"
