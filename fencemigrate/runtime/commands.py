"""The commands that write through env.py: the fenced ones (``upgrade``, ``downgrade``, ``reapply``,
``stamp``), each checking its arguments, building its run request (:func:`.request.fenced_request`)
and handing it to the runner; and ``install`` (:mod:`..fence.install` does the work).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from alembic.config import Config
from alembic.runtime.migration import MigrationContext

from ..config import checked_resource, configured_backend, fence_schema
from ..dialects import offline_install_script
from ..errors import UsageError
from ..fence.guard import VersionTable
from ..fence.install import InstallOutcome, check_grant_to, check_version_table_owner, install_through
from .environment import run_without_steps
from .outcome import RunOutcome
from .plans import downgrade_plan, reapply_plan, stamp_plan, upgrade_plan
from .request import REAPPLY_KEYWORDS, fenced_request, require_token
from .revisions import split_range, stamp_range
from .runner import run_fenced


def upgrade(config: Config, revision: str, token: int | str | None, options: Mapping[str, Any]) -> RunOutcome:
    """See :func:`.api.upgrade`."""
    target = split_range(revision, options.get("sql", False), "upgrade")
    return run_fenced(fenced_request(config, "upgrade", target, upgrade_plan, token, options))


def downgrade(config: Config, revision: str, token: int | str | None, options: Mapping[str, Any]) -> RunOutcome:
    """See :func:`.api.downgrade`: offline, only a range FROM:TO."""
    sql = options.get("sql", False)
    target = split_range(revision, sql, "downgrade")
    if sql and target[0] is None:
        raise UsageError("downgrade with --sql needs a range FROM:TO")
    return run_fenced(fenced_request(config, "downgrade", target, downgrade_plan, token, options))


def reapply(config: Config, revision: str, token: int | str | None, options: Mapping[str, Any]) -> RunOutcome:
    """See :func:`.api.reapply`: a token (or a held grant) required, one transaction."""
    require_token("reapply", token, options.get("held_lease"))
    known = REAPPLY_KEYWORDS
    return run_fenced(fenced_request(config, "reapply", (None, revision), reapply_plan, token, options, known, True))


def stamp(
    config: Config, revisions: str | tuple[str, ...], purge: bool, token: int | str | None, options: Mapping[str, Any]
) -> RunOutcome:
    """See :func:`.api.stamp`: ``purge`` not offline."""
    sql = options.get("sql", False)
    if purge and sql:
        raise UsageError("Can't use --purge with --sql mode")
    target = stamp_range(revisions, sql)
    plan_for = partial(stamp_plan, purge_schema=fence_schema(config)) if purge else stamp_plan
    return run_fenced(fenced_request(config, "stamp", target, plan_for, token, options))


def install_fence_schema(
    config: Config, sql: bool, grant_to: str | None, tokenless_writes: str | None
) -> InstallOutcome:
    """``fencemigrate install`` (see :func:`.api.install`), its options checked before anything is touched."""
    schema = fence_schema(config)
    resource = checked_resource(config, None)
    check_grant_to(grant_to, configured_backend(config), sql)
    if tokenless_writes not in (None, "allow", "forbid"):
        raise UsageError(f"tokenless_writes must be 'allow' or 'forbid', not {tokenless_writes!r}")
    if sql:
        if tokenless_writes is not None:
            raise UsageError("--allow-tokenless-writes and --forbid-tokenless-writes change a database: not with --sql")
        return InstallOutcome(sql=offline_install_script(configured_backend(config), schema))
    outcome = InstallOutcome()

    def install(heads: tuple[str, ...], context: MigrationContext) -> list[Any]:
        install_through(context, schema, grant_to, tokenless_writes, outcome, resource)
        return []

    def before_alembic(context: MigrationContext) -> None:
        # Alembic reads the version table first: a table the installing role cannot take is refused
        # before that read fails.
        assert context.connection is not None and grant_to is not None
        external = context.connection.in_transaction()
        quoted = context.dialect.identifier_preparer.quote(schema)
        check_version_table_owner(context.connection, quoted, grant_to, VersionTable.of(context).relation(context))
        if not external:
            context.connection.rollback()

    run_without_steps(config, install, on_connection=None if grant_to is None else before_alembic)
    return outcome  # as it was when env.py never ran the migration context
