"""The server's own lease: the grant it holds for its holder, kept in this process and never handed
to the agent, and forgotten as soon as the lease is known to be lost."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..errors import FencemigrateError, LeaseLost, UsageError
from ..leases import Grant, LeaseStatus

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


class ServerLease:
    """The grant this server holds (or None), why it was dropped, and a lock that runs one tool call
    at a time."""

    def __init__(self, identity: ServerIdentity) -> None:
        self.identity = identity
        self.calls = threading.Lock()  # one tool call at a time: they share the grant and the config
        self._grant: Grant | None = None
        self._dropped_by: FencemigrateError | None = None  # the FENCED or LEASE_LOST that dropped the token

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

    def granted(self, grant: Grant) -> None:
        """Hold ``grant`` (a grant, or the current grant renewed)."""
        self._grant, self._dropped_by = grant, None

    def forget(self, dropped_by: FencemigrateError | None = None) -> None:
        """Drop the token: after FENCED or LEASE_LOST (``dropped_by``) or a release, no later call
        can write under it."""
        self._grant, self._dropped_by = None, dropped_by

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
