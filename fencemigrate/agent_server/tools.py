"""The bodies of the MCP server's tools, each a few lines over the Python API, run one at a time
under the server's own lease (:class:`.lease.ServerLease`).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

import anyio.from_thread
from alembic.config import Config
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult

from .. import api
from ..dialects.waits import LockWait, lock_wait_text
from ..errors import FencemigrateError, LeaseBusy, LeaseLost
from ..fence.state import State
from ..leases import Grant, LeaseStatus
from ..progress import LeaseWait, StepStart
from ..runtime import lease_commands
from ..runtime.environment import database_heads
from ..runtime.outcome import RunOutcome
from ..scrub import redact_file_text, scrub_secrets
from . import files, git_push
from .git_push import BranchRecord, BranchRemote
from .lease import ServerLease
from .results import (
    CheckResult,
    FileText,
    LeaseResult,
    PushResult,
    RunResult,
    StateView,
    WrittenFile,
    error_result,
    ok_result,
)

DRIFT_RULES = ("FM402", "FM403")
"""``check --db``'s drift rules: an applied revision's file changed, or is missing."""


def redacted_diffs(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` (a finding or a check report, as JSON) with every FM402 ``diff``, which quotes
    revision files, redacted as ``read_file`` redacts a file."""

    def shown(value: Any, key: str | None = None) -> Any:
        if isinstance(value, dict):
            return {name: shown(item, name) for name, item in value.items()}
        if isinstance(value, list):
            return [shown(item) for item in value]
        return redact_file_text(value) if key == "diff" and isinstance(value, str) else value

    result: dict[str, Any] = shown(report)
    return result


class ToolProgress:
    """A run's progress as MCP notifications of the tool call: revision n of m, a wait for a lock in
    the database (who holds it), and lease waits as log lines. Best effort: a notification that
    cannot be sent (the client went away) never stops the run."""

    def __init__(self, ctx: Context[Any, Any], on_wait: Callable[[str], None] = lambda text: None) -> None:
        """``on_wait`` hears each report of a wait for the lease or a lock in the database too (its text)."""
        self._ctx = ctx
        self._on_wait = on_wait
        self._position = 0.0  # the progress last reported

    def waiting_for_lease(self, wait: LeaseWait) -> None:
        lease = wait.lease
        text = scrub_secrets(
            f"waiting for the lease on {lease.resource}: held by {lease.holder} with token {lease.token}"
        )
        self._on_wait(text)
        self._send(lambda: self._ctx.info(text))

    def waiting_for_lock(self, wait: LockWait) -> None:
        # Progress must only grow (MCP): each report goes halfway from the last to the next step's number.
        self._position += (int(self._position) + 1 - self._position) / 2
        position, text = self._position, scrub_secrets(lock_wait_text(wait))
        self._on_wait(text)
        self._send(lambda: self._ctx.report_progress(position, None, text))

    def step_started(self, step: StepStart) -> None:
        self._position = float(step.position)
        revisions = ", ".join(step.revisions) or "(version table only)"
        message = f"{step.action} {revisions} ({step.position} of {step.total}) under token {step.token}"
        self._send(lambda: self._ctx.report_progress(step.position, step.total, message))

    @staticmethod
    def _send(notify: Callable[[], Coroutine[Any, Any, None]]) -> None:
        with contextlib.suppress(Exception):
            anyio.from_thread.run(notify)


