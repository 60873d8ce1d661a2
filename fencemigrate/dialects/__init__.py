"""Everything fencemigrate knows per database, one class per dialect (:mod:`.base`).

Importing the package registers the dialects: :func:`dialect_for` finds PostgreSQL, SQLite and
MySQL (MariaDB too).
"""

from __future__ import annotations

from .base import MODES, PRECHECK, TRANSACTIONAL, Dialect, FenceObject, dialect_for, version_at_least
from .mysql import MysqlDialect
from .postgresql import PostgresqlDialect
from .schema import ensure_installed, installed_version, offline_install_script
from .sqlite import SqliteDialect

__all__ = [
    "MODES",
    "PRECHECK",
    "TRANSACTIONAL",
    "Dialect",
    "FenceObject",
    "dialect_for",
    "ensure_installed",
    "installed_version",
    "MysqlDialect",
    "offline_install_script",
    "PostgresqlDialect",
    "SqliteDialect",
    "version_at_least",
]
