"""A fenced run's request: the API's typed options, checked in one place, and the frozen request
built from them before the database is touched.

The request names what to plan (command, destination), who writes (:class:`Identity`: holder,
resource, fence schema), how the mode is chosen (:class:`RunChoice`: transactional or pre-check,
from the database env.py connected to and ``--mode``) and where the run's token comes from (its
:data:`TokenPlan`): given (``--token``), a grant its caller holds, the lease the run takes itself,
or, for an offline script written without a token, the lease the script takes when it runs. The
token itself is known only once that lease is granted: the runner then builds the
:class:`Claimant` (who claims, with which token) that the run of each mode writes under.

``--expect-heads`` (:class:`ExpectedHeads`): the heads a writer planned from, which the database
must have when it claims. The claim's transaction reads them again (one SELECT of the version
table, through the connection that claimed) and refuses with FENCED unless they are exactly the
expected ones, so no other fenced writer can move them between the check and the DDL. Revisions are
given as full ids or unique prefixes, resolved against the revision files as Alembic resolves them;
``base`` means no revision applied.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Required, TypedDict

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine

from ..config import (
    check_holder,
    checked_resource,
    configured_lease_url,
    fence_schema,
    parse_token,
    parse_ttl_ms,
    parse_wait_ms,
)
from ..dialects import MODES, PRECHECK, dialect_for
from ..errors import Fenced, UsageError
from ..leases import (
    DEFAULT_RUN_WAIT,
    DEFAULT_TTL,
    Grant,
    LeaseRequest,
    check_lease_url,
    lease_engine,
)
from ..progress import SILENT, Progress
from .revisions import declared_revisions, relative_to_heads, require_known, script_directory

BASE = "base"
_PREFIX_MIN_ID = 4  # Alembic matches a prefix only against ids of at least four characters


@dataclass(frozen=True)
class ExpectedHeads:
    """The exact set of version-table rows a run requires when it claims (empty: base)."""

    revisions: frozenset[str]

    def require(self, heads: Iterable[str], resource: str, token: int) -> None:
        """FENCED (reason "heads are X, you planned from Y") unless ``heads`` are the expected ones."""
        found = frozenset(heads)
        if found != self.revisions:
            reason = f"heads are {listed(found)}, you planned from {listed(self.revisions)}"
            raise Fenced(resource, token, None, reason)


def listed(revisions: Iterable[str]) -> str:
    """Revision ids sorted and comma-separated, as ``--expect-heads`` takes them; ``base`` for none."""
    return ",".join(sorted(revisions)) or BASE


def expected_heads(script: ScriptDirectory, given: Sequence[str]) -> ExpectedHeads:
    """``given`` (ids, unique prefixes, or ``base`` alone) as full revision ids of ``script``;
    a UsageError for an empty, unknown or ambiguous one, before anything is touched."""
    if isinstance(given, str):
        raise TypeError(f"expect_heads takes a sequence of revision ids, not the string {given!r}")
    names = [name.strip() for name in given]
    if not names or not all(names):
        raise UsageError("--expect-heads takes revision ids separated by commas, or base; an empty one was given")
    if BASE in names:
        if len(names) > 1:
            raise UsageError("--expect-heads base means no revision applied: it cannot be given with revisions")
        return ExpectedHeads(frozenset())
    known = _revision_ids(script)
    return ExpectedHeads(frozenset(_resolved(known, name) for name in names))


def _resolved(known: frozenset[str], name: str) -> str:
    """The id ``name`` names: itself, or the one id it is a prefix of (Alembic's rule)."""
    if name in known:
        return name
    matches = sorted(revision for revision in known if len(revision) >= _PREFIX_MIN_ID and revision.startswith(name))
    if not matches:
        raise UsageError(f"--expect-heads: no revision {name!r} in the revision files (nor one that starts with it)")
    if len(matches) > 1:
        shown = ", ".join(matches[:3]) + (", ..." if len(matches) > 3 else "")
        raise UsageError(f"--expect-heads: {name!r} is ambiguous, several revisions start with it ({shown})")
    return matches[0]


def _revision_ids(script: ScriptDirectory) -> frozenset[str]:
    """Every revision id of the files: read as text when they allow it (no revision module is
    imported), from Alembic's revision map otherwise."""
    declared = declared_revisions(script)
    if declared is not None:
        return declared
    try:
        return frozenset(revision.revision for revision in script.walk_revisions())
    except CommandError as error:
        raise UsageError(str(error)) from None


def check_mode(mode: str | None) -> str | None:
    """``mode`` if it names a mode (None: chosen from the database)."""
    if mode is not None and mode not in MODES:
        raise UsageError(f"--mode must be {' or '.join(MODES)}, not {mode!r}")
    return mode


def mode_for(dialect_name: str, requested: str | None, offline: bool) -> str:
    """The mode of a run on ``dialect_name``: the database's default (pre-check on MySQL and
    MariaDB), or the one asked for where the database can run it."""
    dialect = dialect_for(dialect_name)
    mode = dialect.mode(requested)
    if mode == PRECHECK and offline and not dialect.writes_precheck_scripts:
        raise UsageError(
            f"offline fencing (--sql) needs transactional mode on {dialect.display_name}: in pre-check mode "
            "the runner itself checks the fence before each revision, which a script cannot do there. "
            "Leave --mode out, or run the command without --sql. Nothing was written"
        )
    return mode


Planner = Callable[[tuple[str, ...], MigrationContext], tuple[list[Any], list[str]]]
"""Given the current heads, the steps to run and the revisions a reapply rolls back."""


@dataclass(frozen=True)
class Identity:
    """Who writes: the holder, the resource whose fence it claims, and the fence schema."""

    holder: str
    resource: str
    schema: str


@dataclass(frozen=True)
class GivenToken:
    """``--token N``: the run writes under N, a token the caller's own lease service issued."""

    token: int


@dataclass(frozen=True)
class HeldGrant:
    """``held_lease``: the run writes under the token of a grant its caller holds (an MCP server's),
    renews it between revisions as a run renews its own lease, and leaves it held."""

    grant: Grant
    lease_url: str | None


@dataclass(frozen=True)
class OwnLease:
    """No token: the run takes a lease itself once env.py has connected, renews it while it works
    and releases it at the end (``--ttl``, ``--wait``, ``--preempt``, ``--lease-url``)."""

    request: LeaseRequest
    lease_url: str | None


@dataclass(frozen=True)
class ScriptLease:
    """The lease an offline (``--sql``) script without ``--token`` takes itself when it runs, from the
    database's own lease service: its TTL, and how long the script waits for a live holder or a
    migration in flight (``--ttl``, ``--wait``). The script writes under :data:`SCRIPT_TOKEN`, the
    token it will be granted."""

    ttl_ms: int
    wait_ms: int


TokenPlan = GivenToken | HeldGrant | OwnLease | ScriptLease
"""Where a run's token comes from: given, a held grant, the run's own lease, or the script's own lease."""


@dataclass(frozen=True)
class Claimant:
    """Who claims the fence and the token it claims with (known once the lease is granted), with the
    heads it must find when it claims: ``--expect-heads``, and the heads a target relative to the
    database's own was resolved from. ``script_lease``: an offline script that takes its own lease
    when it runs (its token is :data:`SCRIPT_TOKEN`)."""

    identity: Identity
    token: int
    expected_heads: ExpectedHeads | None = None
    resolved_from: ExpectedHeads | None = None
    script_lease: ScriptLease | None = None

    @property
    def holder(self) -> str:
        return self.identity.holder

    @property
    def resource(self) -> str:
        return self.identity.resource

    @property
    def schema(self) -> str:
        return self.identity.schema

    def require_expected_heads(self, heads: Iterable[str]) -> None:
        """FENCED unless ``heads`` (read in the claiming transaction) are the ones the run was told
        to expect (``--expect-heads``), and the ones its relative target was resolved from."""
        if self.expected_heads is not None:
            self.expected_heads.require(heads, self.resource, self.token)
        self.require_resolved_heads(heads)

    def require_resolved_heads(self, heads: Iterable[str]) -> None:
        """FENCED unless ``heads`` are the ones a target relative to the database's heads was
        resolved from (read before the run's lease or lock: the same words from other heads would
        name another revision); nothing to check for any other target."""
        if self.resolved_from is not None:
            self.resolved_from.require(heads, self.resource, self.token)


@dataclass(frozen=True)
class RunRequest:
    """One fenced ``upgrade``, ``downgrade``, ``reapply`` or ``stamp``, checked and ready to run."""

    config: Config
    script: ScriptDirectory
    command: str
    destination: str | tuple[str, ...]  # a stamp's are a tuple
    plan_for: Callable[[ScriptDirectory, Any], Planner]
    identity: Identity
    token_plan: TokenPlan
    expected_heads: ExpectedHeads | None
    choice: RunChoice
    own_engine: Callable[[Engine], Engine]  # the engine of the run's own connections (synchronous)
    start: str | None = None  # --sql's FROM
    tag: str | None = None
    single_transaction: bool = False  # overrides env.py's transaction_per_migration=True
    progress: Progress = SILENT

    @property
    def target(self) -> str:
        """The destination as the event log names it."""
        return ", ".join(self.destination) if isinstance(self.destination, tuple) else self.destination

    @property
    def relative_to_heads(self) -> bool:
        """The destination counts from the database's heads (``-1``): resolved from the heads read
        before the lease, the run writes only from those (:attr:`Claimant.resolved_from`)."""
        return relative_to_heads(self.destination)


@dataclass(frozen=True)
class RunChoice:
    """What decides the mode: ``--mode``, --sql, and how a run waits for a lock another writer holds
    in the database (the fence, SQLite's write lock, pre-check mode's named lock): ``--wait``, and
    ``--preempt`` to end a stale holder."""

    requested: str | None
    offline: bool
    lock_wait_ms: int
    preempt: bool = False

    def per_migration(self, connection: Connection) -> bool:
        """Pre-check mode: each revision in a transaction of its own, whatever env.py says (or a
        reapply would ask), so that its mark commits before its DDL on PostgreSQL. MySQL, which
        commits DDL on its own, runs each revision in a transaction of its own anyway."""
        return mode_for(connection.dialect.name, self.requested, False) == PRECHECK


SCRIPT_HOLDER_SUFFIX = " (offline script)"
"""Appended to the holder of an offline script that takes its own lease: ``state``, ``timeline`` and
the ledger name it as a script's."""


APPLIED = "applied"
ROLLED_BACK = "rolled-back"
RESOLVE_AS = (APPLIED, ROLLED_BACK)
"""What ``resolve --as`` settles a dirty revision as."""


class ReapplyKeywords(TypedDict, total=False):
    """The keywords of ``reapply``: its command's options (None: the default).

    ``held_lease`` (no CLI option): a grant you hold, from :func:`..api.lease_acquire`, instead of
    a ``token``: the run writes under its token, renews it between revisions as a run renews its own
    lease, and leaves it held (an MCP server's grant: :mod:`..agent_server`).
    """

    held_lease: Grant | None
    holder: str | None
    resource: str | None
    tag: str | None
    mode: str | None
    wait: str | int | None
    expect_heads: Sequence[str] | None
    progress: Progress


class RunKeywords(ReapplyKeywords, total=False):
    """The keywords of ``upgrade``, ``downgrade`` and ``stamp``: also --sql and the run's own lease."""

    sql: bool
    ttl: str | int | None
    preempt: bool
    lease_url: str | None


class ResolveKeywords(TypedDict, total=False):
    """The keywords of ``resolve`` besides its token: its command's options (None: the default)."""

    resolved_as: Required[str]
    holder: str | None
    resource: str | None
    wait: str | int | None


class AcquireKeywords(TypedDict, total=False):
    """The keywords of ``lease acquire``: its command's options (None: the default)."""

    holder: Required[str | None]
    resource: str | None
    ttl: str | int | None
    wait: str | int | None
    preempt: bool
    lease_url: str | None
    progress: Progress


class ReleaseKeywords(TypedDict, total=False):
    """The keywords of ``lease release``."""

    holder: Required[str | None]
    resource: str | None
    token: int | str | None
    lease_url: str | None


class RenewKeywords(ReleaseKeywords, total=False):
    """The keywords of ``lease renew``: also ``ttl``."""

    ttl: str | int | None


class RevisionKeywords(TypedDict, total=False):
    """The keywords of ``revision`` besides its message: its command's options."""

    autogenerate: bool
    sql: bool
    head: str
    splice: bool
    branch_label: str | Sequence[str] | None
    version_path: str | None
    rev_id: str | None
    depends_on: str | Sequence[str] | None


class MergeKeywords(TypedDict, total=False):
    """The keywords of ``merge`` besides its revisions and message."""

    branch_label: str | Sequence[str] | None
    rev_id: str | None
    splice: bool


class McpKeywords(TypedDict, total=False):
    """The keywords of ``mcp``."""

    holder: str | None
    resource: str | None
    ttl: str | None
    print_rules: bool
    branches: Sequence[str]
    remote: str
    read_secret_files: bool


RUN_KEYWORDS = frozenset(RunKeywords.__annotations__)
REAPPLY_KEYWORDS = frozenset(ReapplyKeywords.__annotations__)

_TOKEN_REQUIRED = {
    "reapply": "reapply needs --token N, the token that applied the revision (or FENCEMIGRATE_TOKEN): "
    "a new lease's token could never re-apply it",
    "resolve": "resolve needs --token N (or FENCEMIGRATE_TOKEN): settling a dirty revision is a "
    "deliberate write under the lease you hold",
}


def reject_unknown(options: Mapping[str, Any], known: frozenset[str]) -> None:
    """TypeError for keywords a command does not take (its TypedDict's keys are ``known``)."""
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"unexpected keyword arguments: {', '.join(unknown)}")


