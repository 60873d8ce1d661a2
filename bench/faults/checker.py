"""The properties every schedule must keep, as pure functions over an :class:`~faults.history.Outcome`.

* ``stale-commit``: no commit under a token (or under none) after a higher token was granted (or wrote),
  nor under a token whose grant went to another holder;
* ``token-reissued``: no token reported granted to one holder is granted to another (a grant lost in
  a failover, issued again by the promoted server);
* ``applied-twice``: each revision is applied once and never rolled back when it is not applied
  (a renumbered copy is a new revision: under a superseded token it is a ``stale-commit``; under
  the newest token the fence lets it through by design, and ``fencemigrate check`` flags it);
* ``version-vs-ledger``: Alembic's version table names exactly the revisions the ledger holds
  (fencemigrate's ledger; for the control, the history its revisions wrote);
* ``wait-bound``: no run waits past its ``--wait`` (nor hangs);
* ``exit-status``: every exit status is documented, and a write with a superseded token is refused.

The elements (faults.elements) add, over an :class:`~faults.history.ElementOutcome`:

* ``forged-grant``: every grant in the committed history was made by a lease call (none written by SQL);
* ``unissued-token``: every committed write is under a token some lease call issued (any source);
* ``two-live-holders``: no grant to one holder while another holder's grant, from any source, is live;
* ``stale-push``: no push lands under a superseded grant, and every commit a live holder pushed
  stays reachable from the remote branch;
* ``stale-file-write``: no file write lands under a superseded grant;
* ``foreign-preempt``: a run alone on its resource is not ended by what is done to another one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from faults.history import ElementOutcome, Event, Grant, Outcome, Run, SideWrite

PROPERTIES = (
    "stale-commit",
    "token-reissued",
    "applied-twice",
    "version-vs-ledger",
    "wait-bound",
    "exit-status",
    "forged-grant",
    "unissued-token",
    "two-live-holders",
    "stale-push",
    "stale-file-write",
    "foreign-preempt",
)

#: fencemigrate's documented exit statuses (docs/exit-statuses.md); 2 (bad usage) only as
#: :func:`state_refusal` and :func:`source_refusal` allow it.
DOCUMENTED_EXITS = frozenset({0, 1, 3, 4, 5})
#: The statuses a signal the harness sent may end a run with: killed by it, or, for SIGTERM,
#: fencemigrate's own documented 143 once its handler is installed (rolled back, lease released).
SIGNAL_EXITS = {"KILL": frozenset({-9}), "TERM": frozenset({-15, 143})}


@dataclass(frozen=True)
class Violation:
    """One broken property, with what shows it."""

    prop: str
    detail: str


def stale_commits(events: Iterable[Event]) -> list[Violation]:
    """Writes committed under a token lower than one granted (or written) before that commit, or under
    a token whose last grant before it went to another holder (two holders of one token)."""
    highest = 0
    holders: dict[int, str] = {}
    found = []
    for event in events:
        if event.token is None:
            if event.kind != "grant" and highest:
                found.append(
                    Violation(
                        "stale-commit",
                        f"{event.kind} {event.revision} by {event.holder} under no token after token {highest}",
                    )
                )
            continue
        if event.kind == "grant":
            holders[event.token] = event.holder
        elif event.token < highest:
            found.append(
                Violation(
                    "stale-commit",
                    f"{event.kind} {event.revision} by {event.holder} under token {event.token} after token {highest}",
                )
            )
        elif holders.get(event.token, event.holder) != event.holder:
            found.append(
                Violation(
                    "stale-commit",
                    f"{event.kind} {event.revision} by {event.holder} under "
                    f"token {event.token}, granted to {holders[event.token]}",
                )
            )
        highest = max(highest, event.token)
    return found


def reissued_tokens(events: Iterable[Event], runs: Iterable[Run]) -> list[Violation]:
    """Tokens reported granted to one holder that the committed history grants to another: the first
    grant was lost (with a primary that failed over) and the number issued again."""
    grantees: dict[int, set[str]] = {}
    for event in events:
        if event.kind == "grant" and event.token is not None:
            grantees.setdefault(event.token, set()).add(event.holder)
    found = []
    for run in runs:
        others = grantees.get(run.granted, set()) - {run.holder} if run.granted is not None else set()
        if others:
            found.append(
                Violation(
                    "token-reissued",
                    f"token {run.granted} was granted to {run.holder} and again to {', '.join(sorted(others))}",
                )
            )
    return found


def double_applies(events: Iterable[Event]) -> list[Violation]:
    """A revision applied while already applied, or rolled back while not applied."""
    applied: set[str] = set()
    found = []
    for event in events:
        revision = event.revision or ""
        if event.kind == "apply":
            if revision in applied:
                found.append(
                    Violation("applied-twice", f"{revision} applied again by {event.holder} (token {event.token})")
                )
            applied.add(revision)
        elif event.kind == "rollback":
            if revision not in applied:
                found.append(
                    Violation(
                        "applied-twice",
                        f"{revision} rolled back while not applied, by {event.holder} (token {event.token})",
                    )
                )
            applied.discard(revision)
    return found


def implied_revisions(heads: Iterable[str], chain: Mapping[str, str | None]) -> set[str]:
    """Every revision at or below ``heads`` in ``chain`` (revision -> down revision)."""
    found: set[str] = set()
    for head in heads:
        current: str | None = head
        while current is not None and current not in found:
            found.add(current)
            current = chain.get(current)
    return found


def history_revisions(events: Iterable[Event]) -> set[str]:
    """The revisions the committed history leaves applied."""
    applied: set[str] = set()
    for event in events:
        if event.kind == "apply" and event.revision:
            applied.add(event.revision)
        elif event.kind == "rollback" and event.revision:
            applied.discard(event.revision)
    return applied


def ledger_mismatch(outcome: Outcome) -> list[Violation]:
    """The version table against the ledger (or, without one, against the recorded history).

    A dirty revision of pre-check mode (docs/mysql.md) is where its run stopped: one whose
    downgrade began (``rolling_back``) is still in the version table, one whose upgrade began
    (``applying``) not yet; the runs after it are refused with DIRTY.
    """
    versioned = implied_revisions(outcome.version_heads, outcome.chain)
    if outcome.ledger is None:
        ledger = history_revisions(outcome.events)
    else:
        ledger = {revision for revision, state in outcome.ledger.items() if state != "applying"}
    if versioned == ledger:
        return []
    return [Violation("version-vs-ledger", f"version table implies {sorted(versioned)}, ledger has {sorted(ledger)}")]


def wait_overruns(runs: Iterable[Run], work_bound_s: float) -> list[Violation]:
    """Runs that hung, or were active longer than their ``--wait`` plus ``work_bound_s``."""
    found = []
    for run in runs:
        if run.hung:
            found.append(Violation("wait-bound", f"{run.step} ({run.holder}) hung: {' '.join(run.argv[-6:])}"))
        elif run.wait_s is not None and run.elapsed_s - run.stopped_s > run.wait_s + work_bound_s:
            found.append(
                Violation(
                    "wait-bound",
                    f"{run.step} ({run.holder}) ran {run.elapsed_s - run.stopped_s:.1f} s with --wait {run.wait_s:g}s",
                )
            )
    return found


def did_nothing(output: str) -> bool:
    """The run found nothing to do (fencemigrate says so; plain Alembic ran no migration)."""
    if "nothing to do" in output:
        return True
    return not any(marker in output for marker in ("Running upgrade", "Running downgrade", "applied ", "rolled back "))


def state_refusal(output: str) -> bool:
    """A one-line ``usage:`` refusal of a command the database's state makes invalid (exit 2, nothing run).

    Runners compete, so ``downgrade r01`` can find the database at base and ``reapply r02`` find
    r02 rolled back; fencemigrate refuses those as bad usage, before touching anything.
    """
    return "Traceback" not in output and any(
        line.startswith("fencemigrate: usage:") and ("not a valid downgrade target" in line or "is not applied" in line)
        for line in output.splitlines()
    )


def source_refusal(output: str) -> bool:
    """A one-line ``usage:`` refusal (text or ``--json``) of a lease call made to a service other than the one
    the resource's tokens come from (exit 2, nothing changed): the mixed-sources element's second writer."""
    return "Traceback" not in output and any(
        (line.startswith("fencemigrate: usage:") or '"status": "usage"' in line)
        and "takes its tokens from Redis" in line
        for line in output.splitlines()
    )


def undocumented_exits(runs: Iterable[Run], system: str, connection_faults: int) -> list[Violation]:
    """Exit statuses docs/exit-statuses.md does not list, and stale writes that were not refused.

    A stale write must be FENCED (3); DIRTY (5) also refuses it, before the claim, when pre-check
    mode left a revision unfinished (a runner killed inside its DDL on MariaDB).

    For the control only the second half applies: plain Alembic documents no fencing statuses.
    """
    found = []
    for run in runs:
        if run.hung or run.exit_code is None:
            continue
        signalled = {code for name in run.signals for code in SIGNAL_EXITS.get(name, ())}
        if run.exit_code in signalled:
            continue
        if run.expect_fenced and run.exit_code == 0 and not did_nothing(run.output):
            found.append(
                Violation(
                    "exit-status", f"{run.step} ({run.holder}) wrote under superseded token {run.token} and exited 0"
                )
            )
            continue
        if system != "fencemigrate" or run.tokenless:
            continue
        if run.exit_code == 2 and state_refusal(run.output):
            continue  # a stale one is counted by stale_usage_refusals
        if run.exit_code == 2 and source_refusal(run.output):
            continue
        if run.exit_code not in DOCUMENTED_EXITS or "Traceback (most recent call last)" in run.output:
            found.append(
                Violation(
                    "exit-status",
                    f"{run.step} ({run.holder}) exited {run.exit_code}: {run.output.strip().splitlines()[-1:] or ''}",
                )
            )
        elif run.expect_fenced and run.exit_code not in (0, 3, 5) and not (run.exit_code == 1 and connection_faults):
            found.append(
                Violation(
                    "exit-status",
                    f"{run.step} ({run.holder}) wrote under superseded token "
                    f"{run.token} and exited {run.exit_code}, not 3 (FENCED)",
                )
            )
    return found


def stale_usage_refusals(runs: Iterable[Run]) -> list[str]:
    """Writes under a superseded token refused as bad usage (exit 2) rather than FENCED (exit 3).

    Not a safety violation (nothing was written, the run exited non-zero), but the agent is told
    its command was wrong instead of that its lease is stale: reported separately.
    """
    return [
        f"{run.step} ({run.holder}) under superseded token {run.token}: {' '.join(run.argv[3:5])} refused "
        f"as usage (exit 2), not FENCED"
        for run in runs
        if run.expect_fenced and run.exit_code == 2 and state_refusal(run.output)
    ]


def check(outcome: Outcome, work_bound_s: float) -> list[Violation]:
    """Every violation of every property in ``outcome``."""
    return (
        stale_commits(outcome.events)
        + reissued_tokens(outcome.events, outcome.runs)
        + double_applies(outcome.events)
        + ledger_mismatch(outcome)
        + wait_overruns(outcome.runs, work_bound_s)
        + undocumented_exits(outcome.runs, outcome.system, outcome.connection_faults)
    )


# -- the elements' properties (faults.elements) ----------------------------------------------------


def forged_grants(events: Iterable[Event], grants: Iterable[Grant]) -> list[Violation]:
    """Grants in the committed history that no lease call reported (a GRANT event written by SQL)."""
    reported = {(grant.token, grant.holder) for grant in grants}
    return [
        Violation("forged-grant", f"token {event.token} granted to {event.holder}, which no lease call made")
        for event in events
        if event.kind == "grant" and event.token is not None and (event.token, event.holder) not in reported
    ]


def unissued_tokens(events: Iterable[Event], grants: Iterable[Grant]) -> list[Violation]:
    """Writes committed under a token that no lease call, of any source, issued."""
    issued = {grant.token for grant in grants}
    return [
        Violation(
            "unissued-token",
            f"{event.kind} {event.revision} by {event.holder} under token {event.token}, which no lease call issued",
        )
        for event in events
        if event.kind != "grant" and event.token is not None and event.token not in issued
    ]


def reissued_grants(events: Iterable[Event], grants: list[Grant]) -> list[Violation]:
    """A token reported granted to one holder that was reported to, or committed for, another one."""
    holders: dict[int, set[str]] = {}
    for event in events:
        if event.kind == "grant" and event.token is not None:
            holders.setdefault(event.token, set()).add(event.holder)
    for grant in grants:
        holders.setdefault(grant.token, set()).add(grant.holder)
    found, reported = [], set()
    for grant in grants:
        others = sorted(holders[grant.token] - {grant.holder})
        if others and grant.token not in reported:
            reported.add(grant.token)
            found.append(
                Violation(
                    "token-reissued", f"token {grant.token} was granted to {grant.holder} and to {', '.join(others)}"
                )
            )
    return found


def overlapping_grants(grants: list[Grant]) -> list[Violation]:
    """A grant to one holder that certainly came while another holder's grant on the resource was live:
    the later call ended before the earlier one's TTL had run from the earlier call's start."""
    found = []
    for earlier in grants:
        for later in grants:
            if (
                later.started >= earlier.ended
                and later.resource == earlier.resource
                and later.holder != earlier.holder
                and later.ended < earlier.started + earlier.ttl_s
            ):
                found.append(
                    Violation(
                        "two-live-holders",
                        f"token {later.token} ({later.source}) granted to {later.holder} while "
                        f"{earlier.holder}'s token {earlier.token} ({earlier.source}) was live",
                    )
                )
    return found


def newest_grant(grants: Iterable[Grant], before: float) -> int | None:
    """The highest token reported by a lease call that ended before ``before``."""
    return max((grant.token for grant in grants if grant.ended <= before), default=None)


def stale_side_writes(writes: Iterable[SideWrite], grants: list[Grant], remote: set[str] | None) -> list[Violation]:
    """Pushes and file writes that landed under a superseded grant (or none), and commits a live holder
    pushed that the remote branch no longer reaches."""
    found = []
    for write in writes:
        prop = "stale-push" if write.kind == "push" else "stale-file-write"
        what = "push" if write.kind == "push" else "file write"
        newest = newest_grant(grants, write.started)
        if not write.landed:
            continue
        if write.token is None:
            found.append(Violation(prop, f"{what} by {write.holder} under no grant landed"))
        elif newest is not None and write.token < newest:
            found.append(
                Violation(prop, f"{what} by {write.holder} under token {write.token} landed after token {newest}")
            )
        elif write.kind == "push" and remote is not None and write.commit and write.commit not in remote:
            found.append(
                Violation(
                    prop,
                    f"commit {write.commit[:10]} pushed by {write.holder} under live token {write.token} "
                    "is gone from the remote branch",
                )
            )
    return found


def foreign_preemptions(bystanders: Iterable[Run]) -> list[Violation]:
    """Runs alone on their resource that did not succeed: something done to another resource ended them."""
    return [
        Violation(
            "foreign-preempt",
            f"{run.step} ({run.holder}) alone on its resource exited {run.exit_code}: "
            f"{run.output.strip().splitlines()[-1:] or ''}",
        )
        for run in bystanders
        if run.exit_code != 0
    ]


def check_element(outcome: ElementOutcome) -> list[Violation]:
    """Every violation in one element's outcome. The history's tokens are one resource's, except with
    colliding resource names (two resources): there only the bystander and the exit statuses count."""
    found = foreign_preemptions(outcome.bystanders) + undocumented_exits(outcome.runs, outcome.system, 0)
    if outcome.kind == "colliding-names":
        return found
    return (
        stale_commits(outcome.events)
        + reissued_grants(outcome.events, outcome.grants)
        + forged_grants(outcome.events, outcome.grants)
        + unissued_tokens(outcome.events, outcome.grants)
        + overlapping_grants(outcome.grants)
        + stale_side_writes(outcome.writes, outcome.grants, outcome.remote)
        + found
    )
