"""One exception per outcome, each carrying its :class:`Outcome` (exit status, JSON status, MCP
code): the one table the CLI's output and help, plain ``alembic``'s env.py and the MCP server read;
the database's refusals found by SQLSTATE.

fencemigrate's own SQL (``sql/``) refuses with its own SQLSTATEs (FM001, FM002, ...): each has one
class here, registered by ``sqlstate=`` when the class is defined (as psycopg's ``errors.py``
registers PostgreSQL's), found by :func:`lookup` and built by :func:`from_database_error`.

An outcome is shown (:func:`render`) with the same words by ``fencemigrate`` and by plain
``alembic`` (the fence-aware env.py), with every password scrubbed; nothing here prints.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol, TypedDict, Unpack

from .scrub import json_text, scrub_secrets


@dataclass(frozen=True)
class Outcome:
    """What a failure is to each of its readers: the process's exit status, the ``status`` of the
    JSON object (and the text's ``fencemigrate: STATUS:`` prefix, unless the message speaks for
    itself), the MCP code an agent branches on, whether the MCP server then drops its token, and
    the line of ``--help``'s exit statuses that describes it (one per exit status)."""

    exit_status: int
    status: str
    mcp_code: str
    prefixed: bool = True
    drops_token: bool = False
    help: str | None = None

    @property
    def transient(self) -> bool:
        """An agent may try again later (and only then)."""
        return self.mcp_code == "LEASE_BUSY"


ERROR = Outcome(1, "error", "ERROR", help="error: the database refused or was unreachable, or a revision failed")
USAGE = Outcome(2, "usage", "USAGE", help="bad usage: unknown option, bad token, unknown revision, bad config")
FENCED = Outcome(
    3, "fenced", "FENCED", False, True, "FENCED or lease lost: not transient; re-read the state and re-plan"
)
LEASE_LOST = Outcome(3, "lost", "LEASE_LOST", drops_token=True)
LEASE_BUSY = Outcome(4, "busy", "LEASE_BUSY", help="lease busy: another live holder has the lease; try again later")
DIRTY = Outcome(
    5, "dirty", "DIRTY", prefixed=False, help="dirty: a pre-check revision never finished; see fencemigrate resolve"
)
REFUSED = Outcome(1, "refused", "ERROR")
NOT_REPLICATED = Outcome(4, "not replicated", "ERROR")
GRANT_RELEASED = Outcome(1, "grant released", "ERROR")
INTERRUPTED = Outcome(1, "interrupted", "ERROR")

EXIT_STATUSES = (
    ("0", "success"),
    *(
        (str(outcome.exit_status), outcome.help)
        for outcome in (ERROR, USAGE, FENCED, LEASE_BUSY, DIRTY)
        if outcome.help
    ),
    ("130", "stopped by SIGINT: rolled back, lease released"),
    ("143", "stopped by SIGTERM: rolled back, lease released"),
)

LEASE_GUARD_PREFIX = "lease guard: "  # how the lease guard's messages start on every database

_BY_SQLSTATE: dict[str, type[FencemigrateError]] = {}


@dataclass(frozen=True)
class Refusal:
    """What fencemigrate's own SQL said when it refused: its SQLSTATE, message and DETAIL (if any)."""

    sqlstate: str
    message: str
    detail: str | None = None


class FencemigrateError(Exception):
    """Base class: a failure that fencemigrate reports as one clear line.

    A subclass defined with ``sqlstate="FM..."`` is the outcome of that SQLSTATE; ``message_prefixes``
    are how its messages start, which is how it is told on MySQL and SQLite, whose drivers do not
    report the SQLSTATE of a ``SIGNAL`` or ``RAISE``.
    """

    outcome: Outcome = ERROR  # the class's; an instance whose exit status is its cause's has its own
    sqlstate: ClassVar[str | None] = None
    message_prefixes: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(
        cls, sqlstate: str | None = None, message_prefixes: tuple[str, ...] = (), **kwargs: Any
    ) -> None:
        super().__init_subclass__(**kwargs)
        if sqlstate is None:
            return
        if sqlstate in _BY_SQLSTATE:
            raise TypeError(f"SQLSTATE {sqlstate} is already the outcome {_BY_SQLSTATE[sqlstate].__name__}")
        cls.sqlstate, cls.message_prefixes = sqlstate, message_prefixes
        _BY_SQLSTATE[sqlstate] = cls

    @classmethod
    def from_refusal(cls, refusal: Refusal, resource: str, token: int) -> FencemigrateError:
        """This outcome for ``refusal``, raised while ``token`` wrote to ``resource``: by default
        the database's message as it is."""
        return cls(refusal.message)

    @property
    def exit_status(self) -> int:
        return self.outcome.exit_status

    @property
    def status(self) -> str:
        return self.outcome.status

    def as_json(self) -> dict[str, Any]:
        """The JSON object the CLI prints for this outcome."""
        return {"status": self.status, "message": str(self)}