def require_token(command: str, token: int | str | None, held_lease: Grant | None = None) -> None:
    """A UsageError when ``command``, which writes only under a token it is given (or the token of
    a lease held by its caller), has none."""
    if token is None and held_lease is None:
        raise UsageError(_TOKEN_REQUIRED[command])


@dataclass(frozen=True)
class LeaseOptions:
    """The lease a fenced run takes itself when it is given no token (``--ttl``, ``--wait``,
    ``--preempt``, ``--lease-url``; None: the default). With a token only ``wait`` and ``preempt``
    apply: how long the run waits for a lock another writer holds in the database (the fence, SQLite's
    write lock, pre-check mode's named lock), and whether it ends such a writer under an older token."""

    ttl: str | int | None = None
    wait: str | int | None = None
    preempt: bool = False
    lease_url: str | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> LeaseOptions:
        """The lease options among a command's ``options``."""
        return cls(**{field.name: options[field.name] for field in fields(cls) if field.name in options})

    def wait_ms(self) -> int:
        """How long a run waits for its lease, and for a lock another writer holds in the database."""
        return parse_wait_ms(DEFAULT_RUN_WAIT if self.wait is None else self.wait)

    def given(self) -> list[str]:
        """The names of the options given, in alphabetical order."""
        return sorted(field.name for field in fields(self) if getattr(self, field.name) not in (None, False))


