"""A command that the database's current state makes invalid, run under a superseded token, is
FENCED rather than bad usage: the writer's news is that its lease is stale, not that its command
is wrong (``reapply r02`` after a newer holder rolled r02 back, ``downgrade r01`` below r01)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from alembic.runtime.migration import MigrationContext

from ..errors import Fenced, TokenRequired, UsageError, newer_token_wrote
from ..fence_schema import installed_version
from ..queries import statement
from .settings import FenceSettings

if TYPE_CHECKING:  # fenced_run imports this module
    from .fenced_run import Planner


def plan_or_fenced(
    planner: Planner, settings: FenceSettings, heads: tuple[str, ...], context: MigrationContext
) -> tuple[list[Any], list[str]]:
    """``planner``'s steps; when it refuses the command, FENCED instead if a token newer than the
    run's has written to its resource (read only: the refusal rolls the transaction back anyway)."""
    try:
        return planner(heads, context)
    except TokenRequired:
        raise  # no token at all: the run's placeholder token says nothing about staleness
    except UsageError:
        refuse_if_superseded(settings, context)
        raise


def refuse_if_superseded(settings: FenceSettings, context: MigrationContext) -> None:
    """FENCED when a token newer than the run's has written to its resource; reads only (also with
    nothing to do, so that a stale token is told so without writing)."""
    connection = context.connection
    if settings.token <= 0 or context.as_sql or connection is None:
        return  # a token not known yet is the run's own, newest grant; a script cannot read the fence
    quoted_schema = context.dialect.identifier_preparer.quote(settings.schema)
    if installed_version(connection, quoted_schema) is None:
        return
    clause = statement("fence_token", quoted_schema, connection.dialect.name)
    fence = connection.execute(clause, {"resource": settings.resource}).scalar()
    if fence is not None and int(fence) > settings.token:
        reason = newer_token_wrote(int(fence), settings.resource)
        raise Fenced(settings.resource, settings.token, int(fence), reason) from None
