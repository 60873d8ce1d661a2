"""``fencemigrate mcp``: a Model Context Protocol server for coding agents, whose lease token belongs
to the server, not to the agent (docs/mcp.md).

:mod:`.launch` checks the options and holds the ownership rule, :mod:`.server` registers the tools
and the state resource, :mod:`.tools` runs them, :mod:`.results` types what they return and turns
refusals into tool errors, :mod:`.lease` keeps the server's grant. Those that need the ``mcp`` SDK
(``pip install 'fencemigrate[mcp]'``: :mod:`.server`, :mod:`.tools`, :mod:`.results`) are
imported only when the server starts; :mod:`.launch` and :mod:`.lease` do not need it.

The server's writes besides the database's are fenced too: a push to the migration branch
(:mod:`.git_push`) and a write to a project file (:mod:`.files`). Each is a compare-and-swap whose
expected value the agent cannot pick: the branch's SHA recorded when the lease was granted, the
hash of the file as the agent read it. A write whose expected value no longer holds is
:class:`~fencemigrate.errors.Fenced`. A push is a fast-forward of the recorded SHA or nothing. Each
takes a ``confirm`` callback, called before the compare-and-swap, with which the server checks
that its grant is still the live one.
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
