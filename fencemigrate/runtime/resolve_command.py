"""``fencemigrate resolve`` run through env.py: the revision checked, then settled by :class:`.ResolveRun`."""

from __future__ import annotations

from alembic.config import Config

from ..errors import FencemigrateError, UsageError
from .environment import FENCED_RUN_ATTRIBUTE, run_env
from .request import FenceSettings
from .resolve_run import ResolveOutcome, ResolveRun
from .revision_targets import RELATIVE, require_known, script_directory


def resolve_dirty(
    config: Config, revision: str, resolved_as: str, settings: FenceSettings, lock_wait_ms: int
) -> ResolveOutcome:
    """Settle the dirty ``revision`` as ``resolved_as`` under ``settings``; the revision must be a
    known id (not ``head`` or a relative one), checked before the database is touched."""
    script = script_directory(config)
    if revision in ("base", "head", "heads") or RELATIVE.search(revision):
        raise UsageError(f"resolve takes the id of the dirty revision, not {revision!r}")
    require_known(script, revision)
    run = ResolveRun(settings, revision, resolved_as, lock_wait_ms)
    config.attributes[FENCED_RUN_ATTRIBUTE] = run
    try:
        run_env(
            config,
            script,
            run.migrations_fn,
            resource=settings.resource,
            tokens=settings.tokens,
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
