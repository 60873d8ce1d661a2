"""Alembic's own ``check``: the models (env.py's ``target_metadata``) compared with the database.

Done as ``alembic.command.check`` does it, with an ``autogenerate.RevisionContext`` run on the
migration context env.py configured, so env.py's ``include_object``, ``include_name``,
``compare_type``, ``compare_server_default`` and ``process_revision_directives`` all apply. It
runs inside the env.py run that reads the rest of the database for ``check --db``: one connection,
nothing written, no revision file generated. The fence's own tables and schema are left out as
``revision --autogenerate`` leaves them out (``fence_filter``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from alembic import autogenerate
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Dialect

from .fence_filter import fence_left_out
from .model_differences import ModelDifference, describe

# What `alembic check` gives its RevisionContext (alembic/command.py, check()).
_COMMAND_ARGS: dict[str, Any] = {
    "message": None,
    "autogenerate": True,
    "sql": False,
    "head": "head",
    "splice": False,
    "branch_label": None,
    "version_path": None,
    "rev_id": None,
    "depends_on": None,
}


@dataclass(frozen=True)
class ModelComparison:
    """The differences found, or why the models were not compared (``not_compared``)."""

    differences: tuple[ModelDifference, ...]
    not_compared: str | None = None


class ModelComparer:
    """Compares the models with the database each time env.py runs the migration context (once,
    or once per database in a multi-database env.py), then gives the comparison."""

    def __init__(self, config: Config, script: ScriptDirectory, schema: str) -> None:
        self._script = script
        self._schema = schema
        self._revision_context = autogenerate.RevisionContext(config, script, dict(_COMMAND_ARGS))
        self._dialect: Dialect | None = None
        self._not_compared = "env.py ran no migration context"

    def compare(self, heads: tuple[str, ...], context: MigrationContext) -> None:
        """Compare env.py's ``target_metadata`` with the database ``context`` is connected to."""
        if context.opts.get("target_metadata") is None:
            self._not_compared = "env.py has no target_metadata"
            return
        if set(self._script.get_revisions(heads)) != set(self._script.get_revisions("heads")):
            self._not_compared = "not run: Target database is not up to date"  # alembic check's words
            return
        with fence_left_out(context, self._schema):
            self._revision_context.run_autogenerate(heads, context)
        self._dialect = context.dialect

    def comparison(self) -> ModelComparison:
        """The differences, from the revision Alembic would generate, as ``alembic check`` reads them;
        a reason instead when no run compared anything."""
        if self._dialect is None:
            return ModelComparison((), self._not_compared)
        scripts = self._revision_context.generated_revisions  # process_revision_directives may empty it
        upgrade_ops_list = scripts[-1].upgrade_ops_list if scripts else []
        diffs = [diff for upgrade_ops in upgrade_ops_list for diff in upgrade_ops.as_diffs()]
        described = [describe(diff, self._dialect) for diff in _flattened(diffs)]
        return ModelComparison(tuple(sorted(described, key=_order)))


def _order(difference: ModelDifference) -> tuple[bool, str, str, bool, str]:
    """By table (Alembic's own order follows sets), the table itself before its columns and indexes;
    a column's ``modify_*`` keep Alembic's order (the sort is stable)."""
    schema, table = difference.table or (None, "")
    own = difference.subject == ".".join(part for part in (schema, table) if part)
    return difference.table is None, schema or "", table, not own, difference.subject


def _flattened(diffs: list[Any]) -> list[tuple[Any, ...]]:
    """One tuple per difference: Alembic lists a column's ``modify_*`` tuples together."""
    return [item for diff in diffs for item in (diff if isinstance(diff, list) else [diff])]