class UsageError(FencemigrateError):
    """Bad input detected before the database is touched."""

    outcome = USAGE


class TokenRequired(UsageError):
    """A command that would change the database was run without a fencing token (plain ``alembic``
    through a fenced env.py): bad usage under any fence, never a stale writer's FENCED."""


class TokenlessWriteRefused(
    TokenRequired,
    sqlstate="FM005",
    message_prefixes=(
        "fencemigrate refused a version-table write without a fencing token",  # MySQL
        "fencemigrate refused this write to the Alembic version table",  # SQLite
    ),
):
    """The version table's guard (FM005) refused a write that carries no fencing token: as
    :class:`TokenRequired`, told by the database; its message says what to do."""


class DatabaseError(FencemigrateError):
    """The database refused or could not be reached; nothing was applied."""


class ReadOnlyDatabase(DatabaseError):
    """The database refused a write because it is read-only (PostgreSQL's
    ``default_transaction_read_only`` or a hot standby, MySQL's ``read_only``, a SQLite file this
    process may not write): names the step that was refused and why; nothing was changed."""

    def __init__(self, step: str, reason: str) -> None:
        """``step``: what fencemigrate was doing (``the lease grant``); ``reason``: the database's words."""
        self.step = step
        self.reason = reason
        super().__init__(f"read-only database: {step} was refused: {reason}; nothing was changed")

    def as_json(self) -> dict[str, Any]:
        return {**super().as_json(), "step": self.step, "reason": self.reason}


class ErrorReader(Protocol):
    """How one database's driver errors say what happened: a dialect class of
    :mod:`fencemigrate.dialects`, registered when it is defined (:func:`register_error_reader`), so
    that this module knows no database and imports nothing above it. A driver's error only arrives
    once its dialect's module is loaded: :func:`~fencemigrate.dialects.dialect_for` loads it before
    fencemigrate does anything on such a database."""

    def read_only_reason(self, error: BaseException) -> str | None:
        """What :func:`read_only_reason` says of ``error`` when this database refused it as read-only, else None."""

    def is_lock_contention(self, error: BaseException) -> bool:
        """Whether ``error`` is this database's lock wait running out or deadlock broken."""

    def refusal_words(self, error: BaseException) -> tuple[str | None, str | None]:
        """The message and DETAIL of ``error`` (a driver's own) as this database's driver gives them
        apart from its text, each None when it does not (:func:`refusal_of`)."""


_READERS: list[ErrorReader] = []


def register_error_reader(reader: ErrorReader) -> None:
    """Read driver errors with ``reader`` too (a dialect class, when it is defined)."""
    _READERS.append(reader)


def read_only_reason(error: BaseException) -> str | None:
    """Why the database refused a write as read-only (its first line, and what makes it so), or
    None when ``error`` is another error."""
    for reader in _READERS:
        reason = reader.read_only_reason(error)
        if reason is not None:
            return reason
    return None


def read_only_words(error: BaseException, said: object, hint: str) -> str:
    """A read-only refusal's reason (:func:`read_only_reason`): the first line of what the database
    ``said`` (the driver's error's name when it said nothing), then ``hint``, what makes it read-only."""
    original = getattr(error, "orig", error)
    lines = str(said).strip().splitlines()
    return f"{lines[0] if lines else type(original).__name__} ({hint})"


@contextmanager
def refused_step(step: str) -> Iterator[None]:
    """A read-only database's refusal of what runs inside is :class:`ReadOnlyDatabase` naming ``step``."""
    try:
        yield
    except FencemigrateError:
        raise
    except Exception as error:
        reason = read_only_reason(error)
        if reason is None:
            raise
        raise ReadOnlyDatabase(step, reason) from None


class CheckDatabaseUnreadable(FencemigrateError):
    """``check`` could not read the database through env.py (unreachable, no URL, env.py failed): the
    gate fails, as ``alembic check`` does, rather than pass on the lint alone; ``--no-db`` lints only."""

    def __init__(self, cause: FencemigrateError) -> None:
        super().__init__(
            f"{cause}; check compares the database and the models, as `alembic check` does, so it fails "
            "without them: to lint the revision files alone, give --no-db"
        )


