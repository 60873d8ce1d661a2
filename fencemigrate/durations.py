"""Durations on the command line: ``250ms``, ``30s``, ``5m``, ``2h`` (a bare number is seconds)."""

from __future__ import annotations

import re
from fractions import Fraction

from .errors import UsageError

_DURATION = re.compile(r"\s*(?P<amount>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>ms|s|m|h)?\s*", re.ASCII)
_MILLISECONDS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, None: 1000}
MAX_TTL_MS = 24 * 3_600_000  # a lease is a heartbeat, not a reservation
MAX_WAIT_MS = 24 * 3_600_000


def parse_duration_ms(option: str, value: str | int | float) -> int:
    """``value`` in whole milliseconds; UsageError naming ``option`` when it is not a duration."""
    if isinstance(value, bool):
        raise UsageError(f"invalid {option} {value!r}: expected a duration such as 30s, 5m or 250ms")
    if isinstance(value, (int, float)):
        value = str(value)
    if value.strip().startswith("-"):
        raise UsageError(f"invalid {option} {value!r}: a duration cannot be negative")
    match = _DURATION.fullmatch(value)
    if match is None:
        raise UsageError(f"invalid {option} {value!r}: expected a duration such as 30s, 5m or 250ms")
    return round(Fraction(match["amount"]) * _MILLISECONDS[match["unit"]])  # exact: no float overflow


def parse_ttl_ms(value: str | int | float) -> int:
    """A lease TTL: more than zero, at most 24 hours."""
    ttl = parse_duration_ms("--ttl", value)
    if ttl <= 0:
        raise UsageError(f"invalid --ttl {value!r}: a lease TTL must be more than zero")
    if ttl > MAX_TTL_MS:
        raise UsageError(
            f"invalid --ttl {value!r}: at most 24h; a lease is renewed while its holder makes "
            "progress, so pick a short TTL"
        )
    return ttl


def parse_wait_ms(value: str | int | float, option: str = "--wait") -> int:
    """How long to wait for a busy lease or lock: zero (do not wait) up to 24 hours; ``option`` names
    it in the error."""
    wait = parse_duration_ms(option, value)
    if wait > MAX_WAIT_MS:
        raise UsageError(f"invalid {option} {value!r}: at most 24h")
    return wait


def format_duration(milliseconds: int) -> str:
    """The shortest exact form: ``5m``, ``90s``, ``250ms``."""
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if milliseconds % size == 0:
            return f"{milliseconds // size}{unit}"
    return f"{milliseconds}ms"
