"""One exception per outcome, each with its exit status.

Only ``cli.py`` turns these into output. Database errors raised by the fence schema
carry our own SQLSTATE codes and are mapped here explicitly (``from_database_error``).
"""

from __future__ import annotations

import json
from typing import Any

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_FENCED = 3
EXIT_BUSY = 4
EXIT_DIRTY = 5

SQLSTATE_FENCED = "FM001"  # raised by claim() and check_reapply(); FM002 (monotonic guard) is not ours to catch
SQLSTATE_ESCAPED = "FM003"  # a revision committed its transaction before Alembic recorded it
SQLSTATE_LEASE_GUARD = (
    "FM006"  # the lease guard: a write to agent_fence or lease no grant, renew, release or detach makes
)
LEASE_GUARD_PREFIX = "lease guard: "  # how its messages start on every database (SQLite's have no SQLSTATE)
_MYSQL_SIGNAL = 1644  # MySQL's error number for SIGNAL SQLSTATE '...'


class FencemigrateError(Exception):
    """Base class: a failure that fencemigrate reports as one clear line."""

    exit_status = EXIT_ERROR
    status = "error"

    def as_json(self) -> dict[str, Any]:
        """The JSON object the CLI prints for this outcome."""
        return {"status": self.status, "message": str(self)}


class UsageError(FencemigrateError):
    """Bad input detected before the database is touched."""

    exit_status = EXIT_USAGE
    status = "usage"


class TokenRequired(UsageError):
    """A command that would change the database was run without a fencing token (plain ``alembic``
    through a fenced env.py): bad usage under any fence, never a stale writer's FENCED."""


class DatabaseError(FencemigrateError):
    """The database refused or could not be reached; nothing was applied."""


def newer_token_wrote(fence: int, resource: str) -> str:
    """The reason of a FENCED claim (as PostgreSQL's ``claim()`` words it too)."""
    return f"token {fence} has since written to {resource}"


def newer_token_granted(fence: int, resource: str) -> str:
    """The reason of a FENCED claim when the newer token has been granted but has not written."""
    return f"token {fence} has since been granted {resource}"


class ImplausibleClock(FencemigrateError):
    """A grant refused because the clock that would judge its expiry (SQLite's: this machine's) is
    implausibly far ahead of the database's own record of time."""


class LeaseGuardRefused(DatabaseError):
    """The fence's lease guard (FM006) refused a write to agent_fence or lease that would forge a
    grant or an unissued token: nothing was changed."""

    status = "refused"


class NotTransactional(FencemigrateError):
    """The claim could not be proven to share a transaction with the DDL: refused, nothing ran."""