class GitFailed(FencemigrateError):
    """A git command of a fenced push failed, was refused by the remote or timed out, for a reason
    other than the branch having moved (that is :class:`Fenced`)."""

    def __init__(self, command: str, reason: str) -> None:
        """``command``: what ran (``git push origin``), without its URL's password; ``reason``: why it failed."""
        self.command = command
        self.reason = reason
        super().__init__(f"{command} failed: {reason}")

    def as_json(self) -> dict[str, Any]:
        return {**super().as_json(), "command": self.command, "reason": self.reason}


# Where a resource's tokens come from (``agent_fence.token_source``; see :mod:`.fence.tokens`).
EXTERNAL = "external"
LEASE_SERVICE = "lease service"
REDIS = "redis"
NONE_YET = "none yet"  # no fence row: nothing has written or been granted


def newer_token_wrote(fence: int, resource: str) -> str:
    """The reason of a FENCED claim (as PostgreSQL's ``claim()`` words it too)."""
    return f"token {fence} has since written to {resource}"


def never_issued(resource: str, token: int, fence: int, source: str) -> str:
    """The reason of a FENCED claim above the fence of a leased resource (as claim() words it)."""
    service = "the lease service (Redis)" if source == REDIS else "the lease service"
    return f"token {token} was never issued by {service} for {resource} (the last token it issued is {fence})"


def refuse_token(resource: str, token: int, fence: int, source: str) -> None:
    """FENCED when a higher token has written, or when ``token`` is above the fence of a resource
    whose lease service never issued it (the claim statement's condition, explained)."""
    if fence > token:
        raise Fenced(resource, token, fence, newer_token_wrote(fence, resource))
    if fence < token and source != EXTERNAL:
        raise Fenced(resource, token, fence, never_issued(resource, token, fence, source))


def newer_token_granted(fence: int, resource: str) -> str:
    """The reason of a FENCED claim when the newer token has been granted but has not written."""
    return f"token {fence} has since been granted {resource}"


class ImplausibleClock(FencemigrateError):
    """A grant refused because the clock that would judge its expiry (SQLite's: this machine's) is
    implausibly far ahead of the database's own record of time."""


class LeaseGuardRefused(DatabaseError, sqlstate="FM006", message_prefixes=(LEASE_GUARD_PREFIX,)):
    """The fence's lease guard (FM006) refused a write to agent_fence or lease that would forge a
    grant or an unissued token: nothing was changed."""

    outcome = REFUSED

    @classmethod
    def from_refusal(cls, refusal: Refusal, resource: str, token: int) -> LeaseGuardRefused:
        return cls(
            f"the fence's lease guard (FM006) refused this write: {refusal.message.removeprefix(LEASE_GUARD_PREFIX)}; "
            "nothing was changed"
        )


class NotTransactional(FencemigrateError, sqlstate="FM003"):
    """The claim could not be proven to share a transaction with the DDL: refused, nothing ran
    (FM003: a revision committed its transaction before Alembic recorded it)."""

    @classmethod
    def from_refusal(cls, refusal: Refusal, resource: str, token: int) -> NotTransactional:
        return cls(f"refused: {refusal.message}; nothing of that revision was applied")


NOT_TRANSIENT = "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply."
"""The line after which a FENCED or LEASE LOST message tells the agent what to do next."""

READ_THE_STATE = "run `fencemigrate state` and re-plan from what is actually there."
"""The next step of a fenced agent whose resource is the database."""


def stale_plan(next_step: str = READ_THE_STATE, aftermath: tuple[str, ...] = ()) -> list[str]:
    """What a fenced agent is told to do: stop, take ``next_step`` and re-plan, never retry
    (``aftermath``: what its interface did about the rejection, said right after "not transient")."""
    return [
        NOT_TRANSIENT,
        *aftermath,
        "Your plan and your memory of this resource are probably stale, including anything",
        "your context summary says you 'hold'.",
        f"Next step: {next_step}",
        "If your goal is already met by the current state, report that and stop.",
    ]


_STALE_PLAN = stale_plan()


class _FencedChanges(TypedDict, total=False):
    """The fields a copy of a :class:`Fenced` may change (its resource, token and next step it keeps)."""

    fence_token: int | None
    reason: str
    autocommitted: tuple[str, ...]
    granted_only: bool


