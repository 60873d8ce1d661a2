"""``fencemigrate resolve``: settle a dirty revision deliberately, under the fence and the named lock.

The command runs through env.py (:func:`resolve_dirty`): the revision is checked, then settled by
:class:`ResolveRun`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from alembic.config import Config
from alembic.runtime.migration import HeadMaintainer, MigrationContext, StampStep

from ..alembic_internals import revisions_below
from ..dialects import dialect_for, installed_version
from ..dialects.fence_calls import claim_fence
from ..dialects.statements import statement
from ..dialects.waits import NamedLock, WaitBound
from ..errors import FencemigrateError, UsageError
from ..fence.events import log_event
from ..fence.ledger import Ledger, Unsettled, unsettled_revisions, version_table_name
from .environment import FENCED_RUN_ATTRIBUTE, run_env
from .request import APPLIED, ROLLED_BACK, Claimant
from .revisions import RELATIVE, require_known, script_directory


@dataclass
class ResolveOutcome:
    """What ``resolve`` settled."""

    resource: str
    revision: str
    token: int
    holder: str
    resolved_as: str
    was: str  # 'applying' or 'rolling_back'
    started_token: int
    heads: list[str]

    def as_json(self) -> dict[str, Any]:
        """JSON form, printed by ``resolve --json``."""
        return {"status": "ok", **vars(self)}


class ResolveRun:
    """Alembic's migration function for ``resolve``: it changes the ledger and the version table itself
    and hands Alembic no steps."""

    def __init__(self, claimant: Claimant, revision: str, resolved_as: str, lock_wait_ms: int) -> None:
        self.claimant = claimant
        self.revision = revision
        self.resolved_as = resolved_as
        self.lock_wait_ms = lock_wait_ms
        self.outcome: ResolveOutcome | None = None
        self._lock: NamedLock | None = None
        self._external = False

    def connected(self, context: MigrationContext) -> None:
        """Note whether env.py began a transaction of its own: then env.py commits, not resolve."""
        assert context.connection is not None
        self._external = context.connection.in_transaction()

    def migrations_fn(self, heads: tuple[str, ...], context: MigrationContext) -> list[Any]:
        """Lock, claim, settle the dirty row and the version table, log RESOLVE, commit."""
        connection = context.connection
        assert connection is not None and context.script is not None
        claimant = self.claimant
        quoted = context.dialect.identifier_preparer.quote(claimant.schema)
        if not (dialect_for(context).tracks_dirty and installed_version(connection, quoted) is not None):
            raise UsageError(
                f"{self.revision} is not dirty: only pre-check mode (MySQL/MariaDB, or --mode precheck "
                "on PostgreSQL) marks revisions dirty, and this database has none (nothing was changed)"
            )
        lock = NamedLock(connection, quoted, claimant.resource)
        lock.take(WaitBound(self.lock_wait_ms))
        self._lock = lock
        dirty = self._dirty_row(unsettled_revisions(connection, quoted, claimant.resource), context)
        claim_fence(connection, quoted, claimant.resource, claimant.token)
        ledger = Ledger(
            context, quoted, dialect_for(context).fence_calls(context, quoted), claimant.resource, claimant.holder
        )
        if dirty.token == 0:  # left by a refused write without a token: no ledger row was marked
            self._settle_tokenless(context, quoted, ledger, dirty)
        elif self.resolved_as == APPLIED:
            ledger.resolve_applied(self.revision)
        else:
            ledger.forget(self.revision)
        after = self._move_version_table(context, heads, dirty)
        log_event(
            connection,
            quoted,
            resource=claimant.resource,
            kind="RESOLVE",
            holder=claimant.holder,
            token=claimant.token,
            revision=self.revision,
            detail={
                "as": self.resolved_as,
                "was": dirty.state,
                "started_token": dirty.token,
                "started_by": dirty.holder,
            },
        )
        if not self._external:
            connection.commit()
        self.outcome = ResolveOutcome(
            claimant.resource,
            self.revision,
            claimant.token,
            claimant.holder,
            self.resolved_as,
            dirty.state,
            dirty.token,
            sorted(after),
        )
        return []

    def finish(self) -> None:
        """Release the named lock."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _dirty_row(self, dirty: list[Unsettled], context: MigrationContext) -> Unsettled:
        version_table = version_table_name(context)
        for row in dirty:
            if row.revision == self.revision and row.version_table == version_table:
                return row
        listed = ", ".join(row.revision for row in dirty) or "none"
        raise UsageError(
            f"{self.revision} is not dirty on {self.claimant.resource} (dirty revisions: {listed}); nothing was changed"
        )

    def _settle_tokenless(self, context: MigrationContext, quoted: str, ledger: Ledger, dirty: Unsettled) -> None:
        """A revision whose version write was refused for want of a token: an upgrade resolved as
        applied gets its ledger row now (under the resolving token); a downgrade resolved as rolled
        back loses it; either way its refused writes are forgotten."""
        connection = context.connection
        assert connection is not None and context.script is not None
        if dirty.state == "applying" and self.resolved_as == APPLIED:
            revision = context.script.get_revision(self.revision)
            assert revision is not None and revision.path is not None
            ledger.adopt(self.revision, revision.path, self.claimant.token)
        elif dirty.state == "rolling_back" and self.resolved_as == ROLLED_BACK:
            ledger.forget(self.revision)
        params = {"version_table": dirty.version_table, "revision": self.revision}
        connection.execute(statement("forget_tokenless_write", quoted, context.dialect.name), params)

    def _move_version_table(self, context: MigrationContext, heads: tuple[str, ...], dirty: Unsettled) -> set[str]:
        """Alembic's version table as the settled revision says: an upgrade resolved as applied moves
        to it, a downgrade resolved as rolled back moves below it; otherwise it stays."""
        assert context.script is not None
        revision = context.script.get_revision(self.revision)
        assert revision is not None
        below = revisions_below(revision)
        current = set(heads)
        step: StampStep | None = None
        if dirty.state == "applying" and self.resolved_as == APPLIED and self.revision not in current:
            parents = tuple(r for r in below if r in current)
            # No parent among the heads: the revision starts a branch of the version table.
            step = StampStep(parents, (self.revision,), True, not parents, context.script.revision_map)
        elif dirty.state == "rolling_back" and self.resolved_as == ROLLED_BACK and self.revision in current:
            # A root revision leaves its branch of the version table with it.
            step = StampStep((self.revision,), below, False, not below, context.script.revision_map)
        if step is None:
            return current
        HeadMaintainer(context, heads).update_to_step(step)
        return set(context.get_current_heads())


def resolve_dirty(
    config: Config, revision: str, resolved_as: str, claimant: Claimant, lock_wait_ms: int
) -> ResolveOutcome:
    """Settle the dirty ``revision`` as ``resolved_as`` under ``claimant``; the revision must be a
    known id (not ``head`` or a relative one), checked before the database is touched."""
    script = script_directory(config)
    if revision in ("base", "head", "heads") or RELATIVE.search(revision):
        raise UsageError(f"resolve takes the id of the dirty revision, not {revision!r}")
    require_known(script, revision)
    run = ResolveRun(claimant, revision, resolved_as, lock_wait_ms)
    config.attributes[FENCED_RUN_ATTRIBUTE] = run
    try:
        run_env(
            config,
            script,
            run.migrations_fn,
            resource=claimant.resource,
            token=lambda: claimant.token,
            writes=True,
            on_connection=run.connected,
            dont_mutate=True,
        )
    finally:
        run.finish()
        config.attributes.pop(FENCED_RUN_ATTRIBUTE, None)
    if run.outcome is None:
        raise FencemigrateError("env.py did not run the migration context; nothing was resolved")
    return run.outcome
