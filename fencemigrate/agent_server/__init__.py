"""``fencemigrate mcp``: a Model Context Protocol server for coding agents, whose lease token belongs
to the server, not to the agent (docs/mcp.md).

:mod:`.server` registers the tools and the state resource, :mod:`.tool_bodies` runs them,
:mod:`.results` types what they return, :mod:`.tool_errors` turns refusals into tool errors,
:mod:`.lease_state` keeps the server's grant, :mod:`.rules` is the ownership rule. Those that need
the ``mcp`` SDK (``pip install 'fencemigrate[mcp]'``) are imported only when the server starts;
:mod:`.rules` and :mod:`.lease_state` do not need it.
"""
