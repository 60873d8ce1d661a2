"""What a fenced run did, for the CLI's text and JSON output."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class StepOutcome:
    """One migration step that committed (or was written out, with --sql)."""

    revisions: tuple[str, ...]
    direction: str  # "up", "down" or "stamp"
    token: int
    atomic: bool  # False when the revision ran outside a single transaction

    def as_json(self) -> dict[str, Any]:
        """JSON form of this step."""
        return {
            "revisions": list(self.revisions),
            "direction": self.direction,
            "token": self.token,
            "atomic": self.atomic,
        }


@dataclass
class RunOutcome:
    """Everything a fenced upgrade, downgrade, reapply or stamp did."""

    command: str
    resource: str
    token: int
    holder: str
    offline: bool = False
    steps: list[StepOutcome] = field(default_factory=list)
    heads: list[str] | None = None
    installed_fence_schema: bool = False
    forced_single_transaction: bool = False

    def as_json(self) -> dict[str, Any]:
        """JSON form of the run, printed by ``--json``."""
        return {
            "status": "ok",
            "command": self.command,
            "resource": self.resource,
            "token": self.token,
            "holder": self.holder,
            "offline": self.offline,
            "steps": [step.as_json() for step in self.steps],
            "heads": self.heads,
            "installed_fence_schema": self.installed_fence_schema,
            "forced_single_transaction": self.forced_single_transaction,
        }