@dataclass(frozen=True)
class RunOptions:
    """What every fenced command takes besides its token: ``--holder``, ``--resource``, ``--sql``,
    ``--tag``, ``--mode`` (``--expect-heads``: :func:`_expected_heads`)."""

    holder: str | None = None
    resource: str | None = None
    sql: bool = False
    tag: str | None = None
    mode: str | None = None

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> RunOptions:
        """The run options among a command's ``options``."""
        return cls(**{field.name: options[field.name] for field in fields(cls) if field.name in options})


def fenced_request(
    config: Config,
    command: str,
    target: tuple[str | None, str | tuple[str, ...]],
    plan_for: Callable[[ScriptDirectory, Any], Planner],
    token: int | str | None,
    options: Mapping[str, Any],
    known: frozenset[str] = RUN_KEYWORDS,
    single_transaction: bool = False,
) -> RunRequest:
    """``command`` from ``target`` (the --sql starting revision or None, the destination) with the
    command's ``token`` (None: not given) and ``options`` (``known``: their names; :class:`RunKeywords`'s
    unless told), checked before the database is touched: identity, mode, the expected heads, the
    token or the run's own lease, revisions."""
    reject_unknown(options, known)
    run, lease, progress = RunOptions.of(options), LeaseOptions.of(options), options.get("progress", SILENT)
    held = options.get("held_lease")
    holder = check_holder(run.holder if held is None else _held_identity(held, token, run, lease))
    if run.sql and token is None and held is None:
        holder = check_holder(f"{holder}{SCRIPT_HOLDER_SUFFIX}")  # the lease is the script's own
    resource = checked_resource(config, run.resource if held is None else held.lease.resource)
    schema = fence_schema(config)
    choice = RunChoice(check_mode(run.mode), run.sql, lease.wait_ms(), preempt=lease.preempt)
    script = script_directory(config)
    expected = _expected_heads(script, options.get("expect_heads"), run.sql)
    if held is not None:
        token_plan = _held_token_plan(config, held, lease, run.sql)
    else:
        token_plan = _token_plan(config, token, run, lease, resource, holder)
    start, destination = target
    for revision in (destination if isinstance(destination, tuple) else (destination,)) + (start,):
        require_known(script, revision, stamp=command == "stamp")
    return RunRequest(
        config,
        script,
        command,
        destination,
        plan_for,
        Identity(holder, resource, schema),
        token_plan,
        expected,
        choice,
        own_engine=lease_engine,
        start=start,
        tag=run.tag,
        single_transaction=single_transaction,
        progress=progress,
    )


