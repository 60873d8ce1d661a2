"""The commands that only read the database through env.py (``state``, ``timeline``, ``show
--applied``) and ``ensure_version``, which writes no version: each one env.py run, no lease."""

from __future__ import annotations

from alembic.config import Config

from ..config import check_resource, fence_schema
from ..fence.ledger import AppliedSource, applied_source
from ..fence.state import State, read_state
from ..fence.timeline import Event, parse_since, read_timeline
from ..fence.version_table import EnsuredVersionTable, ensure_version_table
from . import environment
from .revisions import script_directory


def state(config: Config) -> State:
    """See :func:`.api.state`."""
    schema = fence_schema(config)
    return environment.read_once(config, lambda heads, context: read_state(context, schema), "cannot read state")


def timeline(config: Config, resource: str | None, since: str | None) -> list[Event]:
    """See :func:`.api.timeline`: the arguments checked before env.py runs."""
    schema = fence_schema(config)
    name = None if resource is None else check_resource(resource)
    start = None if since is None else parse_since(since)
    read = lambda heads, context: read_timeline(context, schema, name, start)  # noqa: E731
    return environment.read_once(config, read, "cannot read the timeline")


def show_applied(config: Config, rev: str) -> AppliedSource:
    """See :func:`.api.show` (``applied``)."""
    schema = fence_schema(config)
    read = lambda heads, context: applied_source(context, schema, rev)  # noqa: E731
    return environment.read_once(config, read, "cannot read the ledger")


def ensure_version(config: Config, sql: bool) -> EnsuredVersionTable:
    """See :func:`.api.ensure_version`."""
    schema, script = fence_schema(config), script_directory(config)
    ensure = lambda heads, context: ensure_version_table(  # noqa: E731
        context, context.dialect.identifier_preparer.quote(schema)
    )
    return environment.read_once(config, ensure, "no version table was created", script=script, as_sql=sql)
