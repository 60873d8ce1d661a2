"""The fence calls of a migration context, for its dialect."""

from __future__ import annotations

from alembic.runtime.migration import MigrationContext

from ...errors import UsageError
from .base import FenceCalls
from .postgresql import PostgresFenceCalls
from .sqlite import SqliteFenceCalls

__all__ = ["FenceCalls", "PostgresFenceCalls", "SqliteFenceCalls", "fence_calls_for"]


def fence_calls_for(context: MigrationContext, quoted_schema: str) -> FenceCalls:
    """Plain statements on SQLite; the fence schema's SQL functions everywhere else (PostgreSQL).

    Refuses --sql on SQLite before anything is written: an offline script there could not
    claim the fence.
    """
    if context.dialect.name != "sqlite":
        return PostgresFenceCalls(context, quoted_schema)
    if context.as_sql:
        raise UsageError(
            "offline fencing (--sql) needs PostgreSQL: on SQLite the fence is claimed by the runner "
            "itself, not by statements a script could carry; run the command without --sql "
            "(nothing was written)"
        )
    return SqliteFenceCalls(context, quoted_schema)
