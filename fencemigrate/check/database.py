"""What ``check --db`` reads from the database, through env.py's migration context."""

from __future__ import annotations

from dataclasses import dataclass

from alembic.runtime.migration import MigrationContext

from ..state import State, read_state


@dataclass(frozen=True)
class DatabaseSnapshot:
    """Heads, ledger and fence schema version (``state``), and how the fence schema differs from
    fencemigrate's (``fence_problems``; empty when it does not, or is not installed)."""

    schema: str
    state: State
    fence_problems: tuple[str, ...]


def read_snapshot(context: MigrationContext, schema: str) -> DatabaseSnapshot:
    """Read the state, which compares the fence schema with the install scripts when it is installed."""
    state = read_state(context, schema)
    return DatabaseSnapshot(schema, state, tuple(state.fence_schema_problems))
