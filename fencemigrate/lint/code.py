"""What a revision's code does, read from its syntax tree: SQL it runs, calls that end the
transaction, and a normalised form of ``upgrade()`` to compare revisions with.

SQL text is read as statements of keywords, for the transaction rules: comments, string literals
and dollar-quoted bodies (a function's ``BEGIN ... END``) are skipped, so only what PostgreSQL
would run as a statement of its own is classified."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
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


# Calls whose first argument is SQL text: op.execute, connection.execute, exec_driver_sql, text, DDL.
_SQL_CALLS = {"execute", "exec_driver_sql", "text", "DDL"}
# Expressions that are the migration's connection: op.get_bind(), x.bind, x.connection, ...
_BIND_ATTRIBUTES = {"bind", "connection", "dbapi_connection", "driver_connection"}
_TRANSACTION_END_METHODS = {"commit", "rollback"}
_CODE_TOKEN = re.compile(r"\w+|[^\w\s]")
_ESCAPED_SPACE = re.compile(r"\\[ntrfv]")  # a line break in SQL text, as ast.unparse writes it
_SHOWN_CALL_LENGTH = 60


@dataclass(frozen=True)
class CodeAt:
    """A piece of the revision (SQL text, or a call as written) and the line it is on."""

    text: str
    line: int


class RevisionCode:
    """The calls and name assignments of one module, collected in a single walk of its tree."""

    def __init__(self, module: ast.Module) -> None:
        self.calls: list[ast.Call] = []
        self.assignments: list[tuple[str, ast.expr]] = []
        self._autocommit_lines: list[tuple[int, int]] = []  # first and last line of each such with-block
        for node in ast.walk(module):
            if isinstance(node, ast.With | ast.AsyncWith) and any(
                isinstance(item.context_expr, ast.Call) and _callee(item.context_expr) == "autocommit_block"
                for item in node.items
            ):
                self._autocommit_lines.append((node.lineno, node.end_lineno or node.lineno))
            if isinstance(node, ast.Call):
                self.calls.append(node)
            elif isinstance(node, ast.Assign):
                self.assignments += [(target.id, node.value) for target in node.targets if isinstance(target, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.assignments.append((node.target.id, node.value))

    def sql_texts(self) -> Iterator[CodeAt]:
        """SQL given to execute-like calls as literals, f-strings, ``+`` of them, or names assigned one."""
        names = dict(self.assignments)  # the last assignment wins
        for node in self.calls:
            if _callee(node) in _SQL_CALLS and node.args:
                text = _literal_text(node.args[0], names)
                if text is not None:
                    yield CodeAt(text, node.args[0].lineno)

    def autocommit_blocks(self) -> Iterator[CodeAt]:
        """Calls of ``autocommit_block()``."""
        for node in self.calls:
            if _callee(node) == "autocommit_block":
                yield CodeAt(_shown(node), node.lineno)

    def in_autocommit_block(self, line: int) -> bool:
        """True when ``line`` is in a ``with ...autocommit_block():`` statement."""
        return any(first <= line <= last for first, last in self._autocommit_lines)

    def concurrent_index_options(self) -> Iterator[CodeAt]:
        """Calls given ``postgresql_concurrently=True`` (op.create_index, op.drop_index)."""
        for node in self.calls:
            if any(k.arg == "postgresql_concurrently" and _truthy(k.value) for k in node.keywords):
                yield CodeAt(_shown(node), node.lineno)

    def transaction_end_calls(self) -> Iterator[CodeAt]:
        """``commit()`` or ``rollback()`` called on the migration's connection (or its DBAPI connection)."""
        binds = self._bind_names()
        for node in self.calls:
            if (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in _TRANSACTION_END_METHODS
                and not node.args
                and _is_bind(node.func.value, binds)
            ):
                yield CodeAt(_shown(node), node.lineno)

    def _bind_names(self) -> set[str]:
        """Names that hold the migration's connection (``bind = op.get_bind()``, ``c = bind.connection``)."""
        names: set[str] = set()
        while True:
            more = {name for name, value in self.assignments if name not in names and _is_bind(value, names)}
            if not more:
                return names
            names |= more


def is_empty(function: ast.FunctionDef | None) -> bool:
    """True for a missing function, or one with only a docstring, ``pass`` or ``...``."""
    if function is None:
        return True
    return all(_is_filler(statement) for statement in function.body)


def body_tokens(function: ast.FunctionDef | None) -> tuple[str, ...]:
    """The function's code as lower-case tokens, blind to comments, docstrings, layout, quoting,
    and the spacing and case of SQL text."""
    if function is None:
        return ()
    body = [statement for statement in function.body if not _is_filler(statement)]
    if not body:
        return ()
    code = ast.unparse(ast.Module(body=body, type_ignores=[]))
    return tuple(_CODE_TOKEN.findall(_ESCAPED_SPACE.sub(" ", code).lower()))


def _is_filler(statement: ast.stmt) -> bool:
    if isinstance(statement, ast.Pass):
        return True
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and (isinstance(statement.value.value, str) or statement.value.value is Ellipsis)
    )


def _callee(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    if isinstance(node.func, ast.Name):
        return node.func.id
    return None


def _shown(node: ast.AST) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= _SHOWN_CALL_LENGTH else text[: _SHOWN_CALL_LENGTH - 3] + "..."


def _truthy(node: ast.expr) -> bool:
    return not (isinstance(node, ast.Constant) and not node.value)


def _literal_text(node: ast.expr, names: dict[str, ast.expr], depth: int = 0) -> str | None:
    """The SQL text of ``node``; ``?`` stands for parts only known at run time."""
    if depth > 10:
        return None
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return "".join(
            value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else " ? "
            for value in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        left = _literal_text(node.left, names, depth + 1)
        if isinstance(node.op, ast.Mod):
            return left
        right = _literal_text(node.right, names, depth + 1)
        return None if left is None and right is None else f"{left or ' ? '}{right or ' ? '}"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _literal_text(node.func.value, names, depth + 1)
    if isinstance(node, ast.Name) and node.id in names:
        return _literal_text(names[node.id], names, depth + 1)
    return None


def _is_bind(node: ast.expr, names: set[str]) -> bool:
    if isinstance(node, ast.Call) and _callee(node) == "get_bind":
        return True
    if isinstance(node, ast.Attribute):
        return node.attr in _BIND_ATTRIBUTES
    return isinstance(node, ast.Name) and node.id in names
