"""Fencing for env.py files written by ``fencemigrate init``, so plain ``alembic`` is fenced too.

Under ``fencemigrate`` the runner has already fenced the run and this is a pass-through.
Under plain ``alembic``, ``-x fence_token=N`` (and optionally ``fence_holder``,
``fence_resource``, ``fence_wait``: on PostgreSQL, how long to wait for another writer's fence,
reported on stderr, default 10m) is required for any command that would change the database.
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any, NoReturn

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection

from .alembic_internals import migration_function, replace_migration_function
from .config import (
    check_holder,
    check_resource,
    configured_resource,
    fence_schema,
    parse_token,
    parse_wait_ms,
)
from .connections import separate_connection, translated_errors
from .dialects.waits import LockWait, WaitBound, lock_wait_text
from .errors import Fenced, FencemigrateError, NotTransactional, TokenRequired, render
from .fence.tokens import with_newer_token_news
from .leases.model import DEFAULT_RUN_WAIT
from .runtime.applied_downgrades import running_applied_downgrades
from .runtime.environment import FENCED_RUN_ATTRIBUTE, autocommits
from .runtime.fenced_run import FencedRun
from .runtime.outcome import RunOutcome
from .runtime.request import Claimant, Identity
from .scrub import scrub_secrets


def run_migrations(context: ModuleType | Any) -> None:
    """Use in env.py instead of ``context.run_migrations()``."""
    if context.config.attributes.get(FENCED_RUN_ATTRIBUTE) is not None:
        context.run_migrations()
        return
    x_arguments = context.get_x_argument(as_dictionary=True)
    token = x_arguments.get("fence_token")
    resource = x_arguments.get("fence_resource") or configured_resource(context.config)
    migration_context: MigrationContext = context.get_context()
    original = migration_function(migration_context)

    def planner(heads: tuple[str, ...], ctx: MigrationContext) -> tuple[list[Any], list[str]]:
        assert original is not None
        return list(original(heads, ctx)), []

    def without_token(heads: tuple[str, ...], ctx: MigrationContext) -> list[Any]:
        """No step is run without a token (nothing to do passes)."""
        if planner(heads, ctx)[0]:
            raise TokenRequired(
                "refusing to migrate without a fencing token: run `fencemigrate upgrade REV --token N`, "
                "or pass `-x fence_token=N` to alembic"
            )
        return []

    try:
        _refuse_early_if_autocommit(migration_context)
        given = None if token is None else parse_token(token)
        holder, checked = check_holder(x_arguments.get("fence_holder")), check_resource(resource)
        identity = Identity(holder, checked, fence_schema(context.config))
        wait_ms = parse_wait_ms(x_arguments.get("fence_wait") or DEFAULT_RUN_WAIT, "-x fence_wait")
        if given is None:
            replace_migration_function(migration_context, without_token)
            with translated_errors(identity.resource):
                context.run_migrations()
            return
        claimant = Claimant(identity, given)
        outcome = RunOutcome("upgrade", identity.resource, identity.holder, claimant.token)
        waits = WaitBound(wait_ms, progress=_StderrLocks())
        run = FencedRun(
            claimant, running_applied_downgrades(planner, identity, lambda: claimant.token), outcome, waits=waits
        )
        replace_migration_function(migration_context, run.migrations_fn)
        with translated_errors(identity.resource, lambda: claimant.token):
            context.run_migrations()
        for step in outcome.steps:
            if step.applied_text is not None:  # as fencemigrate's output says it
                print(f"fencemigrate: {step.applied_text.described()}", file=sys.stderr)
    except Fenced as fenced:
        _exit_with(_with_news(migration_context, identity.schema, fenced))
    except FencemigrateError as error:
        _exit_with(error)


class _StderrLocks:
    """Plain ``alembic``'s reports of a wait for another writer in the database: one line on stderr each."""

    def waiting_for_lock(self, wait: LockWait) -> None:
        print(f"fencemigrate: {scrub_secrets(lock_wait_text(wait))}", file=sys.stderr, flush=True)


def _exit_with(error: FencemigrateError) -> NoReturn:
    """Print ``error`` as ``fencemigrate`` prints it (:func:`.errors.render`) and exit with its status."""
    shown = render(error, as_json=False)
    print(shown.text, file=sys.stderr if shown.to_stderr else sys.stdout)
    raise SystemExit(shown.exit_status) from None


def _refuse_early_if_autocommit(context: MigrationContext) -> None:
    """On a connection that commits every statement (SQLite without fencemigrate's transactional DDL,
    ``AUTOCOMMIT``), the fenced run refuses every step, but Alembic would create its version table
    (or purge it, for ``stamp --purge``) before the first one, for good: keep it from writing first."""
    connection = context.connection
    if context.as_sql or not isinstance(connection, Connection) or not autocommits(connection):
        return
    if context.purge:
        raise NotTransactional(
            "refusing to purge the version table: the connection env.py gave Alembic commits every "
            "statement on its own, so no fence claim could share a transaction with it; nothing was written"
        )
    context.opts["dont_mutate"] = True


def _with_news(migration_context: MigrationContext, schema: str, fenced: Fenced) -> Fenced:
    """``fenced`` saying whether the newer token has written (:func:`with_newer_token_news`), read on
    a connection of its own: env.py's transaction is still open, and doomed. Failing to read keeps
    the claim's own words."""
    if migration_context.connection is None:
        return fenced
    try:
        with separate_connection(migration_context.connection.engine) as connection:
            return with_newer_token_news(connection, connection.dialect.identifier_preparer.quote(schema), fenced)
    except Exception:  # noqa: BLE001 - the rejection stands, whatever the event log says
        return fenced
