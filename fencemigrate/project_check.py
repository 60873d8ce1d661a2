"""``check``: the lint rules over the revision files, and (unless ``db`` is false) over the database
read through env.py, the models compared as ``alembic check`` compares them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from alembic.config import Config

from .config import fence_schema
from .errors import ERROR, CheckDatabaseUnreadable, FencemigrateError
from .runtime import env_reads
from .runtime.revision_targets import script_directory

if TYPE_CHECKING:  # the rules are imported only when a check runs: every other command starts faster
    from .lint.findings import CheckReport


def check(
    config: Config, db: bool, select: str | Iterable[str] | None, ignore: str | Iterable[str] | None
) -> CheckReport:
    """See :func:`.api.check`."""
    from .lint.database import ModelComparer, SnapshotReader
    from .lint.engine import run_check
    from .lint.revisions import read_directory
    from .lint.rules import escalated_rules, select_rules
    from .lint.settings import read_project_settings

    rules = select_rules(select, ignore, db)
    settings = read_project_settings(config)
    escalated = escalated_rules(settings)
    script = script_directory(config)
    directory = read_directory(script)
    if not db:
        return run_check(directory, rules, settings, None, escalated)
    schema = fence_schema(config)
    models = ModelComparer(config, script, schema) if any(rule.needs_models for rule in rules) else None
    on_disk = {item.revision: item.sha256 for item in directory.files if item.revision is not None}
    reader = SnapshotReader(schema, models, on_disk)
    try:
        env_reads.run_without_steps(config, reader.read, reads_only=True)
        snapshot = reader.snapshot()
    except FencemigrateError as error:
        if error.exit_status != ERROR.exit_status:  # bad usage, a signal: as they are
            raise
        raise CheckDatabaseUnreadable(error) from error
    return run_check(directory, rules, settings, snapshot, escalated)
