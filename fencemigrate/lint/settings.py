"""``[tool.fencemigrate.check]`` in the project's pyproject.toml: findings allowed project-wide,
and warnings the project reports as errors.

The file is the pyproject.toml Alembic reads ``[tool.alembic]`` from, when it does; otherwise
the pyproject.toml next to alembic.ini (the config file's directory), if there is one::

    [tool.fencemigrate.check]
    errors = ["autocommit-block"]     # optional: these rules' warnings are errors

    [[tool.fencemigrate.check.allow]]
    rules = ["FM202"]                 # rule ids or names
    revisions = ["0042"]              # optional: only these revisions (default: everywhere)
    reason = "CREATE INDEX CONCURRENTLY on a 40 M-row table, fenced before and after"

An entry without a reason suppresses nothing and is a finding; a malformed section is bad usage.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic.config import Config

from ..errors import UsageError
from .revisions import display_path

_ENTRY_KEYS = {"rules", "revisions", "reason"}
_SECTION_KEYS = {"allow", "errors"}
_ENTRY_HEADER = re.compile(r"^[ \t]*\[\[\s*tool\s*\.\s*fencemigrate\s*\.\s*check\s*\.\s*allow\s*\]\]", re.MULTILINE)


@dataclass(frozen=True)
class ProjectAllow:
    """Rules allowed for some revisions (None: all of them and the database), with the reason."""

    rules: tuple[str, ...]
    revisions: tuple[str, ...] | None
    reason: str
    line: int | None


@dataclass(frozen=True)
class ProjectSettings:
    """The allow entries of one pyproject.toml (``file`` None when there is none), and the rules
    (ids or names, as written) whose findings are errors whatever their own severity."""

    file: str | None = None
    allows: tuple[ProjectAllow, ...] = ()
    errors: tuple[str, ...] = ()


def settings_path(config: Config) -> Path | None:
    """Where ``[tool.fencemigrate.check]`` is looked for (see the module docstring)."""
    if config.toml_file_name:
        return Path(config.toml_file_name)
    if config.config_file_name:
        candidate = Path(config.config_file_name).parent / "pyproject.toml"
        return candidate if candidate.is_file() else None
    return None


def read_project_settings(config: Config) -> ProjectSettings:
    """The project's allow entries; UsageError when the file or the section is malformed."""
    path = settings_path(config)
    if path is None:
        return ProjectSettings()
    shown = display_path(path.resolve())
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise UsageError(f"cannot read {shown}: {error}") from None
    section = _table(_table(data.get("tool")).get("fencemigrate")).get("check")
    if section is None:
        return ProjectSettings(shown)
    where = f"[tool.fencemigrate.check] in {shown}"
    if not isinstance(section, dict) or set(section) - _SECTION_KEYS:
        raise UsageError(f"{where}: the keys are `allow`, an array of tables, and `errors`, a list of rule ids")
    errors = section.get("errors", [])
    if not _strings(errors):
        raise UsageError(f"{where}: `errors` must be a list of rule ids")
    entries = section.get("allow", [])
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise UsageError(f"{where}: `allow` must be an array of tables ([[tool.fencemigrate.check.allow]])")
    headers = [text.count("\n", 0, match.start()) + 1 for match in _ENTRY_HEADER.finditer(text)]
    lines: list[int | None] = list(headers) if len(headers) == len(entries) else [None] * len(entries)
    allows = tuple(_allow(entry, line, where) for entry, line in zip(entries, lines, strict=True))
    return ProjectSettings(shown, allows, tuple(errors))


def _allow(entry: dict[str, Any], line: int | None, where: str) -> ProjectAllow:
    at = f"{where}, allow entry" + (f" at line {line}" if line else "")
    unknown = set(entry) - _ENTRY_KEYS
    if unknown:
        raise UsageError(f"{at}: unknown key {sorted(unknown)[0]!r} (keys: rules, revisions, reason)")
    rules = entry.get("rules")
    if not _strings(rules) or not rules:
        raise UsageError(f"{at}: `rules` must be a non-empty list of rule ids")
    revisions = entry.get("revisions")
    if revisions is not None and not _strings(revisions):
        raise UsageError(f"{at}: `revisions` must be a list of revision ids")
    reason = entry.get("reason", "")
    if not isinstance(reason, str):
        raise UsageError(f"{at}: `reason` must be a string")
    return ProjectAllow(tuple(rules), None if revisions is None else tuple(revisions), reason.strip(), line)


def _table(value: object) -> dict[str, Any]:
    """``value`` if it is a TOML table, else an empty one (another tool's business)."""
    return value if isinstance(value, dict) else {}


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)
