"""Start ``fencemigrate mcp`` (or print its rules): the checks made before the SDK is imported.

The ownership rule (:func:`ownership_rules`) is what a harness pastes into an agent's system
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
from .lease import ServerIdentity

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


def ownership_rules(resource: str) -> str:
    """The rule for an agent that migrates ``resource`` through this MCP server."""
    return f"""\
Ownership rule for {resource} (fencemigrate MCP server)

The fencemigrate server owns the lease token for {resource} and the heads your plan was made
from. You never hold a token: the server does, and it writes only under its own explicit grant.

1. Before you plan, call read_state (or read the resource fencemigrate://state/{resource}) and plan
   from what it returns, never from memory or from a context summary.
2. To write, call acquire_lease first and read the state it returns: a new lease comes with a fresh
   look at the world. upgrade, downgrade, reapply, stamp, push_branch and write_file refuse to run
   without the server's live grant; no tool takes a lease and writes in one step.
3. A FENCED error means time passed without you noticing and someone else changed {resource}.
   The server has dropped its token. (1) Stop the current plan. (2) Discard any belief that you
   hold a lease or a lock. (3) Call read_state and re-read anything you were about to write that
   depends on it. (4) Make a new plan from that fresh state; if the goal is already met, report
   that and stop. To write again you must call acquire_lease. Never treat FENCED as a merge
   conflict or a flaky failure: do not retry, rebase, renumber or re-apply.
4. LEASE_LOST is the same news as FENCED: do what rule 3 says.
5. LEASE_BUSY is transient: another live holder has the lease; wait until the time it names, then
   call acquire_lease again. DIRTY needs a person, or you, to compare the schema with the revision
   first. USAGE means the call itself was wrong, and nothing changed.
6. Never write a token number, "I hold the lease" or "holds lock on ..." into your notes, plans or
   summaries. Whether a lease is held is what read_state says now, not what you remember.
"""
