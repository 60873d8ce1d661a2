"""What ``check --db`` reads from the database, through env.py's migration context, and Alembic's own
``check``: the models (env.py's ``target_metadata``) compared with the database.

The comparison is done as ``alembic.command.check`` does it, with an ``autogenerate.RevisionContext``
run on the migration context env.py configured, so env.py's ``include_object``, ``include_name``,
``compare_type``, ``compare_server_default`` and ``process_revision_directives`` all apply. It
runs inside the env.py run that reads the rest of the database: one connection, nothing written,
no revision file generated. The fence's own tables and schema are left out as
``revision --autogenerate`` leaves them out (``fence_filter``).

Each of Alembic's differences (``UpgradeOps.as_diffs()``, what ``alembic check`` lists) becomes one
:class:`ModelDifference` in words: the operation and what it is about (``add_column users.email``),
and a sentence saying which side has what, types rendered for the database's dialect."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from alembic import autogenerate
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, Index, Table
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import CompileError
from sqlalchemy.schema import ColumnCollectionConstraint, Constraint, DefaultClause, ForeignKeyConstraint
from sqlalchemy.sql.elements import ClauseElement, TextClause

from ..errors import FencemigrateError
from ..fence.ledger import read_applied_texts
from ..fence.objects import fence_left_out
from ..fence.state import State, read_state

_CONSTRAINT_KINDS = {
    "UniqueConstraint": "unique constraint",
    "CheckConstraint": "check constraint",
    "PrimaryKeyConstraint": "primary key",
}


@dataclass(frozen=True)
class ModelDifference:
    """One difference between the models and the database: Alembic's operation, its subject
    (``users.email``), the table it is on, and a message."""

    operation: str
    subject: str
    table: tuple[str | None, str] | None
    message: str


def describe(diff: tuple[Any, ...], dialect: Dialect) -> ModelDifference:
    """The difference that one of Alembic's diff tuples stands for."""
    operation = diff[0]
    if operation in ("add_table", "remove_table"):
        table: Table = diff[1]
        subject = _name(table.schema, table.name)
        return _difference(operation, subject, (table.schema, table.name), _present(operation, f"table {subject}"))
    if operation in ("add_column", "remove_column"):
        schema, table_name, column = diff[1], diff[2], diff[3]
        subject = _name(schema, table_name, column.name)
        return _difference(
            operation,
            subject,
            (schema, table_name),
            _present(operation, f"column {subject} ({_column(column, dialect)})"),
        )
    if operation.startswith("modify_"):
        return _modified(diff, dialect)
    if operation in ("add_index", "remove_index"):
        index: Index = diff[1]
        indexed = index.table
        assert indexed is not None
        columns = ", ".join(str(getattr(item, "name", item)) for item in index.expressions)
        unique = "unique index" if index.unique else "index"
        what = f"{unique} {index.name} on {_name(indexed.schema, indexed.name)} ({columns})"
        return _difference(operation, str(index.name), (indexed.schema, indexed.name), _present(operation, what))
    if operation in ("add_constraint", "remove_constraint", "add_fk", "remove_fk"):
        return _constraint(operation, diff[1])
    if operation in ("add_table_comment", "remove_table_comment"):
        table = diff[1]
        subject = _name(table.schema, table.name)
        database = _comment(diff[2]) if operation == "add_table_comment" else "a comment"
        models = _comment(table.comment) if operation == "add_table_comment" else "no comment"
        text = f"{database} in the database, {models} in the models"
        return _difference(operation, subject, (table.schema, table.name), text)
    return ModelDifference(operation, "", None, f"{operation}: {diff[1:]!r}")


def _difference(operation: str, subject: str, table: tuple[str | None, str] | None, text: str) -> ModelDifference:
    return ModelDifference(operation, subject, table, f"{operation} {subject}: {text}")


def _present(operation: str, what: str) -> str:
    """``what`` is on one side only: the models' for an ``add_``, the database's for a ``remove_``."""
    if operation.startswith("add"):
        return f"{what} is in the models but not in the database"
    return f"{what} is in the database but not in the models"


def _modified(diff: tuple[Any, ...], dialect: Dialect) -> ModelDifference:
    """``modify_type``, ``modify_nullable``, ``modify_default``, ``modify_comment`` of one column."""
    operation, schema, table_name, column_name, _existing, database, models = diff
    subject = _name(schema, table_name, column_name)
    if operation == "modify_type":
        database, models = _type(database, dialect), _type(models, dialect)
    elif operation == "modify_nullable":
        database, models = _nullable(database), _nullable(models)
    elif operation == "modify_default":
        database, models = _default(database), _default(models)
    elif operation == "modify_comment":
        database, models = _comment(database), _comment(models)
    text = f"{database} in the database, {models} in the models"
    return _difference(operation, subject, (schema, table_name), text)


