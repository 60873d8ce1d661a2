"""Start ``fencemigrate mcp`` (or print its rules): the checks made before the SDK is imported.

The ownership rule (:func:`.lease.ownership_rules`) is what a harness pastes into an agent's system
prompt (``mcp --print-rules``): the design notes' rule, adapted to a server that owns the lease
token and the expected heads. The agent never holds either, so it has nothing to carry across a
pause or a context compaction.
"""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config

from ..config import check_holder, checked_resource, parse_ttl_ms
from ..errors import UsageError
from ..runtime.request import McpKeywords, reject_unknown
from .lease import ServerIdentity, ownership_rules

SDK_MISSING = "fencemigrate mcp needs the MCP Python SDK, which is not installed: pip install 'fencemigrate[mcp]'"


def run_server(config: Config, options: McpKeywords) -> str | None:
    """See :func:`fencemigrate.agent_server.mcp`: every argument checked before anything starts."""
    reject_unknown(options, frozenset(McpKeywords.__annotations__))
    ttl = options.get("ttl")
    if ttl is not None:
        parse_ttl_ms(ttl)
    identity = ServerIdentity(
        check_holder(options.get("holder")),
        checked_resource(config, options.get("resource")),
        ttl,
        Path.cwd(),
        tuple(options.get("branches", ())),
        options.get("remote", "origin"),
        options.get("read_secret_files", False),
    )
    if options.get("print_rules", False):
        return ownership_rules(identity.resource)
    try:
        from .server import serve
    except ImportError as missing:
        if missing.name is None or missing.name.split(".")[0] not in ("mcp", "mcp_types"):
            raise
        raise UsageError(SDK_MISSING) from None
    serve(config, identity)
    return None
