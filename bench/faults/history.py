"""What a schedule leaves behind: committed history rows and the runs' outcomes (plain data)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Event:
    """One committed row of ``faults_history``, in commit order.

    ``kind`` is ``grant`` (a lease grant committed, with its token), ``apply`` or ``rollback``
    (a revision's DDL committed, under ``token``; None for a tokenless writer).
    """

    kind: str
    token: int | None
    holder: str
    revision: str | None = None
    change: str | None = None


@dataclass
class Run:
    """One process the harness started, and how it ended."""

    step: str
    argv: tuple[str, ...]
    holder: str
    token: int | None = None
    wait_s: float | None = None
    expect_fenced: bool = False
    exit_code: int | None = None
    elapsed_s: float = 0.0
    stopped_s: float = 0.0
    signals: list[str] = field(default_factory=list)
    hung: bool = False
    output: str = ""
    tokenless: bool = False
    #: The token a ``lease acquire`` (or the control's grant) reported to its holder.
    granted: int | None = None


@dataclass
class Outcome:
    """Everything the checker reads for one schedule and one system."""

    system: str
    events: list[Event]
    runs: list[Run]
    version_heads: list[str]
    ledger: list[str] | None
    chain: dict[str, str | None]
    connection_faults: int = 0
