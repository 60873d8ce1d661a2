"""A fenced command as the API asked for it: what to plan, under which identity and token, how to run it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from ..progress import SILENT, Progress
from .applied_downgrades import running_applied_downgrades
from .database_ahead import refusing_missing_heads
from .fenced_run import Planner
from .revisions import relative_to_heads
from .run_choice import RunChoice
from .settings import FenceSettings


@dataclass(frozen=True)
class RunRequest:
    """One fenced ``upgrade``, ``downgrade``, ``reapply`` or ``stamp``, checked and ready to run."""

    config: Config
    script: ScriptDirectory
    command: str
    destination: str | tuple[str, ...]  # a stamp's are a tuple
    plan_for: Callable[[ScriptDirectory, Any], Planner]
    settings: FenceSettings
    choice: RunChoice
    own_engine: Callable[[Engine], Engine]  # the engine of the run's own connections (synchronous)
    start: str | None = None  # --sql's FROM
    tag: str | None = None
    single_transaction: bool = False  # overrides env.py's transaction_per_migration=True
    progress: Progress = SILENT

    @property
    def target(self) -> str:
        """The destination as the event log names it."""
        return ", ".join(self.destination) if isinstance(self.destination, tuple) else self.destination

    @property
    def relative_to_heads(self) -> bool:
        """The destination counts from the database's heads (``-1``): resolved from the heads read
        before the lease, the run writes only from those (:class:`.ResolvedFrom`)."""
        return relative_to_heads(self.destination)

    def planner(self) -> Planner:
        """The steps of one attempt, planned from the heads env.py's connection reads (DatabaseAhead
        when the revision files lack one of them); a revision whose file changed since it was applied
        is rolled back with the applied text's downgrade() (:mod:`.applied_downgrades`)."""
        plan = running_applied_downgrades(self.plan_for(self.script, self.destination), self.settings)
        return refusing_missing_heads(plan, self.script, self.settings)
