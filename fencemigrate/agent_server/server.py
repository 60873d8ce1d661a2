"""``fencemigrate mcp``: the MCP server over stdio, its tools and its state resource.

Each tool is a few lines over the Python API. The lease token belongs to this process
(:class:`.lease_state.ServerLease`): the agent sees its number for the record and never passes one,
so nothing it remembers or summarises can write. Tools run one at a time, on a worker thread of the
SDK's, and report a long run's revisions as MCP progress notifications.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Coroutine
from typing import Annotated, Any

import anyio.from_thread
from alembic.config import Config
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from .. import api
from ..errors import FencemigrateError, LeaseBusy
from ..fenced_writes import git_branch, project_files
from ..fenced_writes.git_branch import BranchRecord, BranchRemote
from ..leases import Grant, LeaseStatus
from ..progress import LeaseWait, StepStart
from ..rendering import json_text
from ..runtime.outcome import RunOutcome
from ..scrub import scrub_secrets
from ..state import State
from .lease_state import ServerIdentity, ServerLease
from .rules import ownership_rules
from .tool_errors import drops_token, error_result, ok_result, usage_result

DRIFT_RULES = ("FM402", "FM403")
"""``check --db``'s drift rules: an applied revision's file changed, or is missing."""

STATE_URI = "fencemigrate://state/{+resource}"

# The tools' arguments (module level: the SDK resolves the annotations in this module's namespace).
_REVISION = Field(description="A revision as in the CLI: head, 0042, +1, base, ...")
_SQL = Field(description="Dry run: return the SQL script (fence claims included) instead of running it.")

_READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
_LEASE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)


class StateView(BaseModel):
    """What ``read_state`` returns (and the state resource, and every lease tool)."""

    resource: str = Field(description="The fenced resource this server writes to.")
    holder: str = Field(description="This server's holder name.")
    server_token: int | None = Field(
        description="The token of this server's own grant, for the record only (you never pass it); "
        "null: the server holds no lease and writes nothing."
    )
    heads: list[str] = Field(description="The database's heads now.")
    lease: dict[str, Any] = Field(description="The live lease, by the lease service's clock.")
    state: dict[str, Any] = Field(description="Fence rows, ledger, dirty revisions (as `fencemigrate state --json`).")
    drift: list[dict[str, Any]] = Field(
        description="Revision files that differ from what was applied, or are missing (check rules FM402, FM403)."
    )
    notes: list[str] = Field(description="What changed for this server's grant, in words.")


class LeaseResult(BaseModel):
    """What ``acquire_lease``, ``renew_lease`` and ``release_lease`` return."""

    lease: dict[str, Any] = Field(description="The grant (or, after a release, the lease's status).")
    server_token: int | None = Field(description="This server's token now, for the record; null after a release.")
    branches: list[dict[str, Any]] = Field(
        description="The branches recorded at this grant (--branch): push_branch expects the remote at these SHAs."
    )
    state: StateView = Field(description="A fresh read_state: plan from this.")


class RunResult(BaseModel):
    """What ``upgrade``, ``downgrade``, ``reapply`` and ``stamp`` return."""

    outcome: dict[str, Any] = Field(description="The run, as `fencemigrate upgrade --json` prints it.")
    heads: list[str] | None = Field(description="The heads after the run (after the script, with sql).")
    expected_heads: list[str] | None = Field(
        description="The heads the run required when it claimed: those of the last state you were shown "
        "(read_state, acquire_lease, renew_lease) or of this server's last write; null with sql."
    )
    server_token: int | None = Field(description="This server's token, for the record.")
    sql: str | None = Field(description="With sql=true: the script, fence claims included; nothing was run.")


class PushResult(BaseModel):
    """What ``push_branch`` returns."""

    branch: str
    remote: str
    pushed: str = Field(description="The commit the remote's branch is at now (this server's push).")
    replaced: str | None = Field(description="What the remote had, as recorded (null: the branch did not exist).")
    server_token: int


class FileText(BaseModel):
    """What ``read_file`` returns."""

    path: str
    text: str
    sha256: str = Field(description="The hash to pass to write_file as expected_sha256.")


class WrittenFile(BaseModel):
    """What ``write_file`` returns."""

    path: str
    sha256: str = Field(description="The hash of what was written: the one to write with next time.")
    server_token: int


class CheckResult(BaseModel):
    """What ``check`` returns."""

    report: dict[str, Any] = Field(description="Findings, as `fencemigrate check --db --json` prints them.")


class _ToolProgress:
    """A run's progress as MCP notifications of the tool call: revision n of m, and lease waits as log
    lines. Best effort: a notification that cannot be sent (the client went away) never stops the run."""

    def __init__(self, ctx: Context[Any, Any]) -> None:
        self._ctx = ctx

    def waiting_for_lease(self, wait: LeaseWait) -> None:
        lease = wait.lease
        text = f"waiting for the lease on {lease.resource}: held by {lease.holder} with token {lease.token}"
        self._send(lambda: self._ctx.info(scrub_secrets(text)))

    def step_started(self, step: StepStart) -> None:
        revisions = ", ".join(step.revisions) or "(version table only)"
        message = f"{step.action} {revisions} ({step.position} of {step.total}) under token {step.token}"
        self._send(lambda: self._ctx.report_progress(step.position, step.total, message))

    @staticmethod
    def _send(notify: Callable[[], Coroutine[Any, Any, None]]) -> None:
        with contextlib.suppress(Exception):
            anyio.from_thread.run(notify)


class _Tools:
    """The tools' bodies: the config, the server's lease, and one call at a time."""

    def __init__(self, config: Config, lease: ServerLease) -> None:
        self.config = config
        self.lease = lease
        self.identity = lease.identity

    def call(self, body: Callable[[], CallToolResult]) -> CallToolResult:
        """``body``'s result, or its failure as a tool error; FENCED and LEASE_LOST drop the token."""
        with self.lease.calls:
            try:
                return body()
            except FencemigrateError as error:
                if drops_token(error):
                    self.lease.forget(error)
                return error_result(error, self._retry_after() if isinstance(error, LeaseBusy) else None)
            except Exception as error:  # Alembic's or the project's own, outside what fencemigrate translates
                return error_result(FencemigrateError(f"{type(error).__name__}: {scrub_secrets(str(error)).strip()}"))

    def _retry_after(self) -> str | None:
        """When the busy lease expires, by the lease service's clock (None when it cannot be read)."""
        try:
            status = api.lease_status(self.config, resource=self.identity.resource)
        except FencemigrateError:
            return None
        return None if status.expires_at is None else status.expires_at.isoformat()

    # -- reads ---------------------------------------------------------------------------------

    def view(self, fresh: State | None = None, lease: LeaseStatus | None = None) -> StateView:
        """Heads, fences, ledger, dirty revisions, the live lease and drift, read now (``fresh``
        and ``lease``: already read). A fence schema not yet installed is not installed by a read."""
        resource = self.identity.resource
        state = fresh if fresh is not None else api.state(self.config)
        if lease is None:
            installed = state.fence_schema_version is not None
            lease = api.lease_status(self.config, resource=resource) if installed else LeaseStatus(resource, None, 0)
        notes = []
        held = self.lease.grant
        if held is not None and self.lease.superseded_by(lease):
            notes.append(
                f"this server's grant (token {held.token}) is gone: the lease service has issued token {lease.token} "
                "since; the server has dropped its token. Re-plan from this state; call acquire_lease to write again."
            )
        drift = api.check(self.config, db=True, select=DRIFT_RULES)
        current = self.lease.grant
        return StateView(
            resource=resource,
            holder=self.identity.holder,
            server_token=None if current is None else current.token,
            heads=list(state.heads),
            lease=lease.as_json(),
            state=state.as_json(),
            drift=[finding.as_json() for finding in drift.findings],
            notes=notes,
        )

    def shown(self, view: StateView) -> StateView:
        """``view``, about to be shown to the agent: its heads are what the next write expects."""
        self.lease.shown_heads(view.heads)
        return view

    def read_state(self) -> CallToolResult:
        return ok_result(self.shown(self.view()).model_dump(mode="json"))

    def check(self, select: list[str] | None, ignore: list[str] | None) -> CallToolResult:
        report = api.check(self.config, db=True, select=select, ignore=ignore)
        return ok_result(CheckResult(report=report.as_json()).model_dump(mode="json"))

    # -- the lease -----------------------------------------------------------------------------

    def acquire(self, ttl: str | None, wait: str | None, ctx: Context[Any, Any]) -> CallToolResult:
        grant, fresh = api.lease_acquire(
            self.config,
            holder=self.identity.holder,
            resource=self.identity.resource,
            ttl=ttl if ttl is not None else self.identity.ttl,
            wait=wait,
            progress=_ToolProgress(ctx),
        )
        records, notes = self._record_branches(grant.token)
        self.lease.granted(grant, records)
        view = self.shown(self.view(fresh, grant.lease))
        view.notes.extend(notes)
        return self._lease_result(grant.as_json(), view)

    def _record_branches(self, token: int) -> tuple[dict[str, BranchRecord], list[str]]:
        """The remote SHA of each --branch, read now (at grant), and what could not be read."""
        where = BranchRemote(self.identity.project_dir, self.identity.remote)
        records, notes = {}, []
        for branch in self.identity.branches:
            try:
                records[branch] = git_branch.record_branch(where, branch, token)
            except FencemigrateError as error:
                notes.append(f"branch {branch} was not recorded ({error}); push_branch refuses it until the next grant")
        return records, notes

    def renew(self, ttl: str | None) -> CallToolResult:
        held = self.lease.required()
        renewed = api.lease_renew(
            self.config, holder=self.identity.holder, resource=self.identity.resource, token=held.token, ttl=ttl
        )
        self.lease.granted(renewed)
        return self._lease_result(renewed.as_json(), self.shown(self.view(lease=renewed.lease)))

    def release(self) -> CallToolResult:
        held = self.lease.required()
        try:
            status = api.lease_release(
                self.config, holder=self.identity.holder, resource=self.identity.resource, token=held.token
            )
        finally:
            self.lease.forget()
        return self._lease_result(status.as_json(), self.view(lease=status))

    def _lease_result(self, lease: dict[str, Any], view: StateView) -> CallToolResult:
        token = None if self.lease.grant is None else self.lease.grant.token
        branches = [{"branch": record.branch, "sha": record.sha} for record in self.lease.branch_records]
        result = LeaseResult(lease=lease, server_token=token, branches=branches, state=view)
        return ok_result(result.model_dump(mode="json"))

    # -- the branch and the files ----------------------------------------------------------------

    def push(self, branch: str) -> CallToolResult:
        record = self.lease.branch(branch)
        moved = git_branch.push_branch(BranchRemote(self.identity.project_dir, self.identity.remote), record)
        self.lease.pushed(moved)
        assert moved.sha is not None
        result = PushResult(
            branch=branch, remote=self.identity.remote, pushed=moved.sha, replaced=record.sha, server_token=record.token
        )
        return ok_result(result.model_dump(mode="json"))

    def read_file(self, path: str) -> CallToolResult:
        content = project_files.read_file(self.identity.project_dir, path)
        return ok_result(FileText(path=path, text=content.text, sha256=content.sha256).model_dump(mode="json"))

    def write_file(self, path: str, content: str, expected_sha256: str) -> CallToolResult:
        token = self.lease.required().token
        written = project_files.write_file(self.identity.project_dir, path, content, expected_sha256, token)
        return ok_result(WrittenFile(path=path, sha256=written, server_token=token).model_dump(mode="json"))

    # -- writes --------------------------------------------------------------------------------

    def write(self, run: Callable[[Grant, list[str] | None], RunOutcome], sql: bool) -> CallToolResult:
        """``run`` under the server's own grant (a USAGE error without one), expecting the heads of
        the last state the agent was shown (FENCED if they moved); with ``sql`` the script is
        returned, not printed (stdout is the protocol's), and no heads are expected (an offline
        script reads none). The server's own write moves the expected heads to the new ones."""
        grant = self.lease.required()
        expected = None if sql else self.lease.expected_heads
        script = io.StringIO() if sql else None
        self.config.output_buffer = script
        try:
            outcome = run(grant, expected)
        finally:
            self.config.output_buffer = None
        if not sql and outcome.heads is not None:
            self.lease.shown_heads(outcome.heads)
        result = RunResult(
            outcome=outcome.as_json(),
            heads=outcome.heads,
            expected_heads=expected,
            server_token=grant.token,
            sql=None if script is None else script.getvalue(),
        )
        return ok_result(result.model_dump(mode="json"))


