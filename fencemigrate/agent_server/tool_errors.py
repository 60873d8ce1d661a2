"""fencemigrate's outcomes as MCP tool results: an error result with structured content for each
failure (FENCED, LEASE_LOST, LEASE_BUSY, DIRTY, USAGE, ERROR), written for an agent that talks to
this server rather than to the CLI; every string scrubbed of passwords."""

from __future__ import annotations

import json
from typing import Any

from mcp.types import CallToolResult, TextContent

from ..errors import (
    READ_THE_STATE,
    Dirty,
    Fenced,
    FencemigrateError,
    LeaseBusy,
    LeaseLost,
    MonotonicGuardRefused,
    UsageError,
    stale_plan,
)
from ..rendering import scrubbed

FENCED, LEASE_LOST, LEASE_BUSY, DIRTY, USAGE, ERROR = "FENCED", "LEASE_LOST", "LEASE_BUSY", "DIRTY", "USAGE", "ERROR"

READ_STATE_STEP = "call read_state and re-plan from what is actually there"


DROPPED = ("This server has dropped its token: every write tool answers this until a new acquire_lease.",)


def server_stale_plan(next_step: str = READ_STATE_STEP) -> list[str]:
    """What an agent is told after FENCED or LEASE_LOST, in place of the CLI's next step."""
    return stale_plan(f"{next_step}; to write again, call acquire_lease and read the state it returns.", DROPPED)


def drops_token(error: FencemigrateError) -> bool:
    """After this outcome the server forgets its token: FENCED (a newer token has been granted or
    has written, or the write was not the grant's to make) and LEASE_LOST."""
    return isinstance(error, Fenced | MonotonicGuardRefused | LeaseLost)


def code_of(error: FencemigrateError) -> str:
    """The error code an agent branches on."""
    if isinstance(error, Fenced | MonotonicGuardRefused):
        return FENCED
    if isinstance(error, LeaseLost):
        return LEASE_LOST
    if isinstance(error, LeaseBusy):
        return LEASE_BUSY
    if isinstance(error, Dirty):
        return DIRTY
    if isinstance(error, UsageError):
        return USAGE
    return ERROR


def error_result(error: FencemigrateError, retry_after: str | None = None) -> CallToolResult:
    """``error`` as a tool error: its agent text in ``content``, its fields in ``structured_content``
    (``error``: the code, ``transient``, ``server_token_dropped``, and the CLI's JSON fields).
    ``retry_after`` (LEASE_BUSY): when the lease expires by the lease service's clock."""
    code = code_of(error)
    text = _agent_text(code, error)
    fields: dict[str, Any] = {
        **error.as_json(),
        "error": code,
        "transient": code == LEASE_BUSY,
        "server_token_dropped": drops_token(error),
        "message": text,
    }
    if code == LEASE_BUSY:
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
    what to do next with this server's tools."""
    message = str(error)
    if isinstance(error, Fenced | MonotonicGuardRefused | LeaseLost):  # FENCED, LEASE_LOST
        step = error.next_step if isinstance(error, Fenced) and error.next_step != READ_THE_STATE else None
        return "\n".join([*error.news(), *server_stale_plan(READ_STATE_STEP if step is None else step.rstrip(".;"))])
    if code == USAGE:
        return f"USAGE: {message}\nNothing was changed."
    if code == LEASE_BUSY:
        return f"LEASE_BUSY: {message}"
    if code == ERROR:
        return f"ERROR: {message}"
    return message


def _result(structured: dict[str, Any], text: str, is_error: bool) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured, is_error=is_error
    )
