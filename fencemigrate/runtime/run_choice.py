"""One attempt of a fenced run, in the mode chosen once env.py has configured its database."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection

from ..dialects import PRECHECK, Dialect, dialect_for
from ..dialects.waits import WaitBound
from ..errors import UsageError
from ..progress import SILENT, Progress
from .fenced_run import FencedRun, Planner
from .modes import mode_for
from .outcome import RunOutcome
from .precheck_run import PrecheckRun
from .precheck_script import PrecheckScript
from .settings import FenceSettings

PREEMPT_ON_SQLITE = (
    "--preempt is not available on SQLite: a run cannot end another process's SQLite transaction; "
    "wait for the writer in flight with --wait instead (nothing was changed)"
)


@dataclass(frozen=True)
class RunChoice:
    """What decides the mode: ``--mode``, --sql, and how a run waits for a lock another writer holds
    in the database (the fence, SQLite's write lock, pre-check mode's named lock): ``--wait``, and
    ``--preempt`` to end a stale holder."""

    requested: str | None
    offline: bool
    lock_wait_ms: int
    preempt: bool = False

    def per_migration(self, connection: Connection) -> bool:
        """Pre-check mode: each revision in a transaction of its own, whatever env.py says (or a
        reapply would ask), so that its mark commits before its DDL on PostgreSQL. MySQL, which
        commits DDL on its own, runs each revision in a transaction of its own anyway."""
        return mode_for(connection.dialect.name, self.requested, False) == PRECHECK

    def runs(
        self,
        settings: FenceSettings,
        planner: Planner,
        outcome: RunOutcome,
        progress: Progress = SILENT,
    ) -> ChosenRun:
        """The run of one attempt; its mode is chosen by :meth:`ChosenRun.choose`; ``progress``
        hears of each step as it starts."""
        return ChosenRun(self, settings, planner, outcome, progress)


class ChosenRun:
    """Builds the transactional :class:`FencedRun` or the :class:`PrecheckRun` for the database."""

    def __init__(
        self,
        choice: RunChoice,
        settings: FenceSettings,
        planner: Planner,
        outcome: RunOutcome,
        progress: Progress = SILENT,
    ) -> None:
        self._choice = choice
        self._progress = progress
        self._settings = settings
        self.planner = planner
        self._outcome = outcome
        self._run: FencedRun | PrecheckRun | PrecheckScript | None = None
        self._dialect: Dialect | None = None  # whose BEGINs wait as the run does, until it finishes

    def choose(self, context: MigrationContext) -> FencedRun | PrecheckRun | PrecheckScript:
        """The run for ``context``'s database (chosen once, before Alembic touches it)."""
        if self._run is None:
            choice = self._choice
            mode = mode_for(context.dialect.name, choice.requested, bool(context.as_sql))
            if choice.preempt and not self._settings.tokens.takes_lease and not dialect_for(context).can_preempt:
                raise UsageError(PREEMPT_ON_SQLITE)  # a run's own lease refuses it before its grant
            waits = WaitBound(choice.lock_wait_ms, choice.preempt, self._progress)
            if not context.as_sql:
                self._dialect = dialect_for(context)
                self._dialect.wait_at_begins(self._settings.resource, waits)
            if mode == PRECHECK and context.as_sql:
                self._run = PrecheckScript(self._settings, self.planner, self._outcome, waits)
            elif mode == PRECHECK:
                self._run = PrecheckRun(self._settings, self.planner, self._outcome, waits, self._progress)
            else:
                self._run = FencedRun(self._settings, self.planner, self._outcome, self._progress, waits)
            self._outcome.mode = mode
        return self._run

    def migrations_fn(self, heads: tuple[str, ...], context: MigrationContext) -> Any:
        """Alembic's migration function: the chosen run's (chosen now for offline scripts)."""
        return self.choose(context).migrations_fn(heads, context)

    def finish(self) -> None:
        """Release what the run holds past its transactions (pre-check mode's named lock), and end
        its way of waiting at BEGIN (SQLite)."""
        if isinstance(self._run, PrecheckRun):
            self._run.finish()
        if self._dialect is not None:
            self._dialect.wait_at_begins(self._settings.resource, None)
            self._dialect = None
