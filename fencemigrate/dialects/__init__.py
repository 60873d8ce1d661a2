"""Everything fencemigrate knows per database, one class per dialect (:mod:`.base`).

:func:`dialect_for` finds PostgreSQL, SQLite and MySQL (MariaDB too), importing the dialect's module
the first time it is asked for it.
"""

from __future__ import annotations

from .base import (
    MODES,
    PRECHECK,
    TRANSACTIONAL,
    Dialect,
    FenceObject,
    dialect_for,
    dialect_named,
    ensure_installed,
    installed_version,
    offline_install_script,
)

__all__ = [
    "MODES",
    "PRECHECK",
    "TRANSACTIONAL",
    "Dialect",
    "FenceObject",
    "dialect_for",
    "dialect_named",
    "ensure_installed",
    "installed_version",
    "offline_install_script",
]
