"""``check``: read the project (its revision files, and unless ``db`` is false the database, read
through env.py, with the models compared as ``alembic check`` compares them), run the selected rules
and set aside what the project allowed on purpose."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from ..config import fence_schema
from ..errors import ERROR, CheckDatabaseUnreadable, FencemigrateError
from .database import DatabaseSnapshot, ModelComparer, SnapshotReader
from .findings import CheckReport, Finding, Severity, Suppressed
from .revisions import RevisionDirectory, RevisionFile, build_graph, read_directory
from .rules import RULES, CheckContext, Rule, escalated_rules, rule_for, select_rules
from .rules.database import NOT_RUN_WITHOUT_DATABASE
from .settings import ProjectSettings, read_project_settings

#: Runs env.py once with a reader of the database (``runtime.environment.run_without_steps``).
ReadThroughEnv = Callable[[Callable[[tuple[str, ...], MigrationContext], list[Any]]], None]


def check_project(
    config: Config,
    script: ScriptDirectory,
    db: bool,
    select: str | Iterable[str] | None,
    ignore: str | Iterable[str] | None,
    read_through_env: ReadThroughEnv,
) -> CheckReport:
    """See :func:`fencemigrate.api.check`."""
    rules = select_rules(select, ignore, db)
    settings = read_project_settings(config)
    escalated = escalated_rules(settings)
    directory = read_directory(script)
    if not db:
        return run_check(directory, rules, settings, None, escalated)
    schema = fence_schema(config)
    models = ModelComparer(config, script, schema) if any(rule.needs_models for rule in rules) else None
    on_disk = {item.revision: item.sha256 for item in directory.files if item.revision is not None}
    reader = SnapshotReader(schema, models, on_disk)
    try:
        read_through_env(reader.read)
        snapshot = reader.snapshot()
    except FencemigrateError as error:
        if error.exit_status != ERROR.exit_status:  # bad usage, a signal: as they are
            raise
        raise CheckDatabaseUnreadable(error) from error
    return run_check(directory, rules, settings, snapshot, escalated)


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
