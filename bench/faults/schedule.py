"""Seeded random schedules: who runs what and when, and which faults hit them.

A schedule is the same for fencemigrate and for the control; only the commands differ. Every
schedule has a **stale agent** S that takes a short lease, applies the chain under its token and
then, once its lease has expired, sends a follow-up under that same token (a reapply, a renumbered
copy, or a downgrade), and one to three **competing runners** with leases of their own (short TTLs,
a bounded ``--wait``, sometimes ``--preempt``) that upgrade, or roll back and upgrade again. With
``tokenless`` a plain ``alembic downgrade -1`` joins them. Faults are placed by time (a random delay
from the start of the schedule, landing on whatever the target runs then: revisions sleep inside
their transactions so that pauses land inside the DDL) or at a named point, where the target stops
itself: inside a revision's DDL transaction (right after the claim, before the DDL, or after it),
inside an ``autocommit_block()``, inside a lease grant's transaction. A ``failover`` (PostgreSQL,
at most one per schedule, never with a restart) holds back the primary's WAL for ``duration_s``
before ``at_s``, then stops the primary immediately and promotes its streaming standby: what
committed in that window is lost, and the schedule goes on on the promoted server. Half the
schedules run the chain with ``transaction_per_migration=True`` (``per_migration``): each revision
claims and commits in a transaction of its own.

With ``elements`` the schedule also draws one **element** (:mod:`faults.elements`), from a random
stream of its own so that the rest of the schedule stays what it was without elements: MCP servers
as writers, a migration role attacking the fence by plain SQL, mixed token sources, colliding
resource names, a dump and restore. It runs after the runners (or beside them), on databases of its own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

FAULT_KINDS = ("stop", "stop_at", "kill", "term", "terminate_backend", "restart", "failover")
#: Faults of the database server, not of one runner.
SERVER_FAULTS = ("terminate_backend", "restart", "failover")
FOLLOW_UPS = ("reapply", "renumbered", "downgrade")
#: Where a runner can be made to stop itself (see faults.project and faults.launch).
POINTS = ("r02:ddl", "r02:downgrade", "r02:start", "r02:start-down", "lease")
AUTOCOMMIT_POINT = "r03:autocommit"
#: The elements (faults.elements) and their variants.
ELEMENTS: dict[str, tuple[str, ...]] = {
    "mcp-writers": ("stale-grant", "fresh-grant"),
    "sql-attack": ("forge-lease", "raise-fence", "forge-event", "pretend-claim", "rewrite-incarnation", "drop-guard"),
    "mixed-sources": ("builtin-beside-redis", "detach-beside-redis"),
    "colliding-names": ("preempt-other",),
    "dump-restore": ("runner-installed", "extension-installed"),
}


@dataclass(frozen=True)
class Element:
    """One element of a schedule: its ``kind`` (of ELEMENTS), variant, TTL, how long the stale writer
    is away past it, and whether a forged token is 2^62 rather than the next one."""

    kind: str
    variant: str
    ttl_s: float
    pause_s: float
    big_token: bool = False


@dataclass(frozen=True)
class Action:
    """One process: ``acquire`` (a lease only), ``write`` (a migration command) or ``tokenless``."""

    verb: str
    command: str = ""
    leased: bool = False
    preempt: bool = False


@dataclass(frozen=True)
class Step:
    """A runner: its actions, one process after the other, from ``start_s`` on.

    ``pause_before_last_s``: how long the runner is away (its lease expiring) after its
    next-to-last action ends and before its last one starts.
    """

    name: str
    start_s: float
    actions: tuple[Action, ...]
    pause_before_last_s: float = 0.0


@dataclass(frozen=True)
class Fault:
    """One fault: ``step``'s process at ``at_s`` (or at ``point``), for ``duration_s`` when it is a pause
    (for a failover: how long the WAL is held back before it)."""

    kind: str
    at_s: float
    step: str | None = None
    duration_s: float = 0.0
    point: str | None = None


@dataclass(frozen=True)
class Schedule:
    """Everything one schedule does."""

    index: int
    seed: int
    ttl_s: float
    wait_s: float
    sleeps: tuple[float, float, float]
    autocommit_block: bool
    follow_up: str
    steps: tuple[Step, ...]
    faults: tuple[Fault, ...]
    element: Element | None = None
    per_migration: bool = False


def generate(
    seed: int,
    index: int,
    *,
    preempt: bool,
    kill_connections: bool,
    restart: bool,
    autocommit_block: bool,
    tokenless: bool,
    failover: bool = False,
    elements: tuple[str, ...] = (),
) -> Schedule:
    """Schedule number ``index`` of the run seeded ``seed`` (the same arguments give the same schedule);
    with ``elements``, one of them drawn (:func:`draw_element`)."""
    rng = random.Random(f"{seed}:{index}")
    ttl = rng.choice((1.0, 1.5, 2.0))
    wait = rng.choice((1.0, 2.0, 3.0))
    sleeps = (0.0, rng.choice((0.2, 0.5, 1.0)), rng.choice((0.0, 0.3)))
    follow_up = rng.choice(FOLLOW_UPS)
    follow_command = {"reapply": "reapply r02", "renumbered": "upgrade head", "downgrade": "downgrade r01"}[follow_up]
    steps = [
        Step(
            "S",
            0.0,
            (Action("acquire"), Action("write", "upgrade head"), Action("write", follow_command)),
            pause_before_last_s=ttl + rng.uniform(0.5, 3.0),
        )
    ]
    for number in range(1, rng.randint(1, 3) + 1):
        commands = rng.choice((("upgrade head",), ("downgrade r01", "upgrade head")))
        use_preempt = preempt and rng.random() < 0.3
        steps.append(
            Step(
                f"R{number}",
                rng.uniform(0.5, ttl + 3.0),
                tuple(Action("write", command, leased=True, preempt=use_preempt) for command in commands),
            )
        )
    if tokenless:
        steps.append(Step("T", rng.uniform(ttl, ttl + 3.0), (Action("tokenless", "downgrade -1"),)))
    kinds = ["stop", "stop_at", "stop_at", "kill", "term"]
    if kill_connections:
        kinds.append("terminate_backend")
    if restart:
        kinds.append("restart")
    if failover:
        kinds.append("failover")
    points = list(POINTS) + ([AUTOCOMMIT_POINT] if autocommit_block else [])
    faults: list[Fault] = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(kinds)
        target = rng.choice(steps).name
        fault = Fault(
            kind,
            round(rng.uniform(0.0, ttl + 3.0), 2),
            None if kind in SERVER_FAULTS else target,
            round(rng.uniform(0.5, ttl + 1.5), 2) if kind.startswith("stop") or kind == "failover" else 0.0,
            rng.choice(points) if kind == "stop_at" else None,
        )
        if not clashes(fault, faults):
            faults.append(fault)
    element = draw_element(seed, index, elements)
    # From a stream of its own too: the schedules of a seed stay what they were before it was drawn.
    per_migration = random.Random(f"{seed}:{index}:env").random() < 0.5
    return Schedule(
        index, seed, ttl, wait, sleeps, autocommit_block, follow_up, tuple(steps), tuple(faults), element, per_migration
    )


def draw_element(seed: int, index: int, elements: tuple[str, ...]) -> Element | None:
    """One of ``elements`` (the ones the schedule's backend runs) with its variant and timing, or None
    without any; from a random stream of its own, so that the rest of the schedule does not change."""
    if not elements:
        return None
    rng = random.Random(f"{seed}:{index}:element")
    kind = rng.choice(sorted(elements))
    variant = rng.choice(ELEMENTS[kind])
    return Element(kind, variant, rng.choice((1.0, 1.5)), round(rng.uniform(0.3, 1.5), 2), rng.random() < 0.5)


def clashes(fault: Fault, faults: list[Fault]) -> bool:
    """A second failover (there is one standby), or a restart beside a failover (a restart's shutdown
    would wait for the held walsender)."""
    kinds = {other.kind for other in faults}
    if fault.kind == "failover":
        return bool(kinds & {"failover", "restart"})
    return fault.kind == "restart" and "failover" in kinds