class Fenced(FencemigrateError, sqlstate="FM001"):
    """A newer token has written to the resource, or the revision is not ours to re-apply."""

    outcome = FENCED

    def __init__(
        self,
        resource: str,
        token: int,
        fence_token: int | None,
        reason: str,
        autocommitted: tuple[str, ...] = (),
        granted_only: bool = False,
        next_step: str = READ_THE_STATE,
    ) -> None:
        """``next_step``: what the agent is told to read before it re-plans (``fencemigrate state``
        for the database; a fenced git push or file write names the branch or file)."""
        self.resource = resource
        self.token = token
        self.fence_token = fence_token
        self.reason = reason
        self.autocommitted = autocommitted  # revisions whose autocommit block ran before the rejection
        self.granted_only = granted_only  # the newer token was granted but has not written yet
        self.next_step = next_step
        super().__init__(self.agent_message())

    def after_autocommit_blocks(self, revisions: tuple[str, ...]) -> Fenced:
        """The same rejection, for a run in which ``revisions`` ran statements in an autocommit block."""
        return self._but(autocommitted=revisions)

    def at_fence(self, fence_token: int | None) -> Fenced:
        """The same rejection, reporting ``fence_token`` as the resource's fence token."""
        return self._but(fence_token=fence_token)

    @property
    def by_newer_writer(self) -> bool:
        """Rejected because a newer token has written (the claim's reason), as far as the claim knows."""
        return self.fence_token is not None and self.reason == newer_token_wrote(self.fence_token, self.resource)

    def granted_not_written(self) -> Fenced:
        """The same rejection, once the event log shows that the newer token was only granted:
        a grant advances the fence before its holder writes anything."""
        assert self.fence_token is not None
        return self._but(reason=newer_token_granted(self.fence_token, self.resource), granted_only=True)

    def _but(self, **changes: Unpack[_FencedChanges]) -> Fenced:
        """The same rejection with ``changes`` (as :func:`dataclasses.replace`): every other field kept."""
        return Fenced(
            resource=self.resource,
            token=self.token,
            fence_token=changes.get("fence_token", self.fence_token),
            reason=changes.get("reason", self.reason),
            autocommitted=changes.get("autocommitted", self.autocommitted),
            granted_only=changes.get("granted_only", self.granted_only),
            next_step=self.next_step,
        )

    def news(self) -> list[str]:
        """What happened, without what to do about it: the headline, the cause and, after autocommit
        blocks, what they may have left applied."""
        if self.fence_token is not None and self.fence_token > self.token:
            headline = f"FENCED: you no longer own {self.resource}."
            newer = (
                "was granted after yours (it has not written yet)"
                if self.granted_only
                else ("has since written to this resource")
            )
            cause = f"Your lease token ({self.token}) is older than token {self.fence_token}, which {newer}."
        else:
            headline = f"FENCED: this write to {self.resource} is not yours to make."
            cause = f"Rejected for token {self.token}: {self.reason}."
        left = (
            [
                f"Statements of revision {', '.join(self.autocommitted)} ran in an autocommit block, outside the "
                "fenced transaction, and may have been left applied (so may what the revision ran before the "
                "block): compare the schema with the revision before you re-plan."
            ]
            if self.autocommitted
            else []
        )
        return [headline, cause, *left]

    def agent_message(self) -> str:
        """The rejection, written for an agent that must stop and re-plan, not retry: the news, then
        the stale plan with this rejection's next step."""
        return "\n".join([*self.news(), *stale_plan(self.next_step)])

    @classmethod
    def from_refusal(cls, refusal: Refusal, resource: str, token: int) -> Fenced:
        """The claim's refusal, its fields read from the JSON of its DETAIL."""
        fields: dict[str, Any] = {}
        if refusal.detail:
            try:
                fields = json.loads(refusal.detail)
            except ValueError:
                fields = {}
        return cls(
            resource=str(fields.get("resource", resource)),
            token=int(fields.get("token", token)),
            fence_token=fields.get("fence_token"),
            reason=str(fields.get("reason", "a newer token has written")),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "resource": self.resource,
            "token": self.token,
            "fence_token": self.fence_token,
            "reason": self.reason,
            "autocommitted": list(self.autocommitted),
            "message": str(self),
        }


@dataclass(frozen=True)
class AppliedBy:
    """Who applied a revision, as the ledger says (None: the ledger has no row for it)."""

    revision: str
    holder: str | None = None
    token: int | None = None
    applied_at: str | None = None

    def described(self) -> str:
        """``r04 (applied by B under token 7 at ...)``."""
        if self.holder is None:
            return f"{self.revision} (the ledger does not say who applied it)"
        return f"{self.revision} (applied by {self.holder} under token {self.token} at {self.applied_at})"


