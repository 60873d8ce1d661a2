"""fencemigrate's outcomes as MCP tool results: an error result with structured content for each
failure (FENCED, LEASE_LOST, LEASE_BUSY, DIRTY, USAGE, ERROR), written for an agent that talks to
this server rather than to the CLI; every string scrubbed of passwords."""

from __future__ import annotations

import json
from typing import Any

from mcp.types import CallToolResult, TextContent

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
