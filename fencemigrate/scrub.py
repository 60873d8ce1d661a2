"""Keep passwords out of everything fencemigrate prints, and out of the files an agent reads.

Two nets. The passwords fencemigrate is given (of every URL-like value of the config file,
``--lease-url`` and the engine env.py connects with; of the config file's password keys; of the
environment's password variables, for the MCP server) are remembered and replaced in any URL
printed, however they are spelt: with an ``@``, a space or a ``:`` in them a URL in a message
cannot be told apart from the text around it. Any other ``scheme://user:password@`` and
``password=...`` is replaced by pattern.

A file's text (:func:`redact_file_text`, the MCP server's ``read_file``) is redacted harder: every
remembered password wherever it stands as a word of its own, and the value of every password-like
key, whatever the format (``DB_PASS=...``, ``PGPASSWORD ...``, YAML ``password: ...``, JSON
``"password": ...``), across lines too (a YAML block, a TOML or .env multi-line string), and the
last field of a ``.pgpass``-style line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote

# A scheme starts where no scheme character precedes it, and a password is at most 1024 characters:
# the search stays linear in the text's length (an agent's long argument is echoed in messages).
_URL_PASSWORD = re.compile(
    r"(?<![\w+.-])(?P<scheme>[a-zA-Z][\w+.-]*://)(?P<user>[^:/@\s]{0,1024}):(?P<password>\S{0,1024}?)@(?!\S{0,1024}?@)"
)
# (a value already withheld, ``***`` bare, quoted or in parentheses, is left as it is)
_KEYWORD_PASSWORD = re.compile(r"(?i)(password\s*=\s*)(?![\"'(]{0,3}\*\*\*)('[^']*'|\S+)")
# A password in SQL: ``[ENCRYPTED] PASSWORD 'x'`` (CREATE/ALTER ROLE, USER), MySQL's ``IDENTIFIED
# [WITH plugin] BY [PASSWORD] 'x'`` (Alembic's "revision identified by '...'" is not one), ``REPLACE
# 'old'``, ``PASSWORD('x')`` and ``SET PASSWORD FOR u = 'x'``; quoted with '', "" or dollars, or cut
# off before its end (a statement shortened for a report).
_STATEMENT_PASSWORD = re.compile(
    r"(?i)(?P<lead>(?:(?<!revision\s)\bIDENTIFIED(?:\s+WITH\s+\S+)?\s+BY(?:\s+PASSWORD)?"
    r"|\bPASSWORD(?:\s+FOR\s+\S+?\s*=)?)(?:\s+|\s*\(\s*)|\bREPLACE\s+)"
    r"(?:[EU]&?'(?:[^'\\]|''|\\.){0,1024}(?:'|$)|'(?:[^'\\]|''|\\.){0,1024}(?:'|$)"
    r"|\"(?:[^\"]|\"\"){0,1024}(?:\"|$)|\$(?P<tag>\w{0,64})\$[\s\S]{0,1024}?(?:\$(?P=tag)\$|$))"
)
_known_passwords: set[str] = set()
_HEX = re.compile(r"%[0-9A-F]{2}")


def url_password(url: str) -> str | None:
    """The password of ``url`` as its writer meant it: from the userinfo's first ``:`` to the last
    ``@`` before the query (SQLAlchemy would stop at the first ``@``); None without one."""
    _, scheme_end, rest = url.partition("://")
    userinfo, at, _ = rest.split("?", 1)[0].rpartition("@")
    _, colon, password = userinfo.partition(":")
    return password if scheme_end and at and colon and password else None


def remember_password(password: str | None) -> None:
    """Scrub ``password`` (as given, and percent-decoded) from the URLs printed from now on; a
    file's text also of its percent-encoded forms and of the form a .pgpass line writes."""
    if password:
        for plain in {password, unquote(password)}:
            escaped = plain.replace("\\", "\\\\").replace(":", "\\:")  # .pgpass: a backslash and a colon escaped
            forms = {plain, escaped, quote(plain, safe=""), quote_plus(plain, safe="")}
            _known_passwords.update(forms | {_HEX.sub(lambda m: m[0].lower(), form) for form in forms})


def remember_url_password(url: str | None) -> None:
    """Scrub the password of ``url`` from everything printed from now on."""
    if url:
        remember_password(url_password(url))