FETCH_AND_READ_THE_STATE = (
    "fetch the revision files the database has (`git pull`), run `fencemigrate state` and re-plan from what "
    "is actually there."
)
"""The next step of an agent whose checkout lacks revisions the database has."""


class DatabaseAhead(Fenced):
    """The database has revisions the run's revision files do not (a newer holder applied them):
    the news that the database moved on, FENCED like a newer token, never a usage error."""

    def __init__(
        self, resource: str, token: int | None, applied: tuple[AppliedBy, ...], fence_token: int | None = None
    ) -> None:
        """``token``: the run's (None before its own lease was granted)."""
        self.applied = applied
        names = ", ".join(entry.revision for entry in applied)
        reason = f"the database has revision {names}, which your revision files do not have"
        super().__init__(resource, token or 0, fence_token, reason, next_step=FETCH_AND_READ_THE_STATE)

    def _but(self, **changes: Unpack[_FencedChanges]) -> Fenced:
        """The same news, with the fence token the log read (nothing else changes for it)."""
        return DatabaseAhead(self.resource, self.token, self.applied, changes.get("fence_token", self.fence_token))

    def news(self) -> list[str]:
        one = len(self.applied) == 1
        listed = ", ".join(entry.described() for entry in self.applied)
        return [
            f"FENCED: {self.resource} has moved on past your revision files.",
            f"Revision{'' if one else 's'} {listed} {'is' if one else 'are'} applied to the database, and your "
            f"checkout has no file for {'it' if one else 'them'}: a newer holder applied "
            f"{'it' if one else 'them'}. Nothing was run.",
        ]

    def as_json(self) -> dict[str, Any]:
        return {
            **super().as_json(),
            "token": self.token or None,
            "applied": [
                {"revision": e.revision, "holder": e.holder, "token": e.token, "applied_at": e.applied_at}
                for e in self.applied
            ],
        }


class MonotonicGuardRefused(
    FencemigrateError,
    sqlstate="FM002",
    message_prefixes=(
        "agent_fence is monotonic: ",
        "the lease token counter is monotonic: ",
        "redis_grant is monotonic: ",  # SQLite and MySQL
    ),
):
    """The fence's monotonic guard (FM002) refused a write that would lower a fence token, the
    lease token counter or the last token Redis issued (``redis_grant``), or rename or delete their rows.

    A fencing refusal (exit 3, the FENCED guidance): the guard is there so that no write, by a
    revision, env.py or any client, can hand a resource back to older tokens, and a writer that
    tries is working from a stale picture of who owns it; retrying cannot succeed.
    """

    outcome = FENCED

    def __init__(self, resource: str, reason: str, writer: str = "", aftermath: str = "") -> None:
        """``writer``: who wrote, when known (a revision and its line); ``aftermath``: what became of
        the run's writes, after the reason."""
        self.resource = resource
        self.reason = reason
        self.writer = writer
        self.aftermath = aftermath
        super().__init__(self.agent_message())

    def news(self) -> list[str]:
        """What happened, without what to do about it: the headline, what the guard refused and why it must."""
        headline = (
            f"FENCED: this write to {self.resource} is not yours to make."
            if self.resource
            else "FENCED: this write is not yours to make."
        )
        by = f" by {self.writer}" if self.writer else ""
        return [
            headline,
            f"The fence's monotonic guard (FM002) refused a write{by}: {self.reason}{self.aftermath}.",
            "No client may lower a fence token or the lease token counter, or rename or delete their rows:",
            "that would let older tokens write again.",
        ]

    def agent_message(self) -> str:
        """The refusal, written for an agent that must stop and re-plan: the news, then the stale plan."""
        return "\n".join([*self.news(), *_STALE_PLAN])

    @classmethod
    def from_refusal(cls, refusal: Refusal, resource: str, token: int) -> MonotonicGuardRefused:
        return cls(resource, refusal.message)

    def written_by(self, writer: str, aftermath: str) -> MonotonicGuardRefused:
        """The same refusal, naming who made the write and what became of the run's writes."""
        return MonotonicGuardRefused(self.resource, self.reason, writer, aftermath)

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "resource": self.resource,
            "reason": self.reason,
            "writer": self.writer or None,
            "message": str(self),
        }


