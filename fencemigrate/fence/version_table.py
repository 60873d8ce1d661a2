"""``ensure_version``: Alembic's empty version table, guarded on a fenced database exactly as
``fencemigrate install`` leaves a new one (:func:`.guard.guard_first_write`).

It changes no version, so it needs no token; but a version table created unguarded on a fenced
database would let plain ``alembic``'s first write through unseen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from ..alembic_internals import create_version_table, per_migration_transaction
from ..dialects import installed_version
from .guard import ALLOWED, GUARDED, VersionTable, guard_first_write, guard_state


@dataclass(frozen=True)
class EnsuredVersionTable:
    """The version table after ``ensure_version``."""

    version_table: str
    offline: bool
    created: bool = False
    guard: str | None = None  # None: the database is not fenced; else "refused", "allowed", "unguarded"

    def as_json(self) -> dict[str, Any]:
        """JSON form, in ``ensure_version --json``."""
        return {
            "status": "ok",
            "version_table": self.version_table,
            "offline": self.offline,
            "created": self.created,
            "tokenless_writes": self.guard,
        }

    def text(self) -> str:
        """One line for the terminal."""
        done = "created" if self.created else "already there"
        if self.guard == GUARDED:
            return (
                f"version table {self.version_table}: {done}; "
                "guarded (the database refuses writes to it without a fencing token)"
            )
        if self.guard == ALLOWED:
            return f"version table {self.version_table}: {done}; tokenless writes allowed (opted out)"
        if self.guard is not None:
            return f"version table {self.version_table}: {done}; not guarded (`fencemigrate install` guards it)"
        return f"version table {self.version_table}: {done}; the database is not fenced (no fence schema)"


def ensure_version_table(context: MigrationContext, quoted_schema: str) -> EnsuredVersionTable:
    """Create the version table env.py configured when it is missing (in one transaction with its
    guard); offline, write its ``CREATE TABLE`` to the script as Alembic does."""
    table = VersionTable.of(context)
    if context.as_sql:
        create_version_table(context)
        return EnsuredVersionTable(table.name, offline=True)
    assert context.connection is not None
    with per_migration_transaction(context):
        created = not inspect(context.connection).has_table(context.version_table, context.version_table_schema)
        create_version_table(context)
        guard_first_write(context, quoted_schema)
        fenced = installed_version(context.connection, quoted_schema) is not None
        state = guard_state(context, quoted_schema) if fenced else None
    return EnsuredVersionTable(
        table.name, offline=False, created=created, guard=state.status if state is not None else None
    )
