"""fencemigrate: fenced Alembic migrations.

A lease can expire while its holder is paused; the fence in the database makes sure a
stale holder's write is rejected (FENCED) instead of applied.
"""

from .api import downgrade, install, reapply, stamp, state, upgrade
from .config import load_config
from .errors import DatabaseError, Fenced, FencemigrateError, NotTransactional, UsageError

__all__ = [
    "DatabaseError",
    "Fenced",
    "FencemigrateError",
    "NotTransactional",
    "UsageError",
    "downgrade",
    "install",
    "load_config",
    "reapply",
    "stamp",
    "state",
    "upgrade",
]
