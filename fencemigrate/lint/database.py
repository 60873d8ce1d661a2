"""What ``check --db`` reads from the database, through env.py's migration context."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from alembic.runtime.migration import MigrationContext

from ..applied_sources import read_applied_texts
from ..errors import FencemigrateError
from ..fence.state import State, read_state
from .models import ModelComparer, ModelComparison


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