class Interrupted(FencemigrateError):
    """SIGTERM or SIGINT stopped the command: what was in flight rolled back, the run's lease was released."""

    outcome = INTERRUPTED

    def __init__(self, signal_name: str, exit_status: int) -> None:
        self.signal_name = signal_name
        self.outcome = replace(INTERRUPTED, exit_status=exit_status)
        super().__init__(
            f"stopped by {signal_name}: the transaction in flight was rolled back and the lease this run "
            "took (if any) released; what committed before the signal stays: run `fencemigrate state` "
            "before you go on"
        )

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "signal": self.signal_name, "message": str(self)}


class TokensExhausted(FencemigrateError):
    """A grant found no token left above the fence (it is at the largest token): nothing was changed."""


class LeaseLost(FencemigrateError):
    """A renew or release by someone who no longer holds the lease: stale, like FENCED."""

    outcome = LEASE_LOST

    def __init__(self, resource: str, holder: str, token: int | None, reason: str) -> None:
        self.resource = resource
        self.holder = holder
        self.token = token
        self.reason = reason
        super().__init__(self.agent_message())

    def news(self) -> list[str]:
        """What happened, without what to do about it."""
        return [f"LEASE LOST: you no longer own {self.resource} ({self.reason})."]

    def agent_message(self) -> str:
        """The loss, written for an agent that must stop and re-plan: the news, then its own stale plan
        (which adds acquiring a new lease to the next step)."""
        return "\n".join(
            [
                *self.news(),
                NOT_TRANSIENT,
                "Your plan and your memory of this resource are probably stale.",
                "Next step: run `fencemigrate state`, acquire a new lease if there is still work, and re-plan.",
                "If your goal is already met by the current state, report that and stop.",
            ]
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "resource": self.resource,
            "holder": self.holder,
            "token": self.token,
            "reason": self.reason,
            "message": str(self),
        }


class OtherTokenSource(UsageError):
    """A lease call made to a service other than the one the resource's tokens come from (its
    fence's ``token_source``), which that service cannot judge: the built-in lease service asked to
    grant or detach a resource whose tokens come from Redis, whose leases the database cannot see.
    Bad usage (the command must name the resource's service): nothing was changed."""

    def __init__(self, resource: str, source: str, reason: str) -> None:
        self.resource = resource
        self.source = source
        super().__init__(reason)

    def as_json(self) -> dict[str, Any]:
        return {**super().as_json(), "resource": self.resource, "token_source": self.source}


class LeaseBusy(FencemigrateError):
    """Another live holder has the lease (or a migration holds the fence): transient, try later."""

    outcome = LEASE_BUSY

    def __init__(self, resource: str, holder: str | None, reason: str) -> None:
        self.resource = resource
        self.holder = holder
        self.reason = reason
        super().__init__(f"lease on {resource} is busy: {reason}; this is transient, try again later")

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "resource": self.resource,
            "holder": self.holder,
            "reason": self.reason,
            "message": str(self),
        }


class GrantNotReplicated(FencemigrateError):
    """A grant committed on the primary, but no synchronous standby confirmed it before its wait was
    cut short: not granted (the lease service released it); a failover now could issue its token again."""

    outcome = NOT_REPLICATED

    def __init__(self, resource: str, token: int, waited_ms: int) -> None:
        self.resource = resource
        self.token = token
        super().__init__(
            f"lease on {resource} not granted: token {token} was committed on the primary, but no synchronous "
            f"standby confirmed it within {waited_ms / 1000:g}s (or its wait was cancelled), so it was released; "
            f"a promoted standby could issue token {token} again, so nothing may be written with it. Try again "
            "once a synchronous standby is connected (pg_stat_replication shows one with sync_state 'sync')"
        )

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "resource": self.resource, "token": self.token, "message": str(self)}


class GrantUndone(FencemigrateError):
    """A grant committed, then what its caller needs with it (the state read after it) failed: the
    grant was released (or, when that failed too, is left to expire), so no caller holds a lease it
    was never told of. The failure's own exit status."""

    outcome = GRANT_RELEASED

    def __init__(
        self, resource: str, holder: str, token: int, failure: BaseException, still_live_until: str | None
    ) -> None:
        self.resource, self.holder, self.token, self.still_live_until = resource, holder, token, still_live_until
        self.outcome = replace(
            GRANT_RELEASED,
            exit_status=failure.exit_status if isinstance(failure, FencemigrateError) else ERROR.exit_status,
        )
        done = (
            "then released"
            if still_live_until is None
            else f"which could not be released either: it expires at {still_live_until}"
        )
        super().__init__(
            f"lease on {resource} granted to {holder} with token {token}, {done}: after the grant, {failure}. "
            "Nothing may be written with that token; acquire the lease again"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "resource": self.resource,
            "holder": self.holder,
            "token": self.token,
            "expires_at": self.still_live_until,
            "message": str(self),
        }


