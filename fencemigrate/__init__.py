"""fencemigrate: fenced Alembic migrations.

A lease can expire while its holder is paused; the fence in the database makes sure a
stale holder's write is rejected (FENCED) instead of applied.

Every command of the command line is a function here with the command's name
(``lease acquire`` is :func:`lease_acquire`), taking a ``Config`` (:func:`load_config`) first.
"""

from .agent_server import mcp
from .api import (
    branches,
    check,
    current,
    downgrade,
    edit,
    ensure_version,
    heads,
    history,
    init,
    install,
    lease_acquire,
    lease_detach,
    lease_release,
    lease_renew,
    lease_status,
    list_templates,
    merge,
    reapply,
    resolve,
    revision,
    show,
    stamp,
    state,
    timeline,
    upgrade,
)
from .config import load_config
from .errors import DatabaseError, Fenced, FencemigrateError, NotTransactional, UsageError
from .examples import demo

__all__ = [
    "DatabaseError",
    "Fenced",
    "FencemigrateError",
    "NotTransactional",
    "UsageError",
    "branches",
    "check",
    "current",
    "demo",
    "downgrade",
    "edit",
    "ensure_version",
    "heads",
    "history",
    "init",
    "install",
    "lease_acquire",
    "lease_detach",
    "lease_release",
    "lease_renew",
    "lease_status",
    "list_templates",
    "load_config",
    "mcp",
    "merge",
    "reapply",
    "resolve",
    "revision",
    "show",
    "stamp",
    "state",
    "timeline",
    "upgrade",
]