class AgentServer(MCPServer[Any]):
    """MCPServer whose argument errors (wrong types, missing arguments) are USAGE tool errors with
    structured content, like every other refusal of this server."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
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


def build_server(config: Config, identity: ServerIdentity) -> AgentServer:
    """The server for ``identity``, with its tools and its state resource registered."""
    tools = _Tools(config, ServerLease(identity))
    server = AgentServer("fencemigrate", instructions=ownership_rules(identity.resource), log_level="WARNING")

    @server.tool(annotations=_READ)
    def read_state() -> Annotated[CallToolResult, StateView]:
        """Read the resource now: heads, fence rows, ledger, dirty revisions, the live lease by the lease
        service's clock, and revision files that differ from what was applied. Plan from this, never
        from memory. Read only: never takes a lease."""
        return tools.call(tools.read_state)

    @server.tool(annotations=_LEASE)
    def acquire_lease(
        ctx: Context[Any, Any],
        ttl: Annotated[
            str | None, Field(description="Time to live, e.g. 30s, 5m (default: the server's --ttl).")
        ] = None,
        wait: Annotated[
            str | None, Field(description="How long to wait while another holder has it (default 0s).")
        ] = None,
    ) -> Annotated[CallToolResult, LeaseResult]:
        """Grant the lease to this server's holder with a new token (every older holder is fenced from
        now on). The token stays in the server; the result shows its number for the record and comes
        with a fresh read_state: plan from that state. Required before any write tool."""
        return tools.call(lambda: tools.acquire(ttl, wait, ctx))

    @server.tool(annotations=_LEASE)
    def renew_lease(
        ttl: Annotated[str | None, Field(description="New time to live from now (default: the lease's own).")] = None,
    ) -> Annotated[CallToolResult, LeaseResult]:
        """Extend this server's lease; LEASE_LOST (the server drops its token) if it was granted to
        someone else meanwhile. Comes with a fresh read_state."""
        return tools.call(lambda: tools.renew(ttl))

    @server.tool(annotations=_LEASE)
    def release_lease() -> Annotated[CallToolResult, LeaseResult]:
        """Free this server's lease; the server drops its token. Comes with a fresh read_state."""
        return tools.call(tools.release)

    @server.tool(annotations=_WRITE)
    def upgrade(
        ctx: Context[Any, Any], revision: Annotated[str, _REVISION], sql: Annotated[bool, _SQL] = False
    ) -> Annotated[CallToolResult, RunResult]:
        """Upgrade to REVISION under this server's own grant, every step claiming the fence first.
        Progress notifications name each revision (n of m); the lease is renewed between revisions."""
        return tools.call(
            lambda: tools.write(
                lambda grant, heads: api.upgrade(
                    config, revision, held_lease=grant, expect_heads=heads, sql=sql, progress=_ToolProgress(ctx)
                ),
                sql,
            )
        )

    @server.tool(annotations=_WRITE)
    def downgrade(
        ctx: Context[Any, Any], revision: Annotated[str, _REVISION], sql: Annotated[bool, _SQL] = False
    ) -> Annotated[CallToolResult, RunResult]:
        """Downgrade to REVISION under this server's own grant (with sql: a range FROM:TO)."""
        return tools.call(
            lambda: tools.write(
                lambda grant, heads: api.downgrade(
                    config, revision, held_lease=grant, expect_heads=heads, sql=sql, progress=_ToolProgress(ctx)
                ),
                sql,
            )
        )

    @server.tool(annotations=_WRITE)
    def reapply(ctx: Context[Any, Any], revision: Annotated[str, _REVISION]) -> Annotated[CallToolResult, RunResult]:
        """Roll REVISION back and apply it again, in one transaction; only a revision applied under this
        server's current grant (anything else is FENCED)."""
        return tools.call(
            lambda: tools.write(
                lambda grant, heads: api.reapply(
                    config, revision, held_lease=grant, expect_heads=heads, progress=_ToolProgress(ctx)
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
        return tools.call(
            lambda: tools.write(
                lambda grant, heads: api.stamp(
                    config,
                    tuple(revisions),
                    purge=purge,
                    held_lease=grant,
                    expect_heads=heads,
                    sql=sql,
                    progress=_ToolProgress(ctx),
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
        return tools.call(lambda: tools.check(select, ignore))

    @server.tool(annotations=_WRITE)
    def push_branch(
        branch: Annotated[str, Field(description="A branch the server recorded at grant (its --branch).")],
    ) -> Annotated[CallToolResult, PushResult]:
        """Push the project repository's local BRANCH to the remote, only if the remote's branch is
        still at the SHA the server recorded when it granted its lease (--force-with-lease against
        that SHA; never --force). FENCED (git:BRANCH) if anyone pushed since: the remote is unchanged."""
        return tools.call(lambda: tools.push(branch))

    @server.tool(annotations=_READ)
    def read_file(
        path: Annotated[str, Field(description="A file's path relative to the project's directory.")],
    ) -> Annotated[CallToolResult, FileText]:
        """Read a project file: its text and the sha256 to write it back with. Read only."""
        return tools.call(lambda: tools.read_file(path))

    @server.tool(annotations=_WRITE)
    def write_file(
        path: Annotated[str, Field(description="A file's path relative to the project's directory.")],
        content: Annotated[str, Field(description="The file's new text (UTF-8), in full.")],
        expected_sha256: Annotated[
            str, Field(description="The sha256 read_file returned, or 'absent' for a file that must not exist yet.")
        ],
    ) -> Annotated[CallToolResult, WrittenFile]:
        """Replace a project file atomically, under this server's grant, only if it still has the hash
        you read it with: FENCED (file:PATH) if it changed since. Paths outside the project are refused."""
        return tools.call(lambda: tools.write_file(path, content, expected_sha256))

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
    """Serve MCP over stdin/stdout until the client closes them."""
    build_server(config, identity).run("stdio")
