"""The fenced commands (``upgrade``, ``downgrade``, ``reapply``, ``stamp``): each checks its
arguments, builds its run request (:func:`.request.fenced_request`) and hands it to the runtime.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from alembic.config import Config

from ..config import fence_schema
from ..errors import UsageError
from .outcome import RunOutcome
from .plans import downgrade_plan, reapply_plan, stamp_plan, upgrade_plan
from .request import REAPPLY_KEYWORDS, fenced_request, require_token
from .revisions import split_range, stamp_range
from .runner import run_fenced


def upgrade(config: Config, revision: str, options: Mapping[str, Any]) -> RunOutcome:
    """See :func:`.api.upgrade`."""
    target = split_range(revision, options.get("sql", False), "upgrade")
    return run_fenced(fenced_request(config, "upgrade", target, upgrade_plan, options))


def downgrade(config: Config, revision: str, options: Mapping[str, Any]) -> RunOutcome:
    """See :func:`.api.downgrade`: offline, only a range FROM:TO."""
    sql = options.get("sql", False)
    target = split_range(revision, sql, "downgrade")
    if sql and target[0] is None:
        raise UsageError("downgrade with --sql needs a range FROM:TO")
    return run_fenced(fenced_request(config, "downgrade", target, downgrade_plan, options))


def reapply(config: Config, revision: str, options: Mapping[str, Any]) -> RunOutcome:
    """See :func:`.api.reapply`: a token (or a held grant) required, one transaction."""
    require_token("reapply", options.get("token"), options.get("held_lease"))
    known = REAPPLY_KEYWORDS
    return run_fenced(fenced_request(config, "reapply", (None, revision), reapply_plan, options, known, True))


def stamp(config: Config, revisions: str | tuple[str, ...], purge: bool, options: Mapping[str, Any]) -> RunOutcome:
    """See :func:`.api.stamp`: ``purge`` not offline."""
    sql = options.get("sql", False)
    if purge and sql:
        raise UsageError("Can't use --purge with --sql mode")
    target = stamp_range(revisions, sql)
    plan_for = partial(stamp_plan, purge_schema=fence_schema(config)) if purge else stamp_plan
    return run_fenced(fenced_request(config, "stamp", target, plan_for, options))