def scrub_secrets(text: str) -> str:
    """Replace known passwords, the password in URLs, in SQL (``PASSWORD '...'``, ``IDENTIFIED BY
    '...'``) and ``password=...`` keywords with ``***``.

    A known password is replaced where a URL has it, between ``:`` and ``@``: replaced everywhere,
    a password that is also a word (``pass``, a user or schema name) would garble the message."""
    for password in sorted(_known_passwords, key=len, reverse=True):
        text = text.replace(f":{password}@", ":***@")
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    text = _STATEMENT_PASSWORD.sub(lambda m: f"{m['lead']}'***'", text)
    return _KEYWORD_PASSWORD.sub(lambda m: f"{m.group(1)}***", text)


# The patterns below redact a file's text (:func:`redact_file_text`, the MCP server's ``read_file``) and
# nothing else: kept as text, compiled by ``re``'s cache the first time a file is redacted. Compiled at
# import, they cost every command about 15 ms of CPU before it starts (``_BLOCK_KEY`` and
# ``_NETRC_PASSWORD`` most).
# A key that names a password: "password", "passwd" or "secret" in it, or "pass" or "pwd" as a part
# of its own (DB_PASS, MYSQL_PWD); quoted (JSON) or not, then ":" or "=" and a literal value. A value
# that is code (a call, an expression) is not a literal and is left alone.
_SECRET_KEY = r"[\w.-]*(?:password|passwd|secret)[\w.-]*|(?:[\w.-]*[_.-])?(?:pass|pwd)(?:[_.-][\w.-]*)?"
# Its value may follow YAML's anchor or tag (``&pw``, ``!!str``) or a Python string's prefix (``b"``),
# and be a TOML multi-line string, a quoted string across lines (.env), or quoted strings
# concatenated in parentheses (Python).
_KEY_VALUE = (
    r"(?im)(?<![\w.-])(?P<key>(?P<quote>[\"']?)(?:" + _SECRET_KEY + r")(?P=quote)\s*[:=]\s*"
    r"(?:[&!][^\s,\[\]{}]{0,255}[ \t]+){0,2}(?:[rbuf]{1,2}(?=[\"']))?)"
    r"(?P<value>\"\"\"[\s\S]{0,4096}?\"\"\"|'''[\s\S]{0,4096}?'''"
    r"|\"(?:[^\"\\]|\\.){1,4096}\"|'[^']{1,4096}'"
    r"|\((?:\s*(?:\"(?:[^\"\\\n]|\\.){0,1024}\"|'[^'\n]{0,1024}')){1,64}\s*\)"
    r"|(?![|>][0-9+-]{0,2}[ \t]*(?:#|\r?$))[^\s,;(){}\[\]\"'=][^\s,;(){}\[\]\"']{0,1023}(?=[\s,;}\]]|$))"
)
# A password-like key with no value on its line (or only YAML's block indicator, anchor, tag or a
# comment): its value is the lines below it indented further (a YAML block scalar or list, an ini
# continuation), each withheld whole.
_BLOCK_KEY = (
    r"(?im)^(?P<lead>[ \t]*(?:-[ \t]+)?)(?P<quote>[\"']?)(?:" + _SECRET_KEY + r")(?P=quote)[ \t]*[:=][ \t]*"
    r"(?:[&!]\S{0,255}[ \t]*){0,2}(?:[|>][0-9+-]{0,2}[ \t]*)?(?:#[^\r\n]{0,1024})?\r?$"
)
_XML_ELEMENT = r"(?i)(?P<open><(?P<tag>" + _SECRET_KEY + r")(?:\s[^<>]{0,1024})?>)[^<]{1,4096}(?P<close></(?P=tag)\s*>)"
# A .pgpass line: host:port:database:user:password (``*`` for any; ``\:`` and ``\\`` escaped).
_PGPASS_FIELD = r"(?:[^:\s\\]|\\.){1,255}"
_PGPASS_LINE = (
    rf"(?m)^(?P<fields>{_PGPASS_FIELD}:(?:[0-9]{{1,5}}|\*):{_PGPASS_FIELD}:{_PGPASS_FIELD}:)"
    r"(?=\S)(?P<value>[^\r\n]{1,1024})(?=\r?$)"
)
# libpq's and MySQL's password variables, also as a word followed by the password (``PGPASSWORD s3cret``).
_PASSWORD_VARIABLE = r"(?<![\w.-])(?P<key>(?:PGPASSWORD|MYSQL_PWD)\s+)(?P<value>[^\s=:]\S{0,1023})"
# .netrc's ``password WORD``: after ``machine HOST`` (or ``default``) on its line, or alone on a line.
_NETRC_PASSWORD = (
    r"(?im)(?P<key>(?:^|(?<=\s))(?:machine[ \t]+\S+|default)(?:[ \t]+\S+){0,8}?[ \t]+(?:password|passwd)[ \t]+"
    r"|^[ \t]*(?:password|passwd)[ \t]+(?=\S+[ \t]*\r?$))(?P<value>[^\s=:]\S{0,1023})"
)
# SQL's password literal: CREATE/ALTER ROLE ... PASSWORD '...', MySQL's IDENTIFIED BY '...'.
_SQL_PASSWORD = r"(?i)(?<![\w.-])(?P<key>(?:PASSWORD|IDENTIFIED[ \t]+BY)[ \t]+E?)(?P<value>'(?:[^'\n]|''){1,1024}')"
_SECRET_NAME = re.compile(r"(?i)(?:" + _SECRET_KEY + r")")
# Names that look like a password's and are not: the working directory, a file's path.
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})
_PATH_SUFFIXES = ("FILE", "_PATH", "_DIR")


