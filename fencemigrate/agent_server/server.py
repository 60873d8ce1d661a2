"""``fencemigrate mcp``: the MCP server over stdio, its tools and its state resource.

Each tool is registered here with its typed arguments and result (:mod:`.results`); its body is in
:mod:`.tools`, a few lines over the Python API. The lease token belongs to this process
(:class:`.lease.ServerLease`): the agent sees its number for the record and never passes one,
so nothing it remembers or summarises can write. Tools run one at a time, on a worker thread of the
SDK's, and report a long run's revisions, and its waits for a lock in the database, as MCP progress
notifications; ``read_state`` answers meanwhile (:meth:`.ToolBodies.read_state`).
"""

from __future__ import annotations

import inspect
import os
import signal
import threading
from collections.abc import Callable
from importlib.metadata import version
from typing import Annotated, Any

from alembic.config import Config
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult, Icon, InputRequiredResult, ToolAnnotations
from pydantic import Field, ValidationError

from .. import api
from ..errors import FencemigrateError
from ..scrub import json_text, scrub_secrets
from .files import remember_server_passwords
from .lease import ServerIdentity, ServerLease, ownership_rules
from .results import CheckResult, FileText, LeaseResult, PushResult, RunResult, StateView, WrittenFile, usage_result
from .tools import ToolBodies

STATE_URI = "fencemigrate://state/{+resource}"
#: Seconds a server stopped by SIGTERM or SIGINT gives the release of its lease before it exits.
STOP_GRACE_S = 10.0

# Longest strings the tools take (Linux NAME_MAX and PATH_MAX; a duration is short): a longer one is
# a USAGE error before anything runs, so no message ever echoes megabytes of an argument.
_NAME_MAX, _PATH_MAX, _DURATION_MAX = 255, 4096, 64

# The tools' arguments (module level: the SDK resolves the annotations in this module's namespace).
_REVISION = Field(description="A revision as in the CLI: head, 0042, +1, base, ...", max_length=_NAME_MAX)
_SQL = Field(description="Dry run: return the SQL script (fence claims included) instead of running it.")

_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
_LEASE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)


class AgentServer(MCPServer[Any]):
    """MCPServer whose argument errors (wrong types, missing or unknown arguments) are USAGE tool
    errors with structured content, like every other refusal of this server; its tools' input
    schemas say so (``additionalProperties: false``), and their descriptions are their docstrings
    without the source's indentation."""

    def add_tool(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        icons: list[Icon] | None = None,
        meta: dict[str, Any] | None = None,
        structured_output: bool | None = None,
    ) -> None:
        description = description or inspect.cleandoc(fn.__doc__ or "")
        super().add_tool(fn, name, title, description, annotations, icons, meta, structured_output)
        added = self._tool_manager.get_tool(name or fn.__name__)
        assert added is not None
        added.parameters["additionalProperties"] = False

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        # The SDK's argument models ignore names they do not know: an argument the agent believes
        # does something (token, force, dry_run) would be dropped in silence.
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            known = tool.parameters.get("properties", {})
            unknown = [argument for argument in arguments if argument not in known]
            if unknown:
                takes = ", ".join(known) or "no arguments"
                named = ", ".join(repr(argument[:_NAME_MAX]) for argument in unknown[:5])
                return usage_result(f"bad arguments for {name}: unknown argument {named} ({name} takes {takes})")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            if not isinstance(error.__cause__, ValidationError):
                raise
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or '(arguments)'}: {problem['msg']}"
                for problem in error.__cause__.errors()
            )
            return usage_result(f"bad arguments for {name}: {problems}")


