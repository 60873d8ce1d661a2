"""What a fenced run does once env.py has connected, before Alembic touches the database.

Called by :func:`.environment.run_env` (the ``on_connection`` hook): the run's mode is chosen for
the database; runners without a token, and pre-check mode, decide from the heads read now whether
anything is left to do, before any lease, lock or write; the run's own lease is acquired then (its
token goes to the run's :class:`.run_token.TokenSource`); pre-check mode takes its named lock, and
either mode commits the fence schema and the guarded version table before the first revision runs.
"""

from __future__ import annotations

from collections.abc import Callable

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine

from ..errors import TokenRequired, UsageError
from .outcome import DONE_BY_ANOTHER_RUNNER, NOTHING_TO_DO, RunOutcome
from .plans import NothingToDoProbe
from .precheck_run import PrecheckRun
from .run_choice import ChosenRun
from .run_request import RunRequest
from .superseded_plans import refuse_if_superseded


class RunConnection:
    """The ``on_connection`` hook of one attempt of a fenced run."""

    def __init__(
        self,
        request: RunRequest,
        run: ChosenRun,
        outcome: RunOutcome,
        engines: list[Engine],
        settled: Callable[[tuple[str, ...]], bool | None] | None,
    ) -> None:
        """``engines`` collects the engine of each connection (the FENCED event is logged through
        the last); ``settled`` answers from the revision files' declared heads when it can."""
        self._request = request
        self._run = run
        self._outcome = outcome
        self._engines = engines
        self._settled = settled

    def __call__(self, context: MigrationContext) -> None:
        assert context.connection is not None
        engine = self._request.own_engine(context.connection.engine)
        self._engines.append(engine)
        chosen = self._run.choose(context)
        tokens = self._request.settings.tokens
        leasing = tokens.takes_lease
        if leasing or isinstance(chosen, PrecheckRun):
            # Runners that queue behind one doing the work stop waiting once nothing is left.
            probe = NothingToDoProbe(self._run.planner, context, settled=self._settled)
            try:
                if self._nothing_to_do_now(probe):
                    chosen.expect_nothing_to_do(context)
                    self._outcome.no_lease = NOTHING_TO_DO if leasing else None
                else:
                    if leasing and tokens.acquire(engine, probe):
                        self._outcome.leased = True
                    elif leasing:
                        self._outcome.no_lease = DONE_BY_ANOTHER_RUNNER
                    if self._request.relative_to_heads and probe.resolved_from is not None:
                        self._request.settings.resolved_from.pin(probe.resolved_from)
            finally:
                probe.close()
        chosen.connected(context)

    def _nothing_to_do_now(self, probe: NothingToDoProbe) -> bool:
        """:meth:`NothingToDoProbe.nothing_to_do_now`; a command it refuses as bad usage is FENCED
        instead when a token newer than the run's has written (:func:`.superseded_plans.refuse_if_superseded`,
        read on the probe's connection), as the run's own plan would have it."""
        try:
            return probe.nothing_to_do_now()
        except TokenRequired:
            raise
        except UsageError:
            refuse_if_superseded(self._request.settings, probe.reads())
            raise