class ToolBodies:
    """The tools' bodies: the config, the server's lease, and one call at a time."""

    def __init__(self, config: Config, lease: ServerLease) -> None:
        self.config = config
        self.lease = lease
        self.identity = lease.identity
        self._engine_learnt = False  # whether read_file has had env.py connect once
        self._last_view: tuple[StateView, str] | None = None  # the state last shown, and when it was read
        self._waiting: str | None = None  # the running call's last report of a wait for a lock

    def progress(self, ctx: Context[Any, Any]) -> ToolProgress:
        """The progress of the tool call ``ctx``, whose waits for a lock ``read_state`` can tell meanwhile."""
        return ToolProgress(ctx, self._note_wait)

    def _note_wait(self, text: str) -> None:
        self._waiting = text

    def answer(self, body: Callable[[], CallToolResult]) -> CallToolResult:
        """``body``'s result, or its failure as a tool error; FENCED and LEASE_LOST drop the token."""
        with self.lease.calls:
            return self._answer_holding_the_lock(body)

    def _answer_holding_the_lock(self, body: Callable[[], CallToolResult]) -> CallToolResult:
        """:meth:`answer`, its caller holding ``lease.calls``."""
        self._waiting = None
        try:
            return body()
        except FencemigrateError as error:
            if error.outcome.drops_token:
                self.let_go(error)
            return error_result(error, self._retry_after() if isinstance(error, LeaseBusy) else None)
        except Exception as error:  # Alembic's or the project's own, outside what fencemigrate translates
            return error_result(FencemigrateError(f"{type(error).__name__}: {scrub_secrets(str(error)).strip()}"))

    def let_go(self, dropped_by: FencemigrateError | None = None) -> None:
        """Drop the token (after FENCED or LEASE_LOST: ``dropped_by``; or as the server stops). A grant
        still ours (a FENCED file write, push or plan; a server stopping) is released first, best effort,
        so that the lease does not keep other writers off for the rest of its TTL."""
        held = self.lease.grant
        if held is not None and not isinstance(dropped_by, LeaseLost):
            with contextlib.suppress(FencemigrateError):
                api.lease_release(
                    self.config, holder=self.identity.holder, resource=self.identity.resource, token=held.token
                )
        self.lease.forget(dropped_by)

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
            drift=[redacted_diffs(finding.as_json()) for finding in drift.findings],
            notes=notes,
        )

    def shown(self, view: StateView) -> StateView:
        """``view``, about to be shown to the agent: its heads are what the next write expects."""
        self.lease.shown_heads(view.heads)
        self._last_view = (view, datetime.now(UTC).isoformat(timespec="seconds"))
        return view

    def read_state(self) -> CallToolResult:
        """The state read now; while another tool call of this server runs (a write waiting for a
        lock in the database, say), at once: the state last shown, with a note of what that call is
        waiting for, or LEASE_BUSY (transient) when the server has shown none yet. Tools run one at a
        time (they share env.py's process-wide Alembic context), so that note is all that can be read
        meanwhile; the heads the next write expects stay."""
        if self.lease.calls.acquire(blocking=False):
            try:
                return self._answer_holding_the_lock(lambda: ok_result(self.shown(self.view()).model_dump(mode="json")))
            finally:
                self.lease.calls.release()
        last, waiting = self._last_view, self._waiting
        running = "another tool call of this server is still running" + (f" ({waiting})" if waiting else "")
        if last is None:  # the server's first call (acquire_lease waiting for the lease, say): nothing to show yet
            return error_result(
                LeaseBusy(
                    self.identity.resource,
                    None,
                    f"{running}, and this server has read no state yet: call read_state again once it has returned",
                )
            )
        note = (
            f"{running}; this is the state as last read (at {last[1]}), before it began: call read_state "
            "again once it has returned"
        )
        view = last[0].model_copy(update={"notes": [*last[0].notes, note]})
        return ok_result(view.model_dump(mode="json"))

    def check(self, select: list[str] | None, ignore: list[str] | None) -> CallToolResult:
        report = api.check(self.config, db=True, select=select, ignore=ignore)
        return ok_result(CheckResult(report=redacted_diffs(report.as_json())).model_dump(mode="json"))

    # -- the lease -----------------------------------------------------------------------------

    def acquire(self, ttl: str | None, wait: str | None, ctx: Context[Any, Any]) -> CallToolResult:
        grant, fresh = api.lease_acquire(
            self.config,
            holder=self.identity.holder,
            resource=self.identity.resource,
            ttl=ttl if ttl is not None else self.identity.ttl,
            wait=wait,
            progress=self.progress(ctx),
        )
        try:
            records, notes = self._record_branches(grant.token)
            self.lease.granted(grant, records)
            view = self.shown(self.view(fresh, grant.lease))
        except BaseException as failure:  # the agent would not hear of the grant: undo it
            self.lease.forget()
            undone = lease_commands.undo_grant(self.config, None, grant, failure)
            if not isinstance(failure, Exception):
                raise
            raise undone from failure
        view.notes.extend(notes)
        return self._lease_result(grant.as_json(), view)

    def _record_branches(self, token: int) -> tuple[dict[str, BranchRecord], list[str]]:
        """The remote SHA of each --branch, read now (at grant), and what could not be read."""
        where = BranchRemote(self.identity.project_dir, self.identity.remote)
        records, notes = {}, []
        for branch in self.identity.branches:
            try:
                records[branch] = git_push.record_branch(where, branch, token)
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
        held = self.lease.grant
        if held is None:  # nothing to release: dropped after FENCED or LEASE_LOST (and released then), or never held
            return self._lease_result(
                api.lease_status(self.config, resource=self.identity.resource).as_json(), self.view()
            )
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

    def live_grant(self) -> Grant:
        """The server's grant, checked live now (:func:`..runtime.lease_commands.confirm`) before a write that
        no database fence guards, and renewed: FENCED or LEASE_LOST (the token then dropped) when
        a newer grant exists, as ``upgrade`` is refused."""
        renewed = lease_commands.confirm(self.config, self.lease.required())
        self.lease.granted(renewed)
        return renewed

    def push(self, branch: str) -> CallToolResult:
        record = self.lease.branch(branch)
        where = BranchRemote(self.identity.project_dir, self.identity.remote)
        moved = git_push.push_branch(where, record, confirm=self.live_grant)
        self.lease.pushed(moved)
        assert moved.sha is not None
        result = PushResult(
            branch=branch, remote=self.identity.remote, pushed=moved.sha, replaced=record.sha, server_token=record.token
        )
        return ok_result(result.model_dump(mode="json"))

    def read_file(self, path: str) -> CallToolResult:
        allowed = self.identity.read_secret_files
        if not allowed:
            files.refuse_secret_name(path)
        self._learn_engine_password()
        content = files.read_file(self.identity.project_dir, path)
        shown = redact_file_text(content.text)
        redacted = shown != content.text  # its hash would let the redacted text replace the file's
        if redacted and not allowed:
            files.refuse_config_file(self.identity.project_dir, path, self.config.config_file_name)
        result = FileText(path=path, text=shown, sha256=None if redacted else content.sha256, redacted=redacted)
        return ok_result(result.model_dump(mode="json"))

    def _learn_engine_password(self) -> None:
        """Once per server: run env.py (a read of the heads) so that the password of the engine it
        connects with, wherever env.py found it, is known before a file is shown. A database that
        cannot be reached teaches nothing; the config's and the environment's passwords are known anyway."""
        if self._engine_learnt:
            return
        self._engine_learnt = True
        with contextlib.suppress(Exception):
            database_heads(self.config)

    def write_file(self, path: str, content: str, expected_sha256: str) -> CallToolResult:
        token = self.lease.required().token
        written = files.write_file(
            self.identity.project_dir, path, content, expected_sha256, token, confirm=self.live_grant
        )
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