def resolve_claimant(config: Config, token: int | str | None, options: ResolveKeywords) -> tuple[Claimant, str, int]:
    """What ``resolve`` writes under, the outcome it settles, and how long it waits for the named
    lock; checked before anything is touched."""
    if token is None:
        raise UsageError(_TOKEN_REQUIRED["resolve"])
    resolved_as = options.get("resolved_as")
    if resolved_as not in RESOLVE_AS:
        raise UsageError(f"--as must be {' or '.join(RESOLVE_AS)}, not {resolved_as!r}")
    reject_unknown(options, frozenset(ResolveKeywords.__annotations__))
    holder, resource = check_holder(options.get("holder")), checked_resource(config, options.get("resource"))
    claimant = Claimant(Identity(holder, resource, fence_schema(config)), parse_token(token))
    return claimant, resolved_as, LeaseOptions(wait=options.get("wait")).wait_ms()


def _held_identity(held: Grant, token: int | str | None, run: RunOptions, lease: LeaseOptions) -> str:
    """The holder of the ``held`` grant, which the run writes as; a UsageError for options that
    contradict it (another ``token``, holder or resource, or a lease of the run's own)."""
    grant = held.lease
    if grant.holder is None or grant.ttl_ms is None:
        raise UsageError("held_lease must be a grant (from lease_acquire or lease_renew): it names no holder or TTL")
    clashes = [
        name
        for name, clash in (
            ("token", token is not None and str(token) != str(held.token)),
            ("holder", run.holder is not None and run.holder != grant.holder),
            ("resource", run.resource is not None and run.resource != grant.resource),
            *((name, True) for name in lease.given() if name not in ("wait", "lease_url")),
        )
        if clash
    ]
    if clashes:
        raise UsageError(f"held_lease writes under the grant's own token, holder and resource; not with {clashes[0]}")
    return grant.holder


