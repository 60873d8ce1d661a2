"""The rule that runs Alembic's own ``check``: the models compared with the database (``check --db``)."""

from __future__ import annotations

from collections.abc import Iterator

from ..findings import Finding
from ..models import ModelComparison
from .base import CheckContext, Rule

NOT_RUN_WITHOUT_DATABASE = "model comparison (FM408, what alembic check does) not run: give --db"
"""The note of a check without ``--db``: with ``alembic`` aliased to fencemigrate, ``alembic check``
would otherwise lose the comparison silently."""


class ModelDrift(Rule):
    """FM408: the database differs from the models, as ``alembic check`` finds it."""

    id = "FM408"
    name = "model-drift"
    summary = (
        "the database differs from the models (env.py's target_metadata), as `alembic check` finds it: "
        "one finding per difference autogenerate would migrate (add_column users.email, remove_table legacy, "
        "modify_type, modify_nullable, ...); nothing when env.py has no target_metadata"
    )
    fix = (
        "write the revision that makes the database match the models (`alembic revision --autogenerate`, "
        "then review it), or change the models to match the database"
    )
    needs_database = True
    needs_models = True

    def check(self, context: CheckContext) -> Iterator[Finding]:
        for difference in _models(context).differences:
            yield self.finding(difference.message)

    def note(self, context: CheckContext) -> str | None:
        reason = _models(context).not_compared
        return None if reason is None else f"model comparison: {reason}"


def _models(context: CheckContext) -> ModelComparison:
    assert context.database is not None and context.database.models is not None, "FM408 runs only with --db"
    return context.database.models
