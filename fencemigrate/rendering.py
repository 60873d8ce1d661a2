"""How an outcome is shown: the same words from ``fencemigrate`` and from plain ``alembic`` (the
fence-aware env.py), with every password scrubbed. Nothing here prints."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import FencemigrateError
from .scrub import scrub_secrets


@dataclass(frozen=True)
class Rendered:
    """An error as shown: its ``text`` (no final newline), the stream it goes to and the exit status."""

    text: str
    to_stderr: bool
    exit_status: int


def render(error: FencemigrateError, as_json: bool) -> Rendered:
    """``error`` as one JSON object on stdout, or as ``fencemigrate: STATUS: message`` on stderr
    (FENCED and DIRTY as their own lines)."""
    if as_json:
        return Rendered(json_text(error.as_json()), to_stderr=False, exit_status=error.exit_status)
    prefix = f"fencemigrate: {error.status}: " if error.outcome.prefixed else ""
    return Rendered(prefix + scrub_secrets(str(error)), to_stderr=True, exit_status=error.exit_status)


def json_text(payload: dict[str, Any]) -> str:
    """``payload`` as one line of JSON, keys sorted, every string in it scrubbed of passwords."""
    return json.dumps(scrubbed(payload), sort_keys=True)


def scrubbed(value: Any) -> Any:
    """``value`` (JSON data) with every string in it scrubbed of passwords."""
    if isinstance(value, str):
        return scrub_secrets(value)
    if isinstance(value, dict):
        return {key: scrubbed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [scrubbed(item) for item in value]
    return value
