"""Alembic's autogenerate differences (``UpgradeOps.as_diffs()``, what ``alembic check`` lists) in words.

Each diff tuple becomes one :class:`ModelDifference`: the operation and what it is about
(``add_column users.email``), and a sentence saying which side has what. Types are rendered for
the database's dialect, as a DBA reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Index, Table
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import CompileError
from sqlalchemy.schema import ColumnCollectionConstraint, Constraint, DefaultClause, ForeignKeyConstraint
from sqlalchemy.sql.elements import ClauseElement, TextClause

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
