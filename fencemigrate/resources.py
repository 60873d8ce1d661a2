"""Where the shipped SQL and the Alembic template live, installed or in a checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    installed = _PACKAGE / "_data" / name
    if installed.is_dir():
        return installed
    checkout = _PACKAGE.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"fencemigrate data directory {name!r} is missing from the installation")


def sql_dir() -> Path:
    """The ``sql/`` directory: extension control file, install scripts, queries."""
    return _data_dir("sql")


def template_dir() -> Path:
    """The ``alembic_template/`` directory used by ``fencemigrate init``."""
    return _data_dir("alembic_template")
