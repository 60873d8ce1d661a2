"""Transactional or pre-check mode: chosen from the database env.py connected to and ``--mode``."""

from __future__ import annotations

from ..dialects import MODES, PRECHECK, dialect_for
from ..errors import UsageError


def check_mode(mode: str | None) -> str | None:
    """``mode`` if it names a mode (None: chosen from the database)."""
    if mode is not None and mode not in MODES:
        raise UsageError(f"--mode must be {' or '.join(MODES)}, not {mode!r}")
    return mode


def mode_for(dialect_name: str, requested: str | None, offline: bool) -> str:
    """The mode of a run on ``dialect_name``: the database's default (pre-check on MySQL and
    MariaDB), or the one asked for where the database can run it."""
    dialect = dialect_for(dialect_name)
    mode = dialect.mode(requested)
    if mode == PRECHECK and offline and not dialect.writes_precheck_scripts:
        raise UsageError(
            f"offline fencing (--sql) needs transactional mode on {dialect.display_name}: in pre-check mode "
            "the runner itself checks the fence before each revision, which a script cannot do there. "
            "Leave --mode out, or run the command without --sql. Nothing was written"
        )
    return mode
