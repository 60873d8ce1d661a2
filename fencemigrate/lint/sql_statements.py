"""Read SQL text found in a revision as statements of keywords, for the transaction rules.

Comments, string literals and dollar-quoted bodies (a function's ``BEGIN ... END``) are skipped,
so only what PostgreSQL would run as a statement of its own is classified.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(
    r"""
      (?P<skip>--[^\n]*                                 # line comment
             | /\*.*?\*/                                # block comment
             | \$\$.*?\$\$                              # dollar-quoted body
             | \$(?P<tag>[A-Za-z_]\w*)\$.*?\$(?P=tag)\$ # tagged dollar-quoted body
             | [EeBbXxUuNn]?'(?:[^']|'')*'              # string literal
             | "(?:[^"]|"")*")                          # quoted identifier
    | (?P<word>[A-Za-z_][\w$]*)
    | (?P<semicolon>;)
    """,
    re.DOTALL | re.VERBOSE,
)
_SNIPPET_LENGTH = 60


@dataclass(frozen=True)
class Statement:
    """One statement: its words in upper case (names and keywords), and its text for messages."""

    words: tuple[str, ...]
    text: str

    def starts_with(self, *words: str) -> bool:
        """True when the statement's first words are ``words``."""
        return self.words[: len(words)] == words

    def has_sequence(self, *words: str) -> bool:
        """True when ``words`` appear one right after the other."""
        size = len(words)
        return any(self.words[i : i + size] == words for i in range(len(self.words) - size + 1))

    @property
    def snippet(self) -> str:
        """The statement on one line, shortened for a message."""
        line = " ".join(self.text.split())
        return line if len(line) <= _SNIPPET_LENGTH else line[: _SNIPPET_LENGTH - 3] + "..."


def statements(sql: str) -> list[Statement]:
    """The statements of ``sql``, split at semicolons outside SQL-standard ``BEGIN ATOMIC`` bodies."""
    found: list[Statement] = []
    words: list[str] = []
    start = 0
    atomic_depth = 0
    for match in _TOKEN.finditer(sql):
        if match.group("skip"):
            continue
        word = match.group("word")
        if word is not None:
            word = word.upper()
            if word == "ATOMIC" and words[-1:] == ["BEGIN"]:
                atomic_depth += 1
            elif atomic_depth and word == "CASE":
                atomic_depth += 1
            elif atomic_depth and word == "END":
                atomic_depth -= 1
            words.append(word)
            continue
        if atomic_depth:
            continue
        if words:
            found.append(Statement(tuple(words), sql[start : match.start()].strip()))
        words = []
        start = match.end()
    if words:
        found.append(Statement(tuple(words), sql[start:].strip()))
    return found


def controls_transaction(statement: Statement) -> bool:
    """BEGIN, START TRANSACTION, COMMIT, END, ROLLBACK, ABORT or PREPARE TRANSACTION."""
    if statement.starts_with("ROLLBACK"):
        return not (statement.starts_with("ROLLBACK", "PREPARED") or "TO" in statement.words[1:3])
    if statement.starts_with("COMMIT"):
        return not statement.starts_with("COMMIT", "PREPARED")
    return (
        statement.words[0] in ("BEGIN", "END", "ABORT")
        or statement.starts_with("START", "TRANSACTION")
        or statement.starts_with("PREPARE", "TRANSACTION")
    )


def runs_concurrently(statement: Statement) -> bool:
    """CREATE/DROP INDEX CONCURRENTLY, REINDEX ... CONCURRENTLY, DETACH PARTITION ... CONCURRENTLY."""
    if statement.words[0] in ("CREATE", "DROP"):
        return statement.has_sequence("INDEX", "CONCURRENTLY")
    if statement.words[0] == "REINDEX":
        return "CONCURRENTLY" in statement.words
    return statement.has_sequence("DETACH", "PARTITION") and statement.words[-1] == "CONCURRENTLY"


_OUTSIDE_TRANSACTION_STARTS = (
    ("VACUUM",),
    ("CREATE", "DATABASE"),
    ("DROP", "DATABASE"),
    ("CREATE", "TABLESPACE"),
    ("DROP", "TABLESPACE"),
    ("ALTER", "SYSTEM"),
    ("COMMIT", "PREPARED"),
    ("ROLLBACK", "PREPARED"),
    ("CREATE", "SUBSCRIPTION"),
    ("DROP", "SUBSCRIPTION"),
)
_REINDEX_TARGETS = ("INDEX", "TABLE", "SCHEMA", "DATABASE", "SYSTEM")


def refuses_transaction_block(statement: Statement) -> bool:
    """Statements PostgreSQL refuses inside a transaction block (CONCURRENTLY aside, see above)."""
    if any(statement.starts_with(*start) for start in _OUTSIDE_TRANSACTION_STARTS):
        return True
    if statement.words in (("CLUSTER",), ("CLUSTER", "VERBOSE")):
        return True
    if statement.words[0] == "REINDEX" and "CONCURRENTLY" not in statement.words:
        target = next((word for word in statement.words[1:] if word in _REINDEX_TARGETS), None)
        return target in ("DATABASE", "SYSTEM")
    return False


def adds_enum_value(statement: Statement) -> bool:
    """ALTER TYPE ... ADD VALUE."""
    return statement.starts_with("ALTER", "TYPE") and statement.has_sequence("ADD", "VALUE")
