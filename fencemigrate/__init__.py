"""fencemigrate: fenced Alembic migrations.

A lease can expire while its holder is paused; the fence in the database makes sure a
stale holder's write is rejected (FENCED) instead of applied.

Every command of the command line is a function here with the command's name
(``lease acquire`` is :func:`lease_acquire`), taking a ``Config`` (:func:`load_config`) first.
"""

import sys
from types import ModuleType
from typing import Any

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


class _Package(ModuleType):
    """Keeps the command functions bound to their names when a submodule of the same name
    (``check``, ``state``, ``timeline``) is first imported later: the import system
    would otherwise bind the submodule to the package's attribute in their place."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, ModuleType) and name in __all__:
            return  # the submodule stays reachable in sys.modules (``from fencemigrate.check.rules import ...``)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
