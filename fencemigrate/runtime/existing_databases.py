"""Read commands never create a database: SQLite would create a missing file on connect.

Inside :func:`existing_sqlite_files_only`, a connection to a SQLite file that does not exist is
refused before the driver opens it (so no file is left behind), whoever opens it: env.py, Alembic
or fencemigrate. In-memory databases are let through.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from sqlalchemy import event
from sqlalchemy.dialects.sqlite.base import SQLiteDialect

from ..errors import FencemigrateError

_ONLY_EXISTING: ContextVar[bool] = ContextVar("fencemigrate_only_existing_sqlite_files", default=False)
_listening = False


class MissingDatabase(FencemigrateError):
    """A read command was pointed at a SQLite file that does not exist (exit 1)."""


@contextmanager
def existing_sqlite_files_only() -> Iterator[None]:
    """Refuse, inside the block (this thread or task), to open a SQLite file that does not exist."""
    global _listening
    if not _listening:
        event.listen(SQLiteDialect, "do_connect", _refuse_missing_file)
        _listening = True
    reset = _ONLY_EXISTING.set(True)
    try:
        yield
    finally:
        _ONLY_EXISTING.reset(reset)


def _refuse_missing_file(dialect: Any, record: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
    if not _ONLY_EXISTING.get():
        return
    path = database_file(cargs, cparams)
    if path is not None and not os.path.exists(path):
        raise MissingDatabase(
            f"no SQLite database at {path}: read commands never create one; check sqlalchemy.url "
            "(a fenced upgrade creates the file)"
        )


def database_file(cargs: list[Any], cparams: dict[str, Any]) -> str | None:
    """The file a SQLite driver is asked to open (``sqlite3.connect``'s arguments); None in memory."""
    name = str(cargs[0]) if cargs else str(cparams.get("database", ""))
    if cparams.get("uri"):
        parts = urlsplit(name)
        if parse_qs(parts.query).get("mode", [""])[-1] == "memory":
            return None
        name = unquote(parts.path) if parts.scheme == "file" else name
    return None if name in ("", ":memory:") else name
