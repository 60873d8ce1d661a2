"""The event log as a postmortem reads it: ``fencemigrate timeline``, one line per event, oldest first."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from alembic.runtime.migration import MigrationContext

from ..config import format_duration, parse_duration_ms
from ..dialects import dialect_for, installed_version
from ..dialects.statements import statement
from ..errors import UsageError

_LONGEST_SINCE_MS = 876_000 * 3_600_000  # 100 years: further back, give a date-time
_KIND_WIDTH = len("ROLLBACK")


@dataclass(frozen=True)
class Since:
    """Where a timeline starts: a moment (UTC), or a duration back from the database's now."""

    moment: datetime | None = None
    ago_ms: int | None = None


@dataclass(frozen=True)
class Event:
    """One row of the event log."""

    at: datetime  # UTC, by the database's clock
    resource: str
    kind: str
    holder: str | None
    token: int | None
    revision: str | None
    detail: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        """JSON form, for ``timeline --json``."""
        return {
            "at": self.at.isoformat(),
            "resource": self.resource,
            "kind": self.kind,
            "holder": self.holder,
            "token": self.token,
            "revision": self.revision,
            "detail": self.detail,
        }


def parse_since(value: str) -> Since:
    """``--since``: an ISO-8601 date-time (without an offset: UTC) or a duration ago (``10m``, ``2h``)."""
    text = value.strip()
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return Since(ago_ms=_parse_ago(value))
    if moment.tzinfo is None:
        return Since(moment=moment.replace(tzinfo=UTC))
    try:
        return Since(moment=moment.astimezone(UTC))
    except OverflowError:
        raise UsageError(f"invalid --since {value!r}: the date-time is out of range") from None


def _parse_ago(value: str) -> int:
    try:
        ago_ms = parse_duration_ms("--since", value)
    except UsageError:
        raise UsageError(
            f"invalid --since {value!r}: expected a date-time such as 2026-11-29T14:26:10Z "
            "(UTC unless it has an offset) or how long ago, such as 10m or 2h"
        ) from None
    if ago_ms > _LONGEST_SINCE_MS:
        raise UsageError(f"invalid --since {value!r}: at most 876000h (100 years) ago; give a date-time instead")
    return ago_ms


def read_timeline(context: MigrationContext, schema: str, resource: str | None, since: Since | None) -> list[Event]:
    """The events, oldest first, through the migration context's connection; none before the log exists."""
    connection = context.connection
    assert connection is not None
    quoted = context.dialect.identifier_preparer.quote(schema)
    version = installed_version(connection, quoted)
    if version is None:
        return []
    dialect = dialect_for(connection)
    rows = connection.execute(
        statement("timeline_events", quoted, connection.dialect.name),
        {
            "resource": resource,
            "since_at": None if since is None or since.moment is None else dialect.time_param(since.moment),
            "since_ms": since.ago_ms if since else None,
        },
    )
    return [
        Event(
            at=dialect.utc(row.at),
            resource=row.resource,
            kind=row.kind,
            holder=row.holder,
            token=None if row.token is None else int(row.token),
            revision=row.revision,
            detail=_detail(row.detail),
        )
        for row in rows
    ]


def _detail(text: str | None) -> dict[str, Any]:
    """The JSON detail of an event; text that is not a JSON object is kept under ``"text"``."""
    if text is None:
        return {}
    try:
        detail = json.loads(text)
    except ValueError:
        return {"text": text}
    return detail if isinstance(detail, dict) else {"text": text}


def timeline_lines(events: Sequence[Event], filtered: bool = False) -> list[str]:
    """A header naming the time zone (and the day, when there is one), then one line per event.

    Times are ``HH:MM:SS`` when every event falls on the same UTC day, full date-times otherwise.
    Ledger and FENCED lines name their resource when the events span more than one.
    """
    if not events:
        return ["no events match --resource/--since" if filtered else "no events yet"]
    days = sorted({event.at.date() for event in events})
    one_day = len(days) == 1
    header = f"times in UTC on {days[0].isoformat()}, oldest first" if one_day else "times in UTC, oldest first"
    time_format = "%H:%M:%S" if one_day else "%Y-%m-%d %H:%M:%S"
    name_resource = len({event.resource for event in events}) > 1
    return [header] + [
        f"{event.at.strftime(time_format)}  {event.kind:<{_KIND_WIDTH}} {_body(event, name_resource)}"
        for event in events
    ]


def _body(event: Event, name_resource: bool) -> str:
    """What happened, after the time and the kind."""
    resource, holder, detail = event.resource, event.holder or "?", event.detail
    token = "" if event.token is None else f" token={event.token}"
    ttl = f" ttl={format_duration(int(detail['ttl_ms']))}" if "ttl_ms" in detail else ""
    target = (event.revision or "?") + (f" on {resource}" if name_resource else "")
    match event.kind:
        case "GRANT":
            return f"{resource} -> {holder} {token}{ttl}"
        case "RENEW":
            late = " (after it had expired; nobody else had been granted it)" if detail.get("after_expiry") else ""
            return f"{resource} by {holder}{token}{ttl}{late}"
        case "RELEASE":
            return f"{resource} by {holder}{token}"
        case "EXPIRE" if detail.get("implausible"):
            return (
                f"{resource} (holder {holder}{token}): granted at {detail.get('granted_at', '?')}, further in the "
                "future than its TTL (a clock ahead): implausible, treated as expired"
            )
        case "EXPIRE":
            return f"{resource} (holder {holder})"
        case "PREEMPT":
            return f"{resource}: {holder}{token} cancelled backend {detail.get('cancelled_pid', '?')}"
        case "LOST":
            return f"{resource} by {holder}{token} ({detail.get('reason', 'no longer the holder')})"
        case "FENCED":
            return f"{detail.get('command', '?')} {target} by {holder}{token}{_why_fenced(event)}"
        case "RESOLVE":
            started = detail.get("started_token")
            return (
                f"{target} by {holder}{token} as {detail.get('as', '?')} "
                f"(its {detail.get('was', '?')} under token {started} never finished)"
            )
        case "ADOPT":
            adopted = ", ".join(detail.get("revisions", [])) or "?"
            missing = detail.get("missing_files") or []
            unknown = f"; no file for {', '.join(missing)}, nothing below it known" if missing else ""
            return (
                f"{adopted}{' on ' + resource if name_resource else ''} by {holder}: applied before fencing, "
                f"recorded with no token{unknown}"
            )
        case "ROLLBACK" if isinstance(detail.get("applied_text"), dict):
            applied = detail["applied_text"]
            return (
                f"{target} by {holder}{token}: ran the downgrade() of the text applied under token "
                f"{applied.get('applied_token', '?')} by {applied.get('applied_by', '?')} (sha256 "
                f"{str(applied.get('applied_sha256', '?'))[:12]}), not the changed file's (sha256 "
                f"{str(applied.get('file_sha256', '?'))[:12]})"
            )
        case _:  # APPLY, STAMP, ROLLBACK, UNSTAMP
            return f"{target} by {holder}{token}"


def _why_fenced(event: Event) -> str:
    """`` < 34`` when a newer token had been granted (and perhaps had written), else the reason (a
    re-apply that was not ours)."""
    fence_token = event.detail.get("fence_token")
    if isinstance(fence_token, int) and event.token is not None and fence_token > event.token:
        return f" < {fence_token}"
    return f" ({event.detail.get('reason', 'not yours to make')})"
