"""Transactional or pre-check mode: chosen from the database env.py connected to and ``--mode``."""

from __future__ import annotations

from ..errors import UsageError
from ..queries import query_dialect

TRANSACTIONAL = "transactional"
PRECHECK = "precheck"
MODES = (TRANSACTIONAL, PRECHECK)


def check_mode(mode: str | None) -> str | None:
    """``mode`` if it names a mode (None: chosen from the database)."""
    if mode is not None and mode not in MODES:
        raise UsageError(f"--mode must be {' or '.join(MODES)}, not {mode!r}")
    return mode


def mode_for(dialect_name: str, requested: str | None, offline: bool) -> str:
    """The mode of a run on ``dialect_name``: pre-check on MySQL and MariaDB, or where asked for."""
    commits_ddl = query_dialect(dialect_name) == "mysql"
    if requested == TRANSACTIONAL and commits_ddl:
        raise UsageError(
            "--mode transactional is impossible on MySQL/MariaDB: they commit every DDL statement on "
            "their own, so the fence claim cannot share a transaction with the migration; leave "
            "--mode out (pre-check mode is the default there). Nothing was changed"
        )
    if requested == PRECHECK and query_dialect(dialect_name) == "sqlite":
        raise UsageError(
            "--mode precheck is not available on SQLite: its DDL is transactional and the default "
            "mode fences every revision atomically. Nothing was changed"
        )
    mode = PRECHECK if commits_ddl or requested == PRECHECK else TRANSACTIONAL
    if mode == PRECHECK and offline:
        raise UsageError(
            "offline fencing (--sql) needs transactional mode on PostgreSQL: in pre-check mode the "
            "runner itself checks the fence before each revision, which a script cannot do. "
            "Nothing was written"
        )
    return mode
