"""The attempts of a fenced run: env.py runs again with a new plan while the heads move under it."""

from __future__ import annotations

from functools import partial

from sqlalchemy import Engine

from ..errors import Fenced, FencemigrateError, HeadsMoved, LeaseLost
from .environment import FENCED_RUN_ATTRIBUTE, run_env
from .outcome import RunOutcome
from .plans import upgrade_settled
from .run_connection import RunConnection
from .run_request import RunRequest

PLANNING_ATTEMPTS = 5


def plan_and_run(request: RunRequest, engines: list[Engine]) -> RunOutcome:
    """Run env.py with the fenced migration function; plan again while the heads move under us.

    ``engines`` collects the engine of each connection env.py configures (see :class:`.RunConnection`).
    """
    config, script, settings = request.config, request.script, request.settings
    # A runner queued behind the one doing an upgrade learns it is done from the revision files'
    # declared heads when it can, without importing every revision module.
    destination = request.destination
    settled = (
        partial(upgrade_settled, script, destination)
        if isinstance(destination, str) and request.command == "upgrade"
        else None
    )
    offline = request.choice.offline  # --sql
    for _ in range(PLANNING_ATTEMPTS):
        outcome = RunOutcome(request.command, settings.resource, settings.holder, settings.tokens, offline=offline)
        run = request.choice.runs(settings, request.planner(), outcome, progress=request.progress)
        config.attributes[FENCED_RUN_ATTRIBUTE] = run
        try:
            outcome.forced_single_transaction = run_env(
                config,
                script,
                run.migrations_fn,
                resource=settings.resource,
                tokens=settings.tokens,
                writes=not offline,
                single_transaction=request.single_transaction,
                on_connection=RunConnection(request, run, outcome, engines, settled),
                per_migration=request.choice.per_migration,
                as_sql=offline,
                starting_rev=request.start,
                destination_rev=request.destination,
                tag=request.tag,
            )
            run.finish()
            outcome.lease_renewals = settings.tokens.renewals
            failure = settings.tokens.release()
            if failure is not None:
                outcome.lease_note = failure.reason if isinstance(failure, LeaseLost) else str(failure)
            return outcome
        except HeadsMoved:
            continue  # rolled back before any DDL: plan again from the new heads
        except Fenced as fenced:
            if outcome.autocommitted:
                raise fenced.after_autocommit_blocks(tuple(outcome.autocommitted)) from None
            raise
        finally:
            run.finish()
            config.attributes.pop(FENCED_RUN_ATTRIBUTE, None)
    raise FencemigrateError(
        f"the database's heads kept changing under concurrent writers ({PLANNING_ATTEMPTS} attempts); "
        "nothing was applied by this run"
    )
