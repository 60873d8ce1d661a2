"""A command that the database's current state makes invalid, run under a superseded token, is
FENCED rather than bad usage: the writer's news is that its lease is stale, not that its command
is wrong (``reapply r02`` after a newer holder rolled r02 back, ``downgrade r01`` below r01). A run
with nothing to do, which claims nothing, is refused here as its claim would refuse it: under a
superseded token, or a token its resource's lease service never issued."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from alembic.runtime.migration import MigrationContext

from ..dialects import installed_version
from ..errors import TokenRequired, UsageError
from ..fence.tokens import refuse_token
from ..queries import statement
from .settings import FenceSettings

if TYPE_CHECKING:  # fenced_run imports this module
    from .fenced_run import Planner


def plan_or_fenced(
    planner: Planner, settings: FenceSettings, heads: tuple[str, ...], context: MigrationContext
) -> tuple[list[Any], list[str]]:
    """``planner``'s steps; when it refuses the command, FENCED instead if a token newer than the
    run's has written to its resource (read only: the refusal rolls the transaction back anyway).
    FENCED before planning when the run's relative target was resolved from other heads."""
    settings.require_resolved_heads(heads)
    try:
        return planner(heads, context)
    except TokenRequired:
        raise  # no token at all: the run's placeholder token says nothing about staleness
    except UsageError:
        refuse_if_superseded(settings, context)
        raise


def refuse_if_superseded(settings: FenceSettings, context: MigrationContext) -> None:
    """FENCED when a token newer than the run's has written to its resource, or when the run's token
    is above the fence of a resource whose lease service never issued it (as the claim refuses it);
    reads only (also with nothing to do, so that a stale or forged token is told so without writing)."""
    connection = context.connection
    if settings.tokens.token is None or context.as_sql or connection is None:
        return  # a token not known yet is the run's own, newest grant; a script cannot read the fence
    quoted_schema = context.dialect.identifier_preparer.quote(settings.schema)
    version = installed_version(connection, quoted_schema)
    if version is None:
        return
    clause = statement("fence_source", quoted_schema, connection.dialect.name)
    row = connection.execute(clause, {"resource": settings.resource}).one_or_none()
    if row is not None:
        refuse_token(settings.resource, settings.token, int(row.token), row.token_source)