def _held_token_plan(config: Config, held: Grant, lease: LeaseOptions, sql: bool) -> TokenPlan:
    """The token of the grant the caller holds, with that lease lent to the run for its renewals
    (an offline script, ``sql``, renews nothing: it runs later, if ever)."""
    if sql:
        return GivenToken(held.token)
    return HeldGrant(held, check_lease_url(lease.lease_url or configured_lease_url(config)))


def _script_lease(config: Config, lease: LeaseOptions) -> ScriptLease:
    """The lease an offline script without a token takes when it runs: from the database's own lease
    service, for ``--ttl``, waiting at most ``--wait``; a UsageError for what a script cannot do."""
    if lease.preempt:
        raise UsageError(
            "--preempt cannot be used with --sql: a script cannot cancel another session's migration; "
            "nothing was written"
        )
    if lease.lease_url is not None or configured_lease_url(config) is not None:
        raise UsageError(
            "an offline script without --token takes its lease from the database's own lease service, "
            "not from Redis (--lease-url or fencemigrate.lease_url): take a Redis grant and pass its "
            "token with --token N; nothing was written"
        )
    return ScriptLease(ttl_ms=parse_ttl_ms(DEFAULT_TTL if lease.ttl is None else lease.ttl), wait_ms=lease.wait_ms())


def _expected_heads(script: ScriptDirectory, given: Sequence[str] | None, sql: bool) -> ExpectedHeads | None:
    """``--expect-heads`` resolved against the revision files (None: not given); refused with --sql."""
    if given is None:
        return None
    if sql:
        raise UsageError(
            "--expect-heads cannot be used with --sql: an offline script never reads the database's heads, "
            "so nothing could check them when its claim is taken"
        )
    return expected_heads(script, given)


def _token_plan(
    config: Config, token: int | str | None, run: RunOptions, lease: LeaseOptions, resource: str, holder: str
) -> TokenPlan:
    """The given ``token``, or the lease the run (or its script) takes itself when it has none."""
    if token is not None:
        lease_only = [name for name in lease.given() if name not in ("wait", "preempt")]
        if lease_only:
            raise UsageError(
                f"--{lease_only[0].replace('_', '-')} applies only when fencemigrate takes the lease "
                "itself; with --token your own lease service issued the token"
            )
        return GivenToken(parse_token(token))
    if run.sql:
        return _script_lease(config, lease)
    request = LeaseRequest(
        resource=resource,
        holder=holder,
        ttl_ms=parse_ttl_ms(DEFAULT_TTL if lease.ttl is None else lease.ttl),
        wait_ms=lease.wait_ms(),
        preempt=lease.preempt,
    )
    return OwnLease(request, check_lease_url(lease.lease_url or configured_lease_url(config)))