class Fenced(FencemigrateError):
    """A newer token has written to the resource, or the revision is not ours to re-apply."""

    exit_status = EXIT_FENCED
    status = "fenced"

    def __init__(
        self,
        resource: str,
        token: int,
        fence_token: int | None,
        reason: str,
        autocommitted: tuple[str, ...] = (),
        granted_only: bool = False,
    ) -> None:
        self.resource = resource
        self.token = token
        self.fence_token = fence_token
        self.reason = reason
        self.autocommitted = autocommitted  # revisions whose autocommit block ran before the rejection
        self.granted_only = granted_only  # the newer token was granted but has not written yet
        super().__init__(self.agent_message())

    def after_autocommit_blocks(self, revisions: tuple[str, ...]) -> Fenced:
        """The same rejection, for a run in which ``revisions`` ran statements in an autocommit block."""
        return Fenced(self.resource, self.token, self.fence_token, self.reason, revisions, self.granted_only)

    @property
    def by_newer_writer(self) -> bool:
        """Rejected because a newer token has written (the claim's reason), as far as the claim knows."""
        return self.fence_token is not None and self.reason == newer_token_wrote(self.fence_token, self.resource)

    def granted_not_written(self) -> Fenced:
        """The same rejection, once the event log shows that the newer token was only granted:
        a grant advances the fence before its holder writes anything."""
        assert self.fence_token is not None
        return Fenced(
            self.resource,
            self.token,
            self.fence_token,
            newer_token_granted(self.fence_token, self.resource),
            self.autocommitted,
            granted_only=True,
        )

    def agent_message(self) -> str:
        """The rejection, written for an agent that must stop and re-plan, not retry."""
        if self.fence_token is not None and self.fence_token > self.token:
            headline = f"FENCED: you no longer own {self.resource}."
            news = (
                "was granted after yours (it has not written yet)"
                if self.granted_only
                else ("has since written to this resource")
            )
            cause = f"Your lease token ({self.token}) is older than token {self.fence_token}, which {news}."
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
        return "\n".join(
            [
                headline,
                cause,
                *left,
                "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply.",
                "Your plan and your memory of this resource are probably stale, including anything",
                "your context summary says you 'hold'.",
                "Next step: run `fencemigrate state` and re-plan from what is actually there.",
                "If your goal is already met by the current state, report that and stop.",
            ]
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


class Interrupted(FencemigrateError):
    """SIGTERM or SIGINT stopped the command: what was in flight rolled back, the run's lease was released."""

    status = "interrupted"

    def __init__(self, signal_name: str, exit_status: int) -> None:
        self.signal_name = signal_name
        self.exit_status = exit_status
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

    exit_status = EXIT_FENCED
    status = "lost"

    def __init__(self, resource: str, holder: str, token: int | None, reason: str) -> None:
        self.resource = resource
        self.holder = holder
        self.token = token
        self.reason = reason
        super().__init__(
            "\n".join(
                [
                    f"LEASE LOST: you no longer own {resource} ({reason}).",
                    "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply.",
                    "Your plan and your memory of this resource are probably stale.",
                    "Next step: run `fencemigrate state`, acquire a new lease if there is still work, and re-plan.",
                    "If your goal is already met by the current state, report that and stop.",
                ]
            )
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


class LeaseBusy(FencemigrateError):
    """Another live holder has the lease (or a migration holds the fence): transient, try later."""

    exit_status = EXIT_BUSY
    status = "busy"

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

    exit_status = EXIT_BUSY
    status = "not replicated"

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


class Dirty(FencemigrateError):
    """A revision's DDL started in pre-check mode and never finished: writes wait for ``resolve``."""

    exit_status = EXIT_DIRTY
    status = "dirty"

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


def sqlstate_of(error: BaseException) -> str | None:
    """The SQLSTATE of a DBAPI error (psycopg 3, psycopg2, asyncpg), if it has one."""
    original = getattr(error, "orig", error)
    for attribute in ("sqlstate", "pgcode"):
        code = getattr(original, attribute, None)
        if isinstance(code, str):
            return code
    return None


_CONTENDED_SQLSTATES = {"55P03", "40P01"}  # PostgreSQL: lock_not_available, deadlock_detected
_CONTENDED_MYSQL_ERRORS = {1205, 1213}  # MySQL: lock wait timeout exceeded, deadlock found


def is_lock_contention(error: BaseException) -> bool:
    """True when a lock wait ran out or a deadlock was broken: another writer got there first."""
    if sqlstate_of(error) in _CONTENDED_SQLSTATES:
        return True
    args: tuple[Any, ...] = tuple(getattr(getattr(error, "orig", error), "args", ()))
    return len(args) > 0 and args[0] in _CONTENDED_MYSQL_ERRORS


def _detail_of(error: BaseException) -> str | None:
    original = getattr(error, "orig", error)
    diag = getattr(original, "diag", None)
    detail = getattr(diag, "message_detail", None) or getattr(original, "detail", None)
    return detail if isinstance(detail, str) else None


def _lease_guard_message(error: BaseException) -> str | None:
    """The message of a lease guard refusal (FM006 on PostgreSQL and MySQL, its prefix on SQLite), else None."""
    original = getattr(error, "orig", error)
    args: tuple[Any, ...] = tuple(getattr(original, "args", ()))
    if sqlstate_of(error) == SQLSTATE_LEASE_GUARD:
        text = getattr(getattr(original, "diag", None), "message_primary", None) or str(original)
    elif len(args) == 2 and args[0] == _MYSQL_SIGNAL and isinstance(args[1], str):
        text = args[1]
    elif len(args) == 1 and isinstance(args[0], str):
        text = args[0]
    else:
        return None
    return text if text.startswith(LEASE_GUARD_PREFIX) else None


def from_database_error(error: BaseException, resource: str, token: int) -> FencemigrateError | None:
    """Map an error raised with one of our SQLSTATEs to its outcome; None for anything else."""
    guard = _lease_guard_message(error)
    if guard is not None:
        return LeaseGuardRefused(
            f"the fence's lease guard (FM006) refused this write: {guard.removeprefix(LEASE_GUARD_PREFIX)}; "
            "nothing was changed"
        )
    if sqlstate_of(error) == SQLSTATE_ESCAPED:
        original = getattr(error, "orig", error)
        primary = getattr(getattr(original, "diag", None), "message_primary", None) or str(original)
        return NotTransactional(f"refused: {primary}; nothing of that revision was applied")
    if sqlstate_of(error) != SQLSTATE_FENCED:
        return None
    fields: dict[str, Any] = {}
    detail = _detail_of(error)
    if detail:
        try:
            fields = json.loads(detail)
        except ValueError:
            fields = {}
    return Fenced(
        resource=str(fields.get("resource", resource)),
        token=int(fields.get("token", token)),
        fence_token=fields.get("fence_token"),
        reason=str(fields.get("reason", "a newer token has written")),
    )
