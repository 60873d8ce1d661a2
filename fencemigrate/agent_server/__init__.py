"""``fencemigrate mcp``: a Model Context Protocol server for coding agents, whose lease token belongs
to the server, not to the agent (docs/mcp.md).

:mod:`.server` registers the tools and the state resource, :mod:`.tool_bodies` runs them,
:mod:`.results` types what they return, :mod:`.tool_errors` turns refusals into tool errors,
:mod:`.lease_state` keeps the server's grant, :mod:`.rules` is the ownership rule. Those that need
the ``mcp`` SDK (``pip install 'fencemigrate[mcp]'``) are imported only when the server starts;
:mod:`.rules` and :mod:`.lease_state` do not need it.
"""

from __future__ import annotations

from typing import Unpack

from alembic.config import Config

from ..runtime.request import McpKeywords


def mcp(config: Config, **options: Unpack[McpKeywords]) -> str | None:
    """Serve MCP over stdin/stdout until the client closes them: tools that read the state, take,
    renew and release the lease for ``holder`` on ``resource`` (for ``ttl``) and write only under
    that grant, whose token never leaves the server (docs/mcp.md). With ``print_rules``, serve
    nothing and return the ownership rule for an agent's system prompt instead. ``branches``: the
    branches of the project's git repository whose SHA on ``remote`` each grant records, the only
    ones ``push_branch`` pushes. ``write_file`` is confined to the working directory;
    ``read_file`` never returns a password the server knows or recognises, and refuses
    conventionally secret files unless ``read_secret_files``. Needs the
    ``mcp`` SDK: without it a UsageError names ``pip install 'fencemigrate[mcp]'``.
    """
    from .launch import run_server

    return run_server(config, options)
