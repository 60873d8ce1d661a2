"""What the MCP server's tools return: the structured content of each result, and its schema
(each tool's ``outputSchema``); and fencemigrate's outcomes as MCP tool results: an error result
with structured content for each failure (FENCED, LEASE_LOST, LEASE_BUSY, DIRTY, USAGE, ERROR),
written for an agent that talks to this server rather than to the CLI; every string scrubbed of
passwords.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from ..errors import (
    READ_THE_STATE,
    USAGE,
    Fenced,
    FencemigrateError,
    LeaseLost,
    MonotonicGuardRefused,
    UsageError,
    stale_plan,
)
from ..scrub import scrubbed


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
    sha256: str | None = Field(
        description="The hash to pass to write_file as expected_sha256; null when the text was redacted."
    )
    redacted: bool = Field(
        default=False,
        description="The file holds a password, shown as ***: the text is not the file's, so its hash is "
        "withheld and write_file cannot replace the file with it.",
    )


class WrittenFile(BaseModel):
    """What ``write_file`` returns."""

    path: str
    sha256: str = Field(description="The hash of what was written: the one to write with next time.")
    server_token: int


class CheckResult(BaseModel):
    """What ``check`` returns."""

    report: dict[str, Any] = Field(description="Findings, as `fencemigrate check --db --json` prints them.")


READ_STATE_STEP = "call read_state and re-plan from what is actually there"


DROPPED = ("This server has dropped its token: every write tool answers this until a new acquire_lease.",)


def server_stale_plan(next_step: str = READ_STATE_STEP) -> list[str]:
    """What an agent is told after FENCED or LEASE_LOST, in place of the CLI's next step."""
    return stale_plan(f"{next_step}; to write again, call acquire_lease and read the state it returns.", DROPPED)


def error_result(error: FencemigrateError, retry_after: str | None = None) -> CallToolResult:
    """``error`` as a tool error: its agent text in ``content``, its fields in ``structured_content``
    (``error``: the code, ``transient``, ``server_token_dropped``, and the CLI's JSON fields).
    ``retry_after`` (LEASE_BUSY): when the lease expires by the lease service's clock."""
    code = error.outcome.mcp_code
    text = _agent_text(code, error)
    fields: dict[str, Any] = {
        **error.as_json(),
        "error": code,
        "transient": error.outcome.transient,
        "server_token_dropped": error.outcome.drops_token,
        "message": text,
    }
    if error.outcome.transient:
        fields["retry_after"] = retry_after
        if retry_after is not None:
            text += f"\nThe lease expires at {retry_after} by the lease service's clock: call acquire_lease after that."
            fields["message"] = text
    return _result(scrubbed(fields), scrubbed(text), is_error=True)


def usage_result(message: str) -> CallToolResult:
    """A USAGE error for ``message`` (bad arguments, no grant): nothing was changed."""
    return error_result(UsageError(message))


def ok_result(payload: dict[str, Any]) -> CallToolResult:
    """A successful result: ``payload`` as structured content, and as JSON text for clients that
    read only text."""
    clean = scrubbed(payload)
    return _result(clean, json.dumps(clean, sort_keys=True), is_error=False)


def _agent_text(code: str, error: FencemigrateError) -> str:
    """What the agent reads: for FENCED and LEASE_LOST, the error's news (as the CLI says it), then
    what to do next with this server's tools; otherwise the message after its code (DIRTY's already
    starts with it), and for USAGE that nothing was changed."""
    if isinstance(error, Fenced | MonotonicGuardRefused | LeaseLost):
        step = error.next_step if isinstance(error, Fenced) and error.next_step != READ_THE_STATE else None
        return "\n".join([*error.news(), *server_stale_plan(READ_STATE_STEP if step is None else step.rstrip(".;"))])
    if not error.outcome.prefixed:
        return str(error)
    text = f"{code}: {error}"
    return f"{text}\nNothing was changed." if error.outcome is USAGE else text


def _result(structured: dict[str, Any], text: str, is_error: bool) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured, is_error=is_error
    )
