"""What a fenced run did, for the CLI's text and JSON output."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .applied_downgrades import AppliedText
from .request import ScriptLease

if TYPE_CHECKING:
    from ..fence.adoption import Adoption

NOTHING_TO_DO = "nothing_to_do"
"""``RunOutcome.no_lease``: the heads read before the lease already had nothing left to do."""
DONE_BY_ANOTHER_RUNNER = "done_by_another_runner"
"""``RunOutcome.no_lease``: another runner finished the work while this one waited for the lease."""


WRITTEN_AS_SQL = "written as SQL"


@dataclass(frozen=True)
class StepOutcome:
    """One migration step that committed (or was written out, with --sql)."""

    revisions: tuple[str, ...]  # applied or stamped when "up", rolled back or unstamped when "down"
    direction: str  # "up" or "down" (a stamp's too: "down" when it only unstamps revisions)
    token: int | None  # None: written as SQL, under the token the script is granted when it runs
    atomic: bool  # False when the revision ran outside a single transaction
    applied_text: AppliedText | None = None  # a rollback that ran the applied text's downgrade(), not the file's

    def action(self, command: str, offline: bool) -> str:
        """What happened to the step's revisions in a run of ``command``: "applied", "re-applied",
        "rolled back", "stamped", "unstamped", or "written as SQL" (``offline``: nothing ran)."""
        if offline:
            return WRITTEN_AS_SQL
        if command == "stamp":
            return "stamped" if self.direction == "up" else "unstamped"
        if self.direction == "down":
            return "rolled back"
        return "re-applied" if command == "reapply" else "applied"

    def as_json(self, command: str, offline: bool) -> dict[str, Any]:
        """JSON form of this step in a run of ``command`` (``applied_text`` only on a rollback that ran it)."""
        found: dict[str, Any] = {
            "revisions": list(self.revisions),
            "direction": self.direction,
            "action": self.action(command, offline),
            "token": self.token,
            "atomic": self.atomic,
        }
        if self.applied_text is not None:
            found["applied_text"] = self.applied_text.as_json()
        return found


@dataclass
class RunOutcome:
    """Everything a fenced upgrade, downgrade, reapply or stamp did."""

    command: str
    resource: str
    holder: str
    token: int | None = None  # None: no lease taken because nothing was left to do (no_lease says why)
    offline: bool = False
    script_lease: ScriptLease | None = None  # the lease a script written without a token takes when it runs
    steps: list[StepOutcome] = field(default_factory=list)
    heads: list[str] | None = None
    installed_fence_schema: bool = False
    forced_single_transaction: bool = False
    leased: bool = False  # the token came from a lease this run took (and released) itself
    lease_renewals: int = 0  # how often the run renewed that lease while it worked
    lease_note: str | None = None  # why that lease could not be released, if it could not
    no_lease: str | None = None  # NOTHING_TO_DO or DONE_BY_ANOTHER_RUNNER: why a run without --token took none
    mode: str = "transactional"  # or "precheck": the fence was checked before each revision
    autocommitted: list[str] = field(default_factory=list)  # revisions whose autocommit block ran
    adopted: Adoption | None = None  # what the version table applied before this run fenced it
    script_heads: list[str] | None = None  # the heads a script that takes its own lease requires when it runs

    def as_json(self) -> dict[str, Any]:
        """JSON form of the run, printed by ``--json``."""
        return {
            "status": "ok",
            "command": self.command,
            "resource": self.resource,
            "token": self.token,
            "holder": self.holder,
            "offline": self.offline,
            "steps": [step.as_json(self.command, self.offline) for step in self.steps],
            "heads": self.heads,
            "installed_fence_schema": self.installed_fence_schema,
            "forced_single_transaction": self.forced_single_transaction,
            "leased": self.leased,
            "lease_renewals": self.lease_renewals,
            "lease_note": self.lease_note,
            "no_lease": self.no_lease,
            "mode": self.mode,
            "adopted": None if self.adopted is None else self.adopted.as_json(),
        }
