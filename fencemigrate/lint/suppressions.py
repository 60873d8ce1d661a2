"""``# fencemigrate: allow RULE-ID because <reason>`` comments in a revision file.

A comment allows the rules it names for the whole revision file. The reason is required: a
comment without one (or naming no known rule) suppresses nothing and is itself a finding.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass

MARKER = "fencemigrate:"
_COMMENT = re.compile(r"#\s*fencemigrate:\s*(?P<body>.*)$")
_ALLOW = re.compile(r"allow\s+(?P<rules>[\w-]+(?:\s*,\s*[\w-]+)*)(?:\s+because\b(?P<reason>.*))?$", re.IGNORECASE)


@dataclass(frozen=True)
class Allow:
    """Rules (ids or names, as written) allowed in one file, with the reason and the comment's line."""

    rules: tuple[str, ...]
    reason: str
    line: int


@dataclass(frozen=True)
class BadAllow:
    """A ``fencemigrate:`` comment that suppresses nothing, and why."""

    line: int
    comment: str
    problem: str


def read_allows(source: str) -> tuple[list[Allow], list[BadAllow]]:
    """The allow comments of ``source`` (comments only: never text inside a string)."""
    allows: list[Allow] = []
    bad: list[BadAllow] = []
    if MARKER not in source:
        return allows, bad  # the common case, without tokenizing
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return allows, bad  # an unparsable file is reported as such
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        comment = _COMMENT.match(token.string)
        if comment is None:
            continue
        text, line = token.string.strip(), token.start[0]
        allow = _ALLOW.match(comment.group("body").strip())
        if allow is None:
            bad.append(BadAllow(line, text, "is not `# fencemigrate: allow RULE-ID because <reason>`"))
            continue
        rules = tuple(rule.strip() for rule in allow.group("rules").split(","))
        reason = (allow.group("reason") or "").strip()
        if not reason:
            bad.append(BadAllow(line, text, "gives no reason (`because <reason>`), so it suppresses nothing"))
            continue
        allows.append(Allow(rules, reason, line))
    return allows, bad
