"""The rule that runs Alembic's own ``check``: the models compared with the database (``check --db``)."""

from __future__ import annotations

from collections.abc import Iterator

from ..findings import Finding
from ..models import ModelComparison
from .base import CheckContext, Rule

NOT_RUN_WITHOUT_DATABASE = "--no-db: neither the database nor the models compared (FM408, what alembic check does)"
"""The note of a check with ``--no-db``: the lint alone, which ``alembic check`` is not."""

# The note after the comparison, in the words ``alembic check`` prints (alembic/command.py, check()).
_DETECTED = "model comparison: New upgrade operations detected (FM408)"
_NONE_DETECTED = "model comparison: No new upgrade operations detected"


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
        models = _models(context)
        if models.not_compared is not None:
            return f"model comparison: {models.not_compared}"
        return _DETECTED if models.differences else _NONE_DETECTED


def _models(context: CheckContext) -> ModelComparison:
    assert context.database is not None and context.database.models is not None, "FM408 runs only with --db"
    return context.database.models
