"""The modules that do the work of the API's commands other than the fenced ones, each imported
when its command first runs (:mod:`.lazy_modules`): ``fencemigrate upgrade`` starts without the
authoring, the lint rules, the lease calls, the state reader, the demo or the MCP server.

:mod:`.api` imports them from here; static checkers and import-linter see them imported as usual.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from .lazy_modules import lazy_modules

__all__ = [
    "authoring",
    "database_reads",
    "env_reads",
    "incident_demo",
    "installation",
    "launch",
    "lease_calls",
    "project_check",
    "resolve_command",
    "revision_commands",
]

if TYPE_CHECKING:
    from . import authoring as authoring
    from . import database_reads as database_reads
    from . import demo as incident_demo
    from . import installation as installation
    from . import lease_calls as lease_calls
    from . import project_check as project_check
    from . import revision_commands as revision_commands
    from .agent_server import launch as launch
    from .runtime import env_reads as env_reads
    from .runtime import resolve_command as resolve_command
else:
    authoring, database_reads, incident_demo, installation, lease_calls = lazy_modules(
        __package__, "authoring", "database_reads", "demo", "installation", "lease_calls"
    )
    project_check, revision_commands, launch, env_reads, resolve_command = lazy_modules(
        __package__,
        "project_check",
        "revision_commands",
        "agent_server.launch",
        "runtime.env_reads",
        "runtime.resolve_command",
    )


def load_all() -> None:
    """Run the code of every module here now. For a process that calls commands from more than one
    thread (the MCP server and its stop handler): importlib's LazyLoader is not thread-safe before
    Python 3.12."""
    for name in __all__:
        import_module(globals()[name].__name__)
