"""Alembic's own ``check``: the models (env.py's ``target_metadata``) compared with the database.

Done as ``alembic.command.check`` does it, with an ``autogenerate.RevisionContext`` run on the
migration context env.py configured, so env.py's ``include_object``, ``include_name``,
``compare_type``, ``compare_server_default`` and ``process_revision_directives`` all apply. It
runs inside the env.py run that reads the rest of the database for ``check --db``: one connection,
nothing written, no revision file generated. The fence schema's own tables (SQLite and MySQL keep
them beside the application's) are fencemigrate's, not the models', and are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from alembic import autogenerate
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Dialect

from ..queries import prefixes_tables
from .fence_objects import installed_fence_objects
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
        self._fence_tables: set[tuple[str | None, str]] = set()
        self._not_compared = "env.py ran no migration context"

    def compare(self, heads: tuple[str, ...], context: MigrationContext) -> None:
        """Compare env.py's ``target_metadata`` with the database ``context`` is connected to."""
        if context.opts.get("target_metadata") is None:
            self._not_compared = "env.py has no target_metadata"
            return
        if set(self._script.get_revisions(heads)) != set(self._script.get_revisions("heads")):
            self._not_compared = "not run, the database is not at head"
            return
        self._revision_context.run_autogenerate(heads, context)
        self._dialect = context.dialect
        self._fence_tables |= self._fence_tables_of(context)

    def comparison(self) -> ModelComparison:
        """The differences, from the revision Alembic would generate, as ``alembic check`` reads them;
        a reason instead when no run compared anything."""
        if self._dialect is None:
            return ModelComparison((), self._not_compared)
        scripts = self._revision_context.generated_revisions  # process_revision_directives may empty it
        upgrade_ops_list = scripts[-1].upgrade_ops_list if scripts else []
        diffs = [diff for upgrade_ops in upgrade_ops_list for diff in upgrade_ops.as_diffs()]
        described = (describe(diff, self._dialect) for diff in _flattened(diffs))
        kept = [item for item in described if item.table not in self._fence_tables]
        return ModelComparison(tuple(sorted(kept, key=_order)))

    def _fence_tables_of(self, context: MigrationContext) -> set[tuple[str | None, str]]:
        """The fence schema's tables as Alembic names them: in their own schema on PostgreSQL, prefixed
        in the application's on SQLite and MySQL."""
        connection = context.connection
        assert connection is not None, "autogenerate needs a connection"
        quoted = context.dialect.identifier_preparer.quote(self._schema)
        names = {name for kind, name in installed_fence_objects(connection, quoted) if kind == "table"}
        if prefixes_tables(context.dialect.name):
            return {(None, name) for name in names}
        return {(self._schema, name) for name in names}


def _order(difference: ModelDifference) -> tuple[bool, str, str, bool, str]:
    """By table (Alembic's own order follows sets), the table itself before its columns and indexes;
    a column's ``modify_*`` keep Alembic's order (the sort is stable)."""
    schema, table = difference.table or (None, "")
    own = difference.subject == ".".join(part for part in (schema, table) if part)
    return difference.table is None, schema or "", table, not own, difference.subject


def _flattened(diffs: list[Any]) -> list[tuple[Any, ...]]:
    """One tuple per difference: Alembic lists a column's ``modify_*`` tuples together."""
    return [item for diff in diffs for item in (diff if isinstance(diff, list) else [diff])]
