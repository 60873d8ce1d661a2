"""The Python API; every CLI command calls the function of the same name here.

from fencemigrate import api, load_config
api.upgrade(load_config(["alembic.ini"]), "head", token=34)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Literal, Unpack, overload

from alembic.config import Config

from .config import FENCE_AWARE, checked_resource
from .leases import Grant, LeaseStatus
from .runtime import commands
from .runtime.outcome import RunOutcome
from .runtime.request import (
    AcquireKeywords,
    MergeKeywords,
    ReapplyKeywords,
    ReleaseKeywords,
    RenewKeywords,
    ResolveKeywords,
    RevisionKeywords,
    RunKeywords,
    resolve_claimant,
)
from .runtime.revisions import script_directory

if TYPE_CHECKING:  # the other commands' results: their modules are imported when those commands run
    from .fence.install import InstallOutcome
    from .fence.ledger import AppliedSource
    from .fence.state import State
    from .fence.timeline import Event
    from .fence.version_table import EnsuredVersionTable
    from .lint.findings import CheckReport
    from .runtime.authoring import BranchPoint, InitOutcome, Template, WrittenRevision
    from .runtime.listings import RevisionListing
    from .runtime.resolve import ResolveOutcome


def upgrade(
    config: Config, revision: str, *, token: int | str | None = None, **options: Unpack[RunKeywords]
) -> RunOutcome:
    """``alembic upgrade``, with every step claiming the fence first.

    Without ``token`` the run takes a lease itself (``ttl``, ``wait``, ``preempt``, ``lease_url``
    as for :func:`lease_acquire`), renews it between revisions and releases it at the end.
    ``mode`` is "transactional" or "precheck" (default: pre-check on MySQL and MariaDB, which
    commit DDL on their own; transactional elsewhere). ``progress`` hears of each revision as it
    starts and of the wait for the lease (default: silent). ``expect_heads`` (every fenced command
    takes it): the revision ids (or unique prefixes; ``["base"]``: none applied) the caller planned
    from; the claiming transaction refuses with :class:`Fenced` unless they are the database's heads.
    """
    return commands.upgrade(config, revision, token, options)


def downgrade(
    config: Config, revision: str, *, token: int | str | None = None, **options: Unpack[RunKeywords]
) -> RunOutcome:
    """``alembic downgrade``, fenced; the ledger rows go in the same transaction as the DDL."""
    return commands.downgrade(config, revision, token, options)


def reapply(
    config: Config, revision: str, *, token: int | str | None = None, **options: Unpack[ReapplyKeywords]
) -> RunOutcome:
    """Roll back ``revision`` (and what sits above it) and apply it again, in one transaction
    (in pre-check mode: one revision after the other, each checked and marked first).

    Legal only when every revision it rolls back was applied under ``token``, so a token is
    required and no lease is taken: a lease taken now would bring a new token, which can never
    re-apply anything. ``wait`` bounds the wait for pre-check mode's named lock.
    """
    return commands.reapply(config, revision, token, options)


def stamp(
    config: Config,
    revisions: str | tuple[str, ...],
    *,
    purge: bool = False,
    token: int | str | None = None,
    **options: Unpack[RunKeywords],
) -> RunOutcome:
    """``alembic stamp``, fenced: the version table moves only under a valid claim.

    ``purge`` (as Alembic's): empty the version table first, whatever its rows name; fenced like
    the stamp, and the ledger of the version table is emptied with it.
    """
    return commands.stamp(config, revisions, purge, token, options)


def resolve(
    config: Config, revision: str, *, token: int | str | None, **options: Unpack[ResolveKeywords]
) -> ResolveOutcome:
    """Settle the dirty ``revision`` as "applied" (its DDL is all in) or "rolled-back" (none of it
    is left), under ``token`` and the resource's named lock; moves Alembic's version table to match
    and logs RESOLVE. Only pre-check mode (MySQL/MariaDB) leaves revisions dirty.
    """
    from .runtime.resolve import resolve_dirty

    claimant, resolved_as, lock_wait_ms = resolve_claimant(config, token, options)
    return resolve_dirty(config, revision, resolved_as, claimant, lock_wait_ms)


def state(config: Config) -> State:
    """Heads, fence rows and the ledger, read through the project's env.py."""

    from .runtime import reads

    return reads.state(config)


def timeline(config: Config, resource: str | None = None, since: str | None = None) -> list[Event]:
    """The event log, oldest first, read through the project's env.py; changes nothing.

    ``resource`` keeps one resource's events; ``since`` is an ISO-8601 date-time (UTC unless it
    has an offset) or how long ago by the database's clock (``10m``, ``2h``). No events before
    the fence schema is installed.
    """

    from .runtime import reads

    return reads.timeline(config, resource, since)


def check(
    config: Config,
    db: bool = True,
    select: str | Iterable[str] | None = None,
    ignore: str | Iterable[str] | None = None,
) -> CheckReport:
    """Lint the revision files for what breaks fencing or the next deploy; changes nothing.

    With ``db`` (the default), also compare them with the database, read through env.py: pending
    revisions, checksum drift, revisions missing from the directory, the fence schema, and (FM408,
    Alembic's own ``check``) the models in env.py's ``target_metadata``, all in one env.py run; a
    database env.py cannot read is CheckDatabaseUnreadable. ``db=False``: the revision files alone.
    ``select`` and ``ignore`` take rule ids or names (a list, or one comma-separated string); an
    unknown one is a UsageError, raised before anything is read. Findings are in the report, never
    raised.
    """
    from .lint.engine import check_project
    from .runtime import environment

    read_through_env = partial(environment.run_without_steps, config, reads_only=True)
    return check_project(config, script_directory(config), db, select, ignore, read_through_env)


def lease_acquire(config: Config, **options: Unpack[AcquireKeywords]) -> tuple[Grant, State]:
    """Grant the lease of ``resource`` to ``holder`` with a new token, and read the state afresh.

    The grant advances the fence to the new token: older holders are fenced from now on.
    ``preempt`` is refused on SQLite (UsageError), before anything is touched. ``progress`` hears
    of the wait while another holder has the lease (default: silent).
    """
    from .runtime import lease_commands

    return lease_commands.acquire(config, options)


def lease_renew(config: Config, **options: Unpack[RenewKeywords]) -> Grant:
    """Extend ``holder``'s lease (the grant with ``token``, if given) by ``ttl`` from now, or without
    ``ttl`` by the TTL it was granted (or last renewed) with; LeaseLost if it is not theirs."""
    from .runtime import lease_commands

    return lease_commands.renew(config, options)


def lease_release(config: Config, **options: Unpack[ReleaseKeywords]) -> LeaseStatus:
    """Free ``holder``'s lease (the grant with ``token``, if given); LeaseLost if it is not theirs."""
    from .runtime import lease_commands

    return lease_commands.release(config, options)


def lease_status(config: Config, *, resource: str | None = None, lease_url: str | None = None) -> LeaseStatus:
    """The lease of ``resource`` as the lease service's clock sees it now."""
    from .runtime import lease_commands

    name = checked_resource(config, resource)
    return lease_commands.call_lease_service(config, lease_url, lambda backend: backend.status(name))


def lease_detach(config: Config, *, resource: str | None = None, lease_url: str | None = None) -> LeaseStatus:
    """Give ``resource`` back to external tokens (``--token`` above its fence token) after a lease
    service granted it; LeaseBusy while a lease on it is live. The next grant takes it back."""
    from .runtime import lease_commands

    name = checked_resource(config, resource)
    return lease_commands.call_lease_service(config, lease_url, lambda backend: backend.detach(name))


def install(
    config: Config, sql: bool = False, grant_to: str | None = None, tokenless_writes: str | None = None
) -> InstallOutcome:
    """Install the fence schema through env.py's connection, put back the guard triggers of an
    installed one that were dropped or disabled (one line each in ``restored``), and guard Alembic's
    version table (created empty when it does not exist yet, so that plain Alembic's first write is
    refused too); with ``sql``, return the script instead (``sql`` of the outcome), for the database
    ``sqlalchemy.url`` names (PostgreSQL's unless it names SQLite or MySQL/MariaDB). ``grant_to``
    (PostgreSQL): the role that runs migrations, granted what they need in the fence schema, which it
    does not own (see :mod:`.fence.install`). ``tokenless_writes`` "allow" opts the version table
    out of the guard (recorded: no later run puts it back), "forbid" opts it back in.
    """

    return commands.install_fence_schema(config, sql, grant_to, tokenless_writes)


def init(config: Config, directory: str, template: str = FENCE_AWARE, package: bool = False) -> InitOutcome:
    """Write a new Alembic environment in ``directory``: by default fencemigrate's, whose env.py
    refuses to migrate without a fence token; ``template`` names one of Alembic's instead (see
    :func:`list_templates`). ``package`` writes ``__init__.py`` files, as ``alembic init --package``.
    Writes files only."""
    from .runtime.authoring import init_environment

    return init_environment(config, directory, template, package)


def list_templates() -> list[Template]:
    """The templates ``init`` can write: fencemigrate's fence-aware one, then Alembic's."""
    from .runtime.authoring import available_templates

    return available_templates()


def revision(config: Config, message: str | None = None, **options: Unpack[RevisionKeywords]) -> list[WrittenRevision]:
    """``alembic revision``: write a new revision file (the files written; one unless env.py's
    ``process_revision_directives`` decides otherwise). With ``autogenerate``, env.py compares
    the models with the database, as Alembic's does, but writes nothing to it. No token, no lease."""
    from .runtime import authoring, environment

    script = script_directory(config)
    return authoring.new_revisions(
        config, script, partial(environment.read_through_env, config, script), message=message, **options
    )


def merge(
    config: Config, revisions: Sequence[str], message: str | None = None, **options: Unpack[MergeKeywords]
) -> WrittenRevision:
    """``alembic merge``: write a revision merging ``revisions`` (two or more; ``heads`` for all).
    No token, no lease."""
    from .runtime import authoring, environment

    script = script_directory(config)
    run_env = partial(environment.read_through_env, config, script)
    return authoring.merge(config, script, run_env, revisions, message=message, **options)


def branches(config: Config, verbose: bool = False) -> list[BranchPoint]:
    """``alembic branches``: the revisions with more than one child."""
    from .runtime import authoring

    return authoring.branch_points(script_directory(config), verbose)


def edit(config: Config, rev: str) -> list[str]:
    """``alembic edit``: open the files of ``rev`` (``current``: the database's) in ``$EDITOR``;
    the paths opened."""
    from .runtime import listings

    return listings.edit(config, rev)


def ensure_version(config: Config, sql: bool = False) -> EnsuredVersionTable:
    """``alembic ensure_version``: create the empty version table when it is missing; on a fenced
    database guard it in the same transaction, as :func:`install` does. No token: no version changes."""

    from .runtime import reads

    return reads.ensure_version(config, sql)


def current(
    config: Config, check_heads: bool = False, verbose: bool = False, as_json: bool = False
) -> RevisionListing | None:
    """As ``alembic current`` (printed by Alembic, which does not create the version table here);
    with ``as_json``, the listing instead."""
    from .runtime import listings

    return listings.current(config, check_heads, verbose, as_json)


def heads(
    config: Config, verbose: bool = False, resolve_dependencies: bool = False, as_json: bool = False
) -> RevisionListing | None:
    """As ``alembic heads`` (printed by Alembic); with ``as_json``, the listing instead."""
    from .runtime import listings

    return listings.heads(config, verbose, resolve_dependencies, as_json)


def history(
    config: Config,
    rev_range: str | None = None,
    verbose: bool = False,
    indicate_current: bool = False,
    as_json: bool = False,
) -> RevisionListing | None:
    """As ``alembic history`` (its text, in Alembic's format); with ``as_json``, the listing instead.
    The range is resolved first (UsageError in Alembic's words). When Alembic would run env.py
    (``current`` in the range, -i, ``revision_environment``), the heads are read without creating
    the version table."""
    from .runtime import listings

    return listings.history(config, rev_range, verbose, indicate_current, as_json)


@overload
def show(
    config: Config, rev: str, as_json: bool = False, *, applied: Literal[False] = False
) -> RevisionListing | None: ...


@overload
def show(config: Config, rev: str, as_json: bool = False, *, applied: Literal[True]) -> AppliedSource: ...


def show(
    config: Config, rev: str, as_json: bool = False, *, applied: bool = False
) -> RevisionListing | AppliedSource | None:
    """As ``alembic show`` (its text, in Alembic's format); with ``as_json``, the listing instead.
    ``rev`` is resolved first (UsageError in Alembic's words); ``current``'s heads are read without
    creating the version table.

    With ``applied``, what the database has applied as ``rev`` instead, read through env.py (never a
    lease, nothing written): its ledger row (token, holder, time) with the text of its file as the
    run that applied it read it (``source`` None: not recorded, a row older than the fence schema
    that keeps it). ``rev`` is a revision id as the ledger has it, or anything Alembic resolves to
    one revision (a prefix, ``head``); NotApplied when the ledger has no row for it.
    """
    from .runtime import listings, reads

    return reads.show_applied(config, rev) if applied else listings.show(config, rev, as_json)
