"""What ``fencemigrate install`` did, for its text and ``--json`` output."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .runtime.adoption import Adoption


@dataclass
class InstallOutcome:
    """``installed``: the fence schema was installed now (else it was there already);
    ``restored``: one line per guard trigger put back; ``tokenless_writes``: "allowed" or
    "refused" when ``--allow-`` / ``--forbid-tokenless-writes`` changed it; ``granted``: what
    ``--grant-to`` granted; ``adopted``: what the version table applied before fencing, adopted now;
    ``sql``: the install script (``--sql``; nothing else is set)."""

    installed: bool = False
    restored: list[str] = field(default_factory=list)
    tokenless_writes: str | None = None
    granted: str | None = None
    adopted: Adoption | None = None
    sql: str | None = None

    def text(self) -> str:
        """The lines ``install`` prints (with ``--sql``: the script)."""
        if self.sql is not None:
            return self.sql
        head = "installed" if self.installed else "already installed"
        if self.tokenless_writes == "allowed":
            head += "; writes to the version table without a fencing token are allowed (opted out)"
        elif self.tokenless_writes == "refused":
            head += "; writes to the version table without a fencing token are refused"
        adopted = [] if self.adopted is None else self.adopted.lines()
        return "\n".join([head, *adopted, *self.restored, *([self.granted] if self.granted is not None else [])])

    def as_json(self) -> dict[str, Any]:
        """JSON form, in ``install --json`` (with ``--sql``, on stderr: the script owns stdout)."""
        if self.sql is not None:
            return {"status": "ok", "offline": True}
        return {
            "status": "ok",
            "offline": False,
            "installed": self.installed,
            "restored": self.restored,
            "tokenless_writes": self.tokenless_writes,
            "granted": self.granted,
            "adopted": None if self.adopted is None else self.adopted.as_json(),
        }
