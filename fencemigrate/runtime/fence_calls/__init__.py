"""The fence calls of a migration context, for its dialect."""

from __future__ import annotations

from alembic.runtime.migration import MigrationContext

from ...errors import UsageError
from ...queries import query_dialect
from .base import FenceCalls
from .plain import PlainStatementCalls
from .postgresql import PostgresFenceCalls
from .sqlite import SqliteFenceCalls

__all__ = ["FenceCalls", "PlainStatementCalls", "PostgresFenceCalls", "SqliteFenceCalls", "fence_calls_for"]


def fence_calls_for(context: MigrationContext, quoted_schema: str) -> FenceCalls:
    """The fence schema's SQL functions on PostgreSQL; plain statements on SQLite and MySQL.

    Refuses --sql on SQLite and MySQL before anything is written: an offline script there could
    not claim the fence.
    """
    dialect = query_dialect(context.dialect.name)
    if dialect not in ("sqlite", "mysql"):
        return PostgresFenceCalls(context, quoted_schema)
    if context.as_sql:
        name = "SQLite" if dialect == "sqlite" else "MySQL/MariaDB"
        raise UsageError(
            f"offline fencing (--sql) needs PostgreSQL: on {name} the fence is claimed by the runner "
            "itself, not by statements a script could carry; run the command without --sql "
            "(nothing was written)"
        )
    if dialect == "mysql":
        return PlainStatementCalls(context, quoted_schema)
    return SqliteFenceCalls(context, quoted_schema)
