"""``fencemigrate check``: lint and drift detection for fenced migration directories.

The revision files are read with ``ast``, never imported; each rule (``rules/``) has a stable
id and name; findings can be allowed with a reason in the file or in pyproject.toml; with
``--db`` the database is compared too, read through env.py like every other command, and with
it the models (env.py's ``target_metadata``), as ``alembic check`` compares them.
"""

from .database import DatabaseSnapshot, SnapshotReader, read_snapshot
from .directory import read_directory
from .engine import run_check
from .findings import CheckReport, Finding, Severity, Suppressed
from .formatters import github_report, rules_help, text_report
from .models import ModelComparer, ModelComparison
from .project_settings import read_project_settings
from .rules import RULES, select_rules

__all__ = [
    "RULES",
    "CheckReport",
    "DatabaseSnapshot",
    "Finding",
    "ModelComparer",
    "ModelComparison",
    "Severity",
    "SnapshotReader",
    "Suppressed",
    "github_report",
    "read_directory",
    "read_project_settings",
    "read_snapshot",
    "rules_help",
    "run_check",
    "select_rules",
    "text_report",
]
