"""Keep passwords out of everything fencemigrate prints."""

from __future__ import annotations

import re

_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<user>[^:/@\s]*):(?P<password>[^@\s]*)@")
_KEYWORD_PASSWORD = re.compile(r"(?i)(password\s*=\s*)('[^']*'|\S+)")


def scrub_secrets(text: str) -> str:
    """Replace the password in URLs and ``password=...`` keywords with ``***``."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    return _KEYWORD_PASSWORD.sub(lambda m: f"{m.group(1)}***", text)
