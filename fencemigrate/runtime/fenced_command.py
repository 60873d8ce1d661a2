"""Run a fenced command: its attempts, FENCED told and logged, and the run's own lease released."""

from __future__ import annotations

from sqlalchemy import Engine

from ..errors import DatabaseError, Fenced, LeaseLost
from .fenced_log import told_and_logged
from .outcome import RunOutcome
from .replanning import plan_and_run
from .run_request import RunRequest


def run_fenced(request: RunRequest) -> RunOutcome:
    """What ``request`` did; the lease the run took itself is released at the end, also on failure."""
    engines: list[Engine] = []
    tokens = request.settings.tokens
    try:
        return plan_and_run(request, engines)
    except Fenced as fenced:
        raise told_and_logged(engines[-1] if engines else None, request, fenced) from None
    except DatabaseError as error:
        # A grant with --preempt terminates a stale run's connection: say that, not "database error".
        lost = tokens.release()
        if not isinstance(lost, LeaseLost):
            raise
        raise lost from error
    finally:
        tokens.release()
