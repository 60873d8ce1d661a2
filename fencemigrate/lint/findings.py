"""What ``fencemigrate check`` reports: findings, the suppressed ones, and the report around them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..errors import ERROR


class Severity(Enum):
    """An error fails the check (exit 1); a warning is reported but does not."""

    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    """One problem: which rule, where (``file`` and ``line`` are None for the database), and the fix."""

    rule: str
    name: str
    severity: Severity
    file: str | None
    line: int | None
    revision: str | None
    message: str
    fix: str
    diff: str | None = None  # FM402: the unified diff from the applied text to the file on disk

    @property
    def location(self) -> str:
        """``file:line``, ``file``, or ``(database)``."""
        if self.file is None:
            return "(database)"
        return self.file if self.line is None else f"{self.file}:{self.line}"

    def as_json(self) -> dict[str, Any]:
        """The finding as ``check --json`` prints it."""
        return {
            "rule": self.rule,
            "name": self.name,
            "severity": self.severity.value,
            "file": self.file,
            "line": self.line,
            "revision": self.revision,
            "message": self.message,
            "fix": self.fix,
            **({"diff": self.diff} if self.diff is not None else {}),
        }


@dataclass(frozen=True)
class Suppressed:
    """A finding silenced on purpose, with the reason given and where it was given."""

    finding: Finding
    reason: str
    by: str

    def as_json(self) -> dict[str, Any]:
        """The suppressed finding as ``check --json`` prints it."""
        return {**self.finding.as_json(), "reason": self.reason, "suppressed_by": self.by}


@dataclass(frozen=True)
class CheckReport:
    """Everything one check found, in a stable order, and what the rules could not check (``notes``)."""

    findings: tuple[Finding, ...]
    suppressed: tuple[Suppressed, ...]
    revision_files: int
    database_checked: bool
    notes: tuple[str, ...] = ()

    @property
    def errors(self) -> int:
        """How many findings are errors."""
        return sum(1 for finding in self.findings if finding.severity is Severity.ERROR)

    @property
    def warnings(self) -> int:
        """How many findings are warnings."""
        return len(self.findings) - self.errors

    @property
    def exit_status(self) -> int:
        """0 when there is no error (warnings alone pass), 1 otherwise."""
        return ERROR.exit_status if self.errors else 0

    def summary(self) -> str:
        """One line: how many errors and warnings, in how many files, what was suppressed, and the notes."""
        files = _count(self.revision_files, "revision file")
        if self.findings:
            line = f"{_count(self.errors, 'error')}, {_count(self.warnings, 'warning')} in {files}"
        else:
            line = f"no problems found in {files}"
        if self.database_checked:
            line += ", database checked"
        if self.suppressed:
            line += f"; {len(self.suppressed)} suppressed"
        return "; ".join([line, *self.notes])

    def as_json(self) -> dict[str, Any]:
        """The JSON object ``check --json`` prints."""
        return {
            "status": "failed" if self.errors else "ok",
            "errors": self.errors,
            "warnings": self.warnings,
            "revision_files": self.revision_files,
            "database_checked": self.database_checked,
            "findings": [finding.as_json() for finding in self.findings],
            "suppressed": [item.as_json() for item in self.suppressed],
            "notes": list(self.notes),
        }


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
