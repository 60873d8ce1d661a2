"""Checks on user input, done before anything touches the database."""

from __future__ import annotations

import os
import re
import socket
import unicodedata

from .errors import UsageError

MAX_TOKEN = 2**62
"""The largest fencing token: a grant issues one above the fence, which must still fit a bigint,
and the bits above leave room for an epoch (4611686018427387904)."""
MAX_NAME_LENGTH = 255
DEFAULT_RESOURCE = "db/migrations"
_DECIMAL = re.compile(r"\s*[0-9]+\s*", re.ASCII)
_CONTROL = frozenset({"Cc", "Cs", "Zl", "Zp"})
"""Control characters (C0, DEL, C1), lone surrogates (bytes the locale could not decode) and line
or paragraph separators: a name with one breaks the line it is printed on."""
_FORMAT = frozenset({"Cf"})
"""Invisible formatting characters: bidirectional overrides and isolates (U+202E...), zero-width
ones, soft hyphens: a name with one prints as another name (or as the same name as another)."""


def parse_token(value: str | int) -> int:
    """A fencing token: an integer in 1..2**62."""
    if isinstance(value, str) and not value.strip():
        raise UsageError(
            "empty fencing token: pass --token N, or leave --token out (and FENCEMIGRATE_TOKEN unset) "
            "to have fencemigrate take a lease"
        )
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise UsageError(f"invalid token {value!r}: must be an integer from 1 to {MAX_TOKEN}")
    if isinstance(value, str) and not _DECIMAL.fullmatch(value):
        raise UsageError(f"invalid token {value!r}: must be an integer from 1 to {MAX_TOKEN}")
    token = int(value)
    if not 1 <= token <= MAX_TOKEN:
        raise UsageError(f"invalid token {value!r}: must be an integer from 1 to {MAX_TOKEN}")
    return token


def _check_name(kind: str, value: str) -> str:
    if not value or not value.strip():
        raise UsageError(f"{kind} name must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise UsageError(f"{kind} name is {len(value)} characters long; the limit is {MAX_NAME_LENGTH}")
    if any(unicodedata.category(ch) in _CONTROL for ch in value):
        raise UsageError(f"{kind} name must not contain control characters")
    hidden = next((ch for ch in value if unicodedata.category(ch) in _FORMAT), None)
    if hidden is not None:
        raise UsageError(
            f"{kind} name must not contain invisible formatting characters (it has U+{ord(hidden):04X} "
            f"{unicodedata.name(hidden, 'FORMAT CHARACTER')}): they make a name print as another"
        )
    return value


def check_resource(value: str | None) -> str:
    """A fenced resource name (default ``db/migrations``)."""
    return _check_name("resource", DEFAULT_RESOURCE if value is None else value)


def check_holder(value: str | None) -> str:
    """Who is writing; defaults to ``host:pid``."""
    return _check_name("holder", value if value is not None else default_holder())


def default_holder() -> str:
    """``host:pid`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def check_schema(value: str) -> str:
    """The schema the fence tables live in."""
    _check_name("schema", value)
    if len(value) > 63:
        raise UsageError(f"schema name {value!r} is longer than PostgreSQL's 63-byte limit")
    return value
