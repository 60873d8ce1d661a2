"""What every rule is, and what it is given to look at."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import ClassVar

from ..code import RevisionCode, Statement, statements
from ..database import DatabaseSnapshot
from ..findings import Finding, Severity
from ..revisions import RevisionDirectory, RevisionFile, RevisionGraph
from ..settings import ProjectSettings


@dataclass(frozen=True)
class CheckContext:
    """The revision files, their graph, the project's settings, (with ``--db``) the database, and
    every rule there is (to tell a suppression naming an unknown rule)."""

    directory: RevisionDirectory
    graph: RevisionGraph
    settings: ProjectSettings
    database: DatabaseSnapshot | None
    all_rules: tuple[Rule, ...]
    _code: dict[str, RevisionCode] = field(default_factory=dict, repr=False)
    _statements: dict[str, list[tuple[Statement, int]]] = field(default_factory=dict, repr=False)

    @property
    def readable(self) -> tuple[RevisionFile, ...]:
        """The files that could be read as revisions (duplicate ids included)."""
        return tuple(item for item in self.directory.files if item.revision is not None)

    def knows(self, key: str) -> bool:
        """True when ``key`` is a rule's id or name."""
        return any(rule.matches(key) for rule in self.all_rules)

    def code(self, revision: RevisionFile) -> RevisionCode:
        """The calls and assignments of a readable revision file (walked once, for every rule)."""
        found = self._code.get(revision.display)
        if found is None:
            assert revision.module is not None
            found = self._code[revision.display] = RevisionCode(revision.module)
        return found

    def statements(self, revision: RevisionFile) -> list[tuple[Statement, int]]:
        """The SQL statements ``revision`` runs (as far as its literals tell), with their lines."""
        found = self._statements.get(revision.display)
        if found is None:
            found = [(item, sql.line) for sql in self.code(revision).sql_texts() for item in statements(sql.text)]
            self._statements[revision.display] = found
        return found


class Rule(ABC):
    """One check, with a stable id (``FM201``) and name (``autocommit-block``).

    ``summary`` says what it finds (for the README and ``check --help``); ``fix`` is the usual
    one-line fix, which a finding may make more precise. ``needs_models``: the database is read
    with the models compared (Alembic's ``check``).
    """

    id: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    fix: ClassVar[str]
    severity: ClassVar[Severity] = Severity.ERROR
    needs_database: ClassVar[bool] = False
    needs_models: ClassVar[bool] = False

    @abstractmethod
    def check(self, context: CheckContext) -> Iterator[Finding]:
        """The findings of this rule."""

    def note(self, context: CheckContext) -> str | None:
        """What the summary must say about this rule's run, such as what it could not check."""
        return None

    def at(self, revision: RevisionFile, line: int, message: str, fix: str | None = None) -> Finding:
        """A finding in ``revision``'s file."""
        return self.finding(message, revision.display, line, revision.revision, fix)

    def finding(
        self,
        message: str,
        file: str | None = None,
        line: int | None = None,
        revision: str | None = None,
        fix: str | None = None,
    ) -> Finding:
        """A finding of this rule (``file`` None: about the database)."""
        return Finding(self.id, self.name, self.severity, file, line, revision, message, fix or self.fix)

    def matches(self, key: str) -> bool:
        """True when ``key`` is this rule's id or name (any case)."""
        return key.casefold() in (self.id.casefold(), self.name.casefold())
