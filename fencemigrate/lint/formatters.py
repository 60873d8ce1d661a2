"""A check report as text: a table for people, workflow annotations for GitHub Actions."""

from __future__ import annotations

import textwrap

from .findings import CheckReport, Finding
from .rules import RULES

_HEADER = ("LOCATION", "RULE", "SEVERITY", "MESSAGE")
_HELP_WIDTH = 100


def text_report(report: CheckReport) -> str:
    """One row per finding with its fix below the message, then the summary line."""
    if not report.findings:
        return report.summary()
    rows = [(finding.location, finding.rule, finding.severity.value, finding.message) for finding in report.findings]
    widths = [max(len(row[column]) for row in [_HEADER, *rows]) for column in range(3)]
    indent = " " * (sum(widths) + 2 * 3)

    def line(cells: tuple[str, str, str, str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=False)) + "  " + cells[3]

    lines = [line(_HEADER)]
    for row, finding in zip(rows, report.findings, strict=True):
        lines += [line(row), f"{indent}fix: {finding.fix}"]
        if finding.diff is not None:
            lines += [f"{indent}{diff_line}" for diff_line in finding.diff.splitlines()]
    return "\n".join([*lines, "", report.summary()])


def github_report(report: CheckReport) -> str:
    """``::error file=...,line=...,title=...::message`` (or ``::warning``) per finding, then the summary."""
    return "\n".join([*(_annotation(finding) for finding in report.findings), report.summary()])


def _annotation(finding: Finding) -> str:
    properties = []
    if finding.file is not None:
        properties.append(f"file={_property(finding.file)}")
        if finding.line is not None:
            properties.append(f"line={finding.line}")
    properties.append(f"title={_property(f'{finding.rule} {finding.name}')}")
    message = _data(f"{finding.message}\nfix: {finding.fix}")
    return f"::{finding.severity.value} {','.join(properties)}::{message}"


def _data(text: str) -> str:
    """Escape a workflow command's message."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    """Escape a workflow command's property value."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def rules_help() -> str:
    """The rules as ``check --help`` lists them: id, name, severity and what each finds (click keeps
    the lines of a paragraph marked with a backspace as they are)."""
    lines = ["\b", "Rules (ids or names for --select, --ignore and allow comments):"]
    for rule in RULES:
        head = f"  {rule.id} {rule.name} ({rule.severity.value}"
        head += ", --db): " if rule.needs_database else "): "
        lines += textwrap.wrap(head + rule.summary, width=_HELP_WIDTH, subsequent_indent="        ")
    return "\n".join(lines)