def password_name(name: str) -> bool:
    """Whether the key or variable ``name`` says its value is a password (``PGPASSWORD``,
    ``DB_PASS``, ``api_secret``; not ``PWD`` nor ``PGPASSFILE``)."""
    upper = name.upper()
    if upper in _NOT_SECRET_NAMES or upper.endswith(_PATH_SUFFIXES):
        return False
    return _SECRET_NAME.fullmatch(name) is not None


def remember_environment_passwords(environment: Mapping[str, str]) -> None:
    """Remember the passwords of ``environment``: the value of each variable whose name says it is
    one (``PGPASSWORD``, ``DB_PASS``, ``API_SECRET``), and the password of each URL-valued one."""
    for name, value in environment.items():
        remember_url_password(value)
        if password_name(name):
            remember_password(value)


def redact_file_text(text: str) -> str:
    """``text`` with every secret fencemigrate knows or can recognise replaced by ``***``: the
    remembered passwords wherever they stand as words of their own, the passwords of URLs and the
    values of password-like keys in any format (.env, shell, YAML, JSON, ini)."""
    if _known_passwords:
        known = "|".join(re.escape(password) for password in sorted(_known_passwords, key=len, reverse=True))
        text = re.sub(rf"(?<!\w)(?:{known})(?!\w)", "***", text)
    text = _indented_values(text)
    text = re.sub(_XML_ELEMENT, lambda m: f"{m['open']}***{m['close']}", text)
    text = re.sub(_PGPASS_LINE, lambda m: f"{m['fields']}***", text)
    text = re.sub(_KEY_VALUE, lambda m: m["key"] + _masked(m["value"]), text)
    text = scrub_secrets(text)
    text = re.sub(_NETRC_PASSWORD, lambda m: f"{m['key']}***", text)
    text = re.sub(_SQL_PASSWORD, lambda m: f"{m['key']}'***'", text)
    return re.sub(_PASSWORD_VARIABLE, lambda m: f"{m['key']}***", text)


def _indented_values(text: str) -> str:
    """``text`` with the lines below each :data:`_BLOCK_KEY` that are indented further than its key
    (blank lines between them kept) replaced by ``***`` at their indentation."""
    keys = {match.start(): len(match["lead"]) for match in re.finditer(_BLOCK_KEY, text)}
    if not keys:
        return text
    shown: list[str] = []
    offset, depth = 0, -1  # depth: the key's column while its value lines follow, else -1
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        indent = len(body) - len(body.lstrip(" \t"))
        if body.strip() and depth >= 0 and indent > depth:
            shown.append(body[:indent] + "***" + line[len(body) :])
        else:
            if body.strip():
                depth = keys.get(offset, -1)
            shown.append(line)
        offset += len(line)
    return "".join(shown)


def _masked(value: str) -> str:
    """``***`` in the quotes (or parentheses) ``value`` had."""
    for opening, closing in (('"""', '"""'), ("'''", "'''"), ("(", ")"), ('"', '"'), ("'", "'")):
        if value.startswith(opening):
            return f"{opening}***{closing}"
    return "***"


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
