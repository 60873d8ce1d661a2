"""The fence tables of any backend's database, read (and, for controls, written) with plain SQL."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa


def table(backend: str, name: str) -> str:
    """The fence table ``name`` as ``backend`` names it (a schema on PostgreSQL, a prefix elsewhere)."""
    return f"fencemigrate.{name}" if backend == "postgresql" else f"fencemigrate_{name}"


def rows(backend: str, url: str) -> dict[str, list[tuple[Any, ...]]]:
    """The fence row, the built-in lease row and the event log: what a refused call must leave alone."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            return {
                name: [tuple(row) for row in connection.execute(sa.text(f"SELECT * FROM {table(backend, name)}"))]
                for name in ("agent_fence", "lease", "fence_event")
            }
    finally:
        engine.dispose()


def plain_sql(backend: str, url: str, sql: str) -> None:
    """One statement, committed: the control's direct SQL."""
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.begin() as connection:
            connection.execute(sa.text(sql.replace("{fence}", table(backend, "agent_fence"))))
    finally:
        engine.dispose()
