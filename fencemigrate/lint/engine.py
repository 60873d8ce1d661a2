"""Run the selected rules and set aside what the project allowed on purpose."""

from __future__ import annotations

import dataclasses

from .database import DatabaseSnapshot
from .findings import CheckReport, Finding, Severity, Suppressed
from .revisions import RevisionDirectory, RevisionFile, build_graph
from .rules import RULES, CheckContext, Rule, rule_for
from .rules.database import NOT_RUN_WITHOUT_DATABASE
from .settings import ProjectSettings


def run_check(
    directory: RevisionDirectory,
    rules: tuple[Rule, ...],
    settings: ProjectSettings,
    database: DatabaseSnapshot | None,
    escalated: frozenset[str],
) -> CheckReport:
    """Every finding of ``rules`` (an error when its rule is ``escalated``), minus those an allow
    comment or pyproject entry suppresses; without ``database``, a note that neither the database nor
    the models were compared (``alembic check`` would have)."""
    context = CheckContext(directory, build_graph(directory.files), settings, database, RULES)
    files = {item.display: item for item in directory.files}
    kept: list[Finding] = []
    suppressed: list[Suppressed] = []
    for rule in rules:
        for found in rule.check(context):
            finding = dataclasses.replace(found, severity=Severity.ERROR) if rule.id in escalated else found
            allowed = _allowed(finding, files.get(finding.file or ""), settings)
            if allowed is None:
                kept.append(finding)
            else:
                suppressed.append(allowed)
    return CheckReport(
        tuple(sorted(kept, key=_order)),
        tuple(sorted(suppressed, key=lambda item: _order(item.finding))),
        len(directory.files),
        database is not None,
        tuple(note for rule in rules if (note := rule.note(context)) is not None)
        + ((NOT_RUN_WITHOUT_DATABASE,) if database is None else ()),
    )


def _allowed(finding: Finding, item: RevisionFile | None, settings: ProjectSettings) -> Suppressed | None:
    """The suppression of ``finding``: an allow comment in its file, else a pyproject entry."""
    if item is not None:
        for allow in item.allows:
            if _names(allow.rules, finding):
                return Suppressed(finding, allow.reason, f"{item.display}:{allow.line}")
    for entry in settings.allows:
        if (
            entry.reason
            and _names(entry.rules, finding)
            and (entry.revisions is None or finding.revision in entry.revisions)
        ):
            where = settings.file if entry.line is None else f"{settings.file}:{entry.line}"
            return Suppressed(finding, entry.reason, str(where))
    return None


def _names(keys: tuple[str, ...], finding: Finding) -> bool:
    return any((rule := rule_for(key)) is not None and rule.id == finding.rule for key in keys)


def _order(finding: Finding) -> tuple[bool, str, int, str]:
    """Files in path order, then lines; database findings last."""
    return finding.file is None, finding.file or "", finding.line or 0, finding.rule