class Dirty(FencemigrateError):
    """A revision's DDL started in pre-check mode and never finished: writes wait for ``resolve``."""

    outcome = DIRTY

    def __init__(self, resource: str, revision: str, state: str, token: int, holder: str, since: str) -> None:
        self.resource = resource
        self.revision = revision
        self.state = state
        self.token = token
        self.holder = holder
        self.since = since
        action = "upgrade" if state == "applying" else "downgrade"
        super().__init__(
            "\n".join(
                [
                    f"DIRTY: revision {revision} of {resource} did not finish: its {action} was started "
                    f"under token {token} by {holder} at {since} and never completed.",
                    "Its DDL may be partly applied (in pre-check mode statements commit before the revision ends).",
                    "Nothing was run. Fenced writes to this resource are refused until this is resolved.",
                    "Next step: compare the schema with the revision, finish or undo what it did by hand, then run",
                    f"`fencemigrate resolve {revision} --token N --as applied` (its DDL is all in) or",
                    f"`fencemigrate resolve {revision} --token N --as rolled-back` (none of it is left).",
                ]
            )
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "resource": self.resource,
            "revision": self.revision,
            "state": self.state,
            "token": self.token,
            "holder": self.holder,
            "since": self.since,
            "message": str(self),
        }


class NotApplied(FencemigrateError):
    """``show REV --applied`` for a revision the database's ledger has no row for: nothing was applied
    (or stamped) as REV by a fenced run, so there is no text to show."""

    def __init__(self, revision: str, version_table: str) -> None:
        self.revision = revision
        super().__init__(
            f"{revision} is not applied: the ledger of version table {version_table} has no row for it, so the "
            "database has no text of it to show (see `fencemigrate state` for what is applied)"
        )

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "revision": self.revision, "message": str(self)}


class AppliedTextNotRecorded(FencemigrateError):
    """A downgrade of a revision whose file changed since it was applied, when the ledger keeps no
    text of what was applied: neither downgrade() is known to undo it, so nothing runs."""

    _WHY = (
        "the ledger has no text of the applied version (recorded before the fence schema kept it), so neither "
        "downgrade() is known to undo what the database has. Nothing was run. Put back the file as it was "
        "applied (from version control: its sha256 is {applied})"
    )

    def __init__(self, revision: str, token: int, file_sha256: str, applied_sha256: str, why: str = "") -> None:
        """``why``: what is wrong with the ledger's text, ending in what to put back (default: :attr:`_WHY`)."""
        self.revision = revision
        super().__init__(
            f"cannot roll back {revision}: its file changed since it was applied under token {token} "
            f"(sha256 {file_sha256[:12]} on disk, {applied_sha256[:12]} applied), and "
            f"{(why or self._WHY).format(applied=applied_sha256)} and run the command again, or undo the "
            "revision by hand and `fencemigrate stamp` below it"
        )

    def as_json(self) -> dict[str, Any]:
        return {"status": self.status, "revision": self.revision, "message": str(self)}


class AppliedTextAltered(AppliedTextNotRecorded):
    """A downgrade of a revision whose file changed since it was applied, when the ledger's text of
    the applied version does not hash to the sha256 recorded with it: the text was changed in the
    database after it was applied, and is not run."""

    def __init__(self, revision: str, token: int, file_sha256: str, applied_sha256: str, text_sha256: str) -> None:
        super().__init__(
            revision,
            token,
            file_sha256,
            applied_sha256,
            f"the ledger's text of the applied version hashes to {text_sha256[:12]}, not to the sha256 recorded "
            "with it: it was changed in the database after it was applied, so it is not run. Nothing was run. "
            "Find out who wrote the ledger row (`fencemigrate timeline`); put back the file as it was applied "
            "(its sha256 is {applied})",
        )


class HeadsMoved(FencemigrateError):
    """The heads changed between planning and the first claim; the run rolled back and can re-plan."""


@dataclass(frozen=True)
class CodeLocation:
    """Where in a file of the project an error passed last: its path as shown, line and function."""

    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}, line {self.line}, in {self.function}"


class CodeFailed(FencemigrateError):
    """The project's own code raised: ``what`` (a revision, env.py) at ``location``, if it was found;
    ``cause`` is the error in one line."""

    def __init__(self, what: str, location: CodeLocation | None, cause: str, aftermath: str, how: str = "") -> None:
        self.location = location
        self.cause = cause
        where = f" ({location})" if location is not None else ""
        super().__init__(f"{what}{where} failed{how}: {cause}{aftermath}")

    def as_json(self) -> dict[str, Any]:
        return {
            **super().as_json(),
            "file": None if self.location is None else self.location.file,
            "line": None if self.location is None else self.location.line,
            "function": None if self.location is None else self.location.function,
            "error": self.cause,
        }


