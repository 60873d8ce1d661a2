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
    #: fencemigrate's ledger: each revision's row state ('applied', or pre-check mode's dirty
    #: 'applying' / 'rolling_back'); None for the control.
    ledger: dict[str, str] | None
    chain: dict[str, str | None]
    connection_faults: int = 0


@dataclass(frozen=True)
class Grant:
    """A grant a lease call reported to its caller: ``token`` to ``holder`` on ``resource`` by ``source``
    (``lease service``, ``redis``, ``mcp``, ``control``), taken between ``started`` and ``ended`` (the
    harness's monotonic clock around the call) and live ``ttl_s`` from then."""

    holder: str
    token: int
    source: str
    started: float
    ended: float
    ttl_s: float
    resource: str = ""


@dataclass(frozen=True)
class SideWrite:
    """A write outside the database under a grant: ``push`` (``push_branch``, or the control's ``git
    push``) or ``file`` (``write_file``, or a plain write). ``landed``: the call succeeded; ``commit``:
    what a push put on the remote branch."""

    kind: str
    holder: str
    token: int | None
    started: float
    landed: bool
    commit: str | None = None


@dataclass
class ElementOutcome:
    """What one element (faults.elements) leaves for the checker.

    ``events``: the committed history (across a dump and restore: the old database's, then what
    the new one added); ``grants``: every grant a lease call reported; ``writes``: pushes and file
    writes; ``remote``: the commits reachable from the remote branch at the end (None without git);
    ``bystanders``: runs alone on their own resource, which nothing done to another may end.
    """

    system: str
    kind: str
    events: list[Event] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    grants: list[Grant] = field(default_factory=list)
    writes: list[SideWrite] = field(default_factory=list)
    remote: set[str] | None = None
    bystanders: list[Run] = field(default_factory=list)
