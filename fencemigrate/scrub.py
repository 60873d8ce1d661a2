"""Keep passwords out of everything fencemigrate prints.

Two nets. The passwords of the URLs fencemigrate is given (every URL-like value of the config
file, ``--lease-url``, the engine env.py connects with) are remembered and replaced in any URL
printed, however they are spelt: with an ``@``, a space or a ``:`` in them a URL in a message
cannot be told apart from the text around it. Any other ``scheme://user:password@`` and
``password=...`` is replaced by pattern.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

# A scheme starts where no scheme character precedes it, and a password is at most 1024 characters:
# the search stays linear in the text's length (an agent's long argument is echoed in messages).
_URL_PASSWORD = re.compile(
    r"(?<![\w+.-])(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<user>[^:/@\s]{0,1024}):(?P<password>\S{0,1024}?)@(?!\S{0,1024}?@)"
)
_KEYWORD_PASSWORD = re.compile(r"(?i)(password\s*=\s*)('[^']*'|\S+)")
_known_passwords: set[str] = set()


def url_password(url: str) -> str | None:
    """The password of ``url`` as its writer meant it: from the userinfo's first ``:`` to the last
    ``@`` before the query (SQLAlchemy would stop at the first ``@``); None without one."""
    _, scheme_end, rest = url.partition("://")
    userinfo, at, _ = rest.split("?", 1)[0].rpartition("@")
    _, colon, password = userinfo.partition(":")
    return password if scheme_end and at and colon and password else None


def remember_password(password: str | None) -> None:
    """Scrub ``password`` (as given, and percent-decoded) from the URLs printed from now on."""
    if password:
        _known_passwords.update({password, unquote(password)})


def remember_url_password(url: str | None) -> None:
    """Scrub the password of ``url`` from everything printed from now on."""
    if url:
        remember_password(url_password(url))


def scrub_secrets(text: str) -> str:
    """Replace known passwords, the password in URLs and ``password=...`` keywords with ``***``.

    A known password is replaced where a URL has it, between ``:`` and ``@``: replaced everywhere,
    a password that is also a word (``pass``, a user or schema name) would garble the message."""
    for password in sorted(_known_passwords, key=len, reverse=True):
        text = text.replace(f":{password}@", ":***@")
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    return _KEYWORD_PASSWORD.sub(lambda m: f"{m.group(1)}***", text)
