"""``fencemigrate mcp``: a Model Context Protocol server for coding agents, whose lease token belongs
to the server, not to the agent (docs/mcp.md).

:mod:`.server` needs the ``mcp`` SDK (``pip install 'fencemigrate[mcp]'``) and is imported only when
the server starts; :mod:`.rules` and :mod:`.lease_state` do not.
"""
