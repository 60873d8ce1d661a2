"""Named SQL statements, read from ``sql/queries/<dialect>/<name>.sql``."""

from __future__ import annotations

from functools import cache

from sqlalchemy import TextClause, text

from .resources import sql_dir


@cache
def _source(dialect: str, name: str) -> str:
    path = sql_dir() / "queries" / dialect / f"{name}.sql"
    lines = path.read_text(encoding="utf-8").splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("--")).strip()


@cache
def statement(name: str, schema: str, dialect: str = "postgresql") -> TextClause:
    """The statement ``name`` with ``{schema}`` replaced by the quoted fence schema (immutable, shared)."""
    return text(_source(dialect, name).replace("{schema}", schema))