def _constraint(operation: str, constraint: Constraint) -> ModelDifference:
    table = constraint.table
    assert isinstance(table, Table)
    where = _name(table.schema, table.name)
    name = str(constraint.name) if constraint.name else "(unnamed)"
    columns = (
        ", ".join(column.name for column in constraint.columns)
        if isinstance(constraint, ColumnCollectionConstraint)
        else ""
    )
    if isinstance(constraint, ForeignKeyConstraint):
        target = ", ".join(element.target_fullname for element in constraint.elements)
        what = f"foreign key {name} on {where} ({columns}) referencing {target}"
    else:
        kind = _CONSTRAINT_KINDS.get(type(constraint).__name__, "constraint")
        what = f"{kind} {name} on {where}" + (f" ({columns})" if columns else "")
    return _difference(operation, name, (table.schema, table.name), _present(operation, what))


def _name(*parts: str | None) -> str:
    return ".".join(part for part in parts if part)


def _column(column: Column[Any], dialect: Dialect) -> str:
    text = _type(column.type, dialect) + ("" if column.nullable else " NOT NULL")
    if column.server_default is not None:
        text += f", {_default(column.server_default)}"
    return text


def _type(type_: Any, dialect: Dialect) -> str:
    """The type as the database's dialect writes it (its repr if that dialect cannot)."""
    if type_ is None:
        return "no type"
    try:
        return str(type_.compile(dialect=dialect))
    except CompileError:
        return repr(type_)


def _nullable(nullable: bool | None) -> str:
    return "NULL allowed" if nullable else "NOT NULL"


def _comment(comment: str | None) -> str:
    return "no comment" if comment is None else f"comment {comment!r}"


def _default(default: Any) -> str:
    """A server default as its SQL text: ``default now()``, or ``no default``."""
    if default is None or default is False:
        return "no default"
    value = default.arg if isinstance(default, DefaultClause) else default
    if isinstance(value, str):  # a model's server_default="text" is a string literal
        value = "'" + value.replace("'", "''") + "'"
    elif isinstance(value, TextClause):
        value = value.text
    elif isinstance(value, ClauseElement):
        value = str(value)
    return f"default {value}"


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


@dataclass(frozen=True)
class DatabaseSnapshot:
    """Heads, ledger and fence schema version (``state``), how the fence schema differs from
    fencemigrate's (``fence_problems``; empty when it does not, or is not installed), how the
    models differ from the database (``models``; None when no rule asked), and the text the ledger
    recorded of each revision whose file no longer has the applied sha256 (``applied_texts``; None:
    not recorded)."""

    schema: str
    state: State
    fence_problems: tuple[str, ...]
    models: ModelComparison | None = None
    applied_texts: dict[str, str | None] = dataclasses.field(default_factory=dict)


def read_snapshot(context: MigrationContext, schema: str, on_disk: dict[str, str] | None = None) -> DatabaseSnapshot:
    """Read the state, which compares the fence schema with the install scripts when it is installed,
    and the applied text of each ledger row whose revision's file on disk (``on_disk``: revision ->
    sha256) has another sha256."""
    state = read_state(context, schema)
    files = on_disk or {}
    drifted = [
        row.revision
        for row in state.ledger
        if row.revision in files and row.script_sha256 not in (None, files[row.revision])
    ]
    texts = read_applied_texts(context, schema, drifted) if drifted else {}
    return DatabaseSnapshot(schema, state, tuple(state.fence_schema_problems), applied_texts=texts)


class SnapshotReader:
    """The migration function that reads the snapshot inside env.py's run (``read``), comparing the
    models too when ``models`` is given; ``snapshot()`` after the run."""

    def __init__(self, schema: str, models: ModelComparer | None, on_disk: dict[str, str] | None = None) -> None:
        self._schema = schema
        self._models = models
        self._on_disk = on_disk
        self._found: list[DatabaseSnapshot] = []

    def read(self, heads: tuple[str, ...], context: MigrationContext) -> list[Any]:
        """Alembic's migration function: read, and return no step to run."""
        if not self._found:
            self._found.append(read_snapshot(context, self._schema, self._on_disk))
        if self._models is not None:
            self._models.compare(heads, context)
        return []

    def snapshot(self) -> DatabaseSnapshot:
        """The snapshot of the first database env.py ran on, with the models' comparison."""
        if not self._found:
            raise FencemigrateError("env.py did not run the migration context; cannot read the database")
        found = self._found[0]
        return found if self._models is None else dataclasses.replace(found, models=self._models.comparison())