def build_server(config: Config, lease: ServerLease) -> AgentServer:
    """The server for ``lease``'s identity, with its tools and its state resource registered."""
    tools = ToolBodies(config, lease)
    identity = lease.identity
    server = AgentServer(
        "fencemigrate",
        version=version("fencemigrate"),
        instructions=ownership_rules(identity.resource),
        log_level="WARNING",
    )

    @server.tool(annotations=_READ)
    def read_state() -> Annotated[CallToolResult, StateView]:
        """Read the resource now: heads, fence rows, ledger, dirty revisions, the live lease by the lease
        service's clock, and revision files that differ from what was applied. Plan from this, never
        from memory. Read only: never takes a lease. While another call (a write) is still running, it
        answers at once with the state last read and a note of what that call waits for."""
        return tools.read_state()

    @server.tool(annotations=_LEASE)
    def acquire_lease(
        ctx: Context[Any, Any],
        ttl: Annotated[
            str | None,
            Field(description="Time to live, e.g. 30s, 5m (default: the server's --ttl).", max_length=_DURATION_MAX),
        ] = None,
        wait: Annotated[
            str | None,
            Field(description="How long to wait while another holder has it (default 0s).", max_length=_DURATION_MAX),
        ] = None,
    ) -> Annotated[CallToolResult, LeaseResult]:
        """Grant the lease to this server's holder with a new token (every older holder is fenced from
        now on). The token stays in the server; the result shows its number for the record and comes
        with a fresh read_state: plan from that state. Required before any write tool."""
        return tools.answer(lambda: tools.acquire(ttl, wait, ctx))

    @server.tool(annotations=_LEASE)
    def renew_lease(
        ttl: Annotated[
            str | None,
            Field(description="New time to live from now (default: the lease's own).", max_length=_DURATION_MAX),
        ] = None,
    ) -> Annotated[CallToolResult, LeaseResult]:
        """Extend this server's lease; LEASE_LOST (the server drops its token) if it was granted to
        someone else meanwhile. Comes with a fresh read_state."""
        return tools.answer(lambda: tools.renew(ttl))

    @server.tool(annotations=_LEASE)
    def release_lease() -> Annotated[CallToolResult, LeaseResult]:
        """Free this server's lease; the server drops its token. Comes with a fresh read_state."""
        return tools.answer(tools.release)

    @server.tool(annotations=_WRITE)
    def upgrade(
        ctx: Context[Any, Any], revision: Annotated[str, _REVISION], sql: Annotated[bool, _SQL] = False
    ) -> Annotated[CallToolResult, RunResult]:
        """Upgrade to REVISION under this server's own grant, every step claiming the fence first.
        Progress notifications name each revision (n of m); the lease is renewed between revisions."""
        return tools.answer(
            lambda: tools.write(
                lambda grant, heads: api.upgrade(
                    config, revision, held_lease=grant, expect_heads=heads, sql=sql, progress=tools.progress(ctx)
                ),
                sql,
            )
        )

    @server.tool(annotations=_WRITE)
    def downgrade(
        ctx: Context[Any, Any], revision: Annotated[str, _REVISION], sql: Annotated[bool, _SQL] = False
    ) -> Annotated[CallToolResult, RunResult]:
        """Downgrade to REVISION under this server's own grant (with sql: a range FROM:TO)."""
        return tools.answer(
            lambda: tools.write(
                lambda grant, heads: api.downgrade(
                    config, revision, held_lease=grant, expect_heads=heads, sql=sql, progress=tools.progress(ctx)
                ),
                sql,
            )
        )

    @server.tool(annotations=_WRITE)
    def reapply(ctx: Context[Any, Any], revision: Annotated[str, _REVISION]) -> Annotated[CallToolResult, RunResult]:
        """Roll REVISION back and apply it again, in one transaction; only a revision applied under this
        server's current grant (anything else is FENCED)."""
        return tools.answer(
            lambda: tools.write(
                lambda grant, heads: api.reapply(
                    config, revision, held_lease=grant, expect_heads=heads, progress=tools.progress(ctx)
                ),
                False,
            )
        )

    @server.tool(annotations=_WRITE)
    def stamp(
        ctx: Context[Any, Any],
        revisions: Annotated[list[str], Field(description="The revisions to stamp, as in the CLI.", min_length=1)],
        sql: Annotated[bool, _SQL] = False,
        purge: Annotated[bool, Field(description="Empty the version table (and its ledger) first.")] = False,
    ) -> Annotated[CallToolResult, RunResult]:
        """Set the version table to REVISIONS without running migrations, under this server's own grant."""
        return tools.answer(
            lambda: tools.write(
                lambda grant, heads: api.stamp(
                    config,
                    tuple(revisions),
                    purge=purge,
                    held_lease=grant,
                    expect_heads=heads,
                    sql=sql,
                    progress=tools.progress(ctx),
                ),
                sql,
            )
        )

    @server.tool(annotations=_READ)
    def check(
        select: Annotated[list[str] | None, Field(description="Only these rules (ids or names).")] = None,
        ignore: Annotated[list[str] | None, Field(description="Leave these rules out.")] = None,
    ) -> Annotated[CallToolResult, CheckResult]:
        """Lint the revision files and compare them with the database (`fencemigrate check --db`):
        structured findings with rule, file, line, message and fix. Read only."""
        return tools.answer(lambda: tools.check(select, ignore))

    @server.tool(annotations=_WRITE)
    def push_branch(
        branch: Annotated[
            str, Field(description="A branch the server recorded at grant (its --branch).", max_length=_NAME_MAX)
        ],
    ) -> Annotated[CallToolResult, PushResult]:
        """Push the project repository's local BRANCH to the remote as a fast-forward only: the
        server's grant must still be the live one, the remote's branch still at the SHA recorded when
        the lease was granted (or moved by this server's own pushes), and your branch must contain
        it. Never rewinds the remote. FENCED (git:BRANCH) if anyone pushed since, if the remote has
        commits your branch does not have, or if a newer grant exists: the remote is unchanged."""
        return tools.answer(lambda: tools.push(branch))

    @server.tool(annotations=_READ)
    def read_file(
        path: Annotated[
            str, Field(description="A file's path relative to the project's directory.", max_length=_PATH_MAX)
        ],
    ) -> Annotated[CallToolResult, FileText]:
        """Read a project file: its text and the sha256 to write it back with. Read only. Never shows a
        password: those the server knows (its database's and lease service's, its config's and
        environment's) and any password-like value (URLs, DB_PASS=, PGPASSWORD, password: in YAML,
        JSON or ini) come back as *** with redacted true and no sha256. Files that conventionally
        hold secrets (.env and any .env* name, .pgpass, .my.cnf, .netrc, _netrc, .git-credentials; in any case) and the
        server's config file when it holds a password are refused (USAGE), unless the server was
        started with --read-secret-files."""
        return tools.answer(lambda: tools.read_file(path))

    @server.tool(annotations=_WRITE)
    def write_file(
        path: Annotated[
            str, Field(description="A file's path relative to the project's directory.", max_length=_PATH_MAX)
        ],
        content: Annotated[str, Field(description="The file's new text (UTF-8), in full.")],
        expected_sha256: Annotated[
            str, Field(description="The sha256 read_file returned, or 'absent' for a file that must not exist yet.")
        ],
    ) -> Annotated[CallToolResult, WrittenFile]:
        """Replace a project file atomically, under this server's grant, only if it still has the hash
        you read it with: FENCED (file:PATH) if it changed since. Paths outside the project are refused."""
        return tools.answer(lambda: tools.write_file(path, content, expected_sha256))

    @server.resource(STATE_URI, name="state", mime_type="application/json")
    def state_resource(resource: str) -> str:
        """The same content as read_state, for harnesses that re-inject the live lease status (after a
        context compaction, say) instead of trusting a summary."""
        if resource != identity.resource:
            raise ResourceError(f"this server serves {identity.resource}, not {resource}")
        with tools.lease.calls:
            try:
                return json_text(tools.view().model_dump(mode="json"))
            except FencemigrateError as error:
                raise ResourceError(scrub_secrets(str(error))) from None

    return server


def serve(config: Config, identity: ServerIdentity) -> None:
    """Serve MCP over stdin/stdout until the client closes them or a SIGTERM/SIGINT stops the server;
    then release the lease it holds, so that it does not keep other writers off for its TTL."""
    remember_server_passwords()
    lease = ServerLease(identity)
    tools = ToolBodies(config, lease)

    def stop(signum: int, _frame: object) -> None:
        # The SDK's stdin reader is a thread blocked in read(): an orderly shutdown of the event loop
        # would wait for the client to close stdin. Release (bounded), then end the process at once.
        releasing = threading.Thread(target=tools.let_go, daemon=True)
        releasing.start()
        releasing.join(STOP_GRACE_S)
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    try:
        build_server(config, lease).run("stdio")
    finally:
        tools.let_go()
