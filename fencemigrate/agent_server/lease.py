"""The server's own lease: the grant it holds for its holder, kept in this process and never handed
to the agent, and forgotten as soon as the lease is known to be lost.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from ..errors import FencemigrateError, LeaseLost, UsageError
from ..leases import Grant, LeaseStatus
from .git_push import BranchRecord

NO_GRANT = (
    "this server holds no lease on {resource}, so it writes nothing: call acquire_lease and read the "
    "state it returns, then plan from that state and call this tool again. No tool takes a lease and "
    "writes in one step."
)


@dataclass(frozen=True)
class ServerIdentity:
    """Who this server writes as, what it writes to, and for how long it asks for the lease."""

    holder: str
    resource: str
    ttl: str | None  # --ttl; None: the lease service's default
    project_dir: Path  # the directory write_file is confined to, and whose git repository push_branch pushes
    branches: tuple[str, ...] = ()  # --branch: recorded at each grant, the only branches push_branch pushes
    remote: str = "origin"
    read_secret_files: bool = False  # --read-secret-files: read_file reads conventionally secret files, redacted


class ServerLease:
    """The grant this server holds (or None), why it was dropped, and a lock that runs one tool call
    at a time."""

    def __init__(self, identity: ServerIdentity) -> None:
        self.identity = identity
        self.calls = threading.Lock()  # one tool call at a time: they share the grant and the config
        self._grant: Grant | None = None
        self._dropped_by: FencemigrateError | None = None  # the FENCED or LEASE_LOST that dropped the token
        self._branches: dict[str, BranchRecord] = {}  # recorded at the current grant
        self._heads: tuple[str, ...] = ()  # the heads of the last state the agent was shown

    @property
    def grant(self) -> Grant | None:
        """The grant held now, or None."""
        return self._grant

    def required(self) -> Grant:
        """The grant to write under. Without one nothing is written: the FENCED or LEASE_LOST that
        dropped the token is raised again (the news has not changed until a new grant), or else a
        UsageError that says to acquire the lease first."""
        if self._grant is None:
            if self._dropped_by is not None:
                raise self._dropped_by
            raise UsageError(NO_GRANT.format(resource=self.identity.resource))
        return self._grant

    def granted(self, grant: Grant, branches: dict[str, BranchRecord] | None = None) -> None:
        """Hold ``grant``: a new grant with the ``branches`` recorded for it, or (``branches`` None)
        the current grant renewed, its records kept."""
        self._grant, self._dropped_by = grant, None
        if branches is not None:
            self._branches = dict(branches)

    def forget(self, dropped_by: FencemigrateError | None = None) -> None:
        """Drop the token and the branches recorded with it: after FENCED or LEASE_LOST
        (``dropped_by``) or a release, no later call can write under it."""
        self._grant, self._dropped_by, self._branches = None, dropped_by, {}

    def shown_heads(self, heads: list[str]) -> None:
        """The agent was shown a state with ``heads`` (read_state, a lease tool), or this server's
        own write moved the heads there: the next write expects them."""
        self._heads = tuple(heads)

    @property
    def expected_heads(self) -> list[str]:
        """What a write passes as ``expect_heads``: the heads the agent's plan was made from
        (``base`` for none). The agent never supplies them."""
        return list(self._heads) or ["base"]

    def branch(self, name: str) -> BranchRecord:
        """What was recorded for branch ``name`` at the current grant (moved by this server's own
        pushes only); a UsageError when it was not recorded."""
        self.required()
        record = self._branches.get(name)
        if record is None:
            recorded = ", ".join(sorted(self._branches)) or "none"
            remedy = (
                "its SHA could not be read then (the grant's notes say why); fix that, then acquire_lease again"
                if name in self.identity.branches
                else "the server pushes only a branch it records at grant: start it with --branch NAME"
            )
            raise UsageError(
                f"branch {name!r} was not recorded when the lease was granted (recorded: {recorded}); {remedy}"
            )
        return record

    def pushed(self, record: BranchRecord) -> None:
        """Move the branch's record to the commit this server's own push just put there."""
        self._branches[record.branch] = record

    @property
    def branch_records(self) -> list[BranchRecord]:
        """The branches recorded at the current grant, by name."""
        return [self._branches[name] for name in sorted(self._branches)]

    def superseded_by(self, lease: LeaseStatus) -> bool:
        """Drop the grant when the lease service has issued a newer token since (true then): the
        grant can never write again, as LEASE_LOST."""
        held = self._grant
        if held is None or lease.token <= held.token:
            return False
        reason = f"the lease service has issued token {lease.token} since" + (
            f", to {lease.holder}" if lease.holder else ""
        )
        self.forget(LeaseLost(self.identity.resource, self.identity.holder, held.token, reason))
        return True


def ownership_rules(resource: str) -> str:
    """The rule for an agent that migrates ``resource`` through this MCP server."""
    return f"""\
Ownership rule for {resource} (fencemigrate MCP server)

The fencemigrate server owns the lease token for {resource} and the heads your plan was made
from. You never hold a token: the server does, and it writes only under its own explicit grant.

1. Before you plan, call read_state (or read the resource fencemigrate://state/{resource}) and plan
   from what it returns, never from memory or from a context summary.
2. To write, call acquire_lease first and read the state it returns: a new lease comes with a fresh
   look at the world. upgrade, downgrade, reapply, stamp, push_branch and write_file refuse to run
   without the server's live grant; no tool takes a lease and writes in one step.
3. A FENCED error means time passed without you noticing and someone else changed {resource}.
   The server has dropped its token. (1) Stop the current plan. (2) Discard any belief that you
   hold a lease or a lock. (3) Call read_state and re-read anything you were about to write that
   depends on it. (4) Make a new plan from that fresh state; if the goal is already met, report
   that and stop. To write again you must call acquire_lease. Never treat FENCED as a merge
   conflict or a flaky failure: do not retry, rebase, renumber or re-apply.
4. LEASE_LOST is the same news as FENCED: do what rule 3 says.
5. LEASE_BUSY is transient: another live holder has the lease; wait until the time it names, then
   call acquire_lease again. DIRTY needs a person, or you, to compare the schema with the revision
   first. USAGE means the call itself was wrong, and nothing changed.
6. Never write a token number, "I hold the lease" or "holds lock on ..." into your notes, plans or
   summaries. Whether a lease is held is what read_state says now, not what you remember.
"""