class RevisionFailed(CodeFailed):
    """A revision's ``upgrade()`` or ``downgrade()`` raised."""

    def __init__(self, revision: str, location: CodeLocation | None, cause: str, aftermath: str, how: str = "") -> None:
        """``aftermath`` follows the error (what became of the run's writes); ``how`` follows "failed"."""
        self.revision = revision
        super().__init__(f"revision {revision}", location, cause, aftermath, how)

    def as_json(self) -> dict[str, Any]:
        return {**super().as_json(), "revision": self.revision}


class RevisionDatabaseFailed(RevisionFailed, DatabaseError):
    """A revision's statement failed in the database (still a database error: a grant with
    ``--preempt`` may have ended the run's session)."""


class EnvPyFailed(CodeFailed):
    """env.py itself raised (not a revision, not the database)."""

    def __init__(self, location: CodeLocation | None, cause: str) -> None:
        super().__init__("env.py", location, cause, "")


def sqlstate_of(error: BaseException) -> str | None:
    """The SQLSTATE of a DBAPI error (psycopg 3, psycopg2, asyncpg), if it has one; None for
    fencemigrate's own outcomes, whose ``sqlstate`` names the code they stand for."""
    original = getattr(error, "orig", error)
    if isinstance(original, FencemigrateError):
        return None
    for attribute in ("sqlstate", "pgcode"):
        code = getattr(original, attribute, None)
        if isinstance(code, str):
            return code
    return None


def is_lock_contention(error: BaseException) -> bool:
    """True when a lock wait ran out or a deadlock was broken: another writer got there first."""
    return any(reader.is_lock_contention(error) for reader in _READERS)


def lookup(sqlstate: str) -> type[FencemigrateError]:
    """The outcome of one of fencemigrate's SQLSTATEs; ``KeyError`` for any other."""
    return _BY_SQLSTATE[sqlstate]


def refusal_of(error: BaseException) -> Refusal | None:
    """What fencemigrate's own SQL said, if ``error`` is one of its refusals: told by its SQLSTATE
    (PostgreSQL), else by how its message starts (a MySQL ``SIGNAL``, a SQLite ``RAISE``). The
    message and DETAIL are the driver's own where it keeps them apart (:meth:`ErrorReader.refusal_words`),
    else the error's text."""
    original = getattr(error, "orig", error)
    message, detail = next(
        (words for reader in _READERS if (words := reader.refusal_words(original)) != (None, None)), (None, None)
    )
    sqlstate = sqlstate_of(error)
    if sqlstate is not None:
        if sqlstate not in _BY_SQLSTATE:
            return None
        return Refusal(sqlstate, str(original) if message is None else message, detail)
    if message is None:
        args: tuple[Any, ...] = tuple(getattr(original, "args", ()))
        if len(args) != 1 or not isinstance(args[0], str):
            return None
        message = args[0]
    for sqlstate, outcome in _BY_SQLSTATE.items():
        if outcome.message_prefixes and message.startswith(outcome.message_prefixes):
            return Refusal(sqlstate, message)
    return None


def from_database_error(error: BaseException, resource: str, token: int) -> FencemigrateError | None:
    """The outcome of an error raised by fencemigrate's own SQL (:func:`refusal_of`), raised while
    ``token`` wrote to ``resource``; None for any other error."""
    refusal = refusal_of(error)
    if refusal is None:
        return None
    return lookup(refusal.sqlstate).from_refusal(refusal, resource, token)


@dataclass(frozen=True)
class Rendered:
    """An error as shown: its ``text`` (no final newline), the stream it goes to and the exit status."""

    text: str
    to_stderr: bool
    exit_status: int


def render(error: FencemigrateError, as_json: bool) -> Rendered:
    """``error`` as one JSON object on stdout, or as ``fencemigrate: STATUS: message`` on stderr
    (FENCED and DIRTY as their own lines)."""
    if as_json:
        return Rendered(json_text(error.as_json()), to_stderr=False, exit_status=error.exit_status)
    prefix = f"fencemigrate: {error.status}: " if error.outcome.prefixed else ""
    return Rendered(prefix + scrub_secrets(str(error)), to_stderr=True, exit_status=error.exit_status)
