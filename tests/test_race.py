"""Two ``fencemigrate upgrade`` processes racing with tokens 33 and 34 on one database.

The chain is 0001 (applied beforehand under token 10, so the fence schema and the
version table exist) -> 0002 -> 0003; both runs want 0002 and 0003. 0002 first takes a
transaction-level advisory lock (the *gate*) and may sleep, so the test can hold a run
inside its transaction right after its claim.

Invariants that hold in every interleaving: the database ends at head with every
revision applied exactly once by ONE run (no lost or half-applied migration); the
lower token is FENCED only when the higher one committed first; when the lower token
committed first, the higher one just proceeds (exit 0, nothing to do); the fence token
is the highest token that wrote. Forced orders (the test holds the gate and waits on
``pg_stat_activity`` until the second run is blocked on the fence row) fix the outcome.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from support.db import alembic_versions, connect, query, table_exists
from support.fence_rows import fence_token, ledger_tokens, stderr_lines
from support.project import Project, script_command, start_process
from support.zygote import Process

GATE_KEY = 4242
LOW, HIGH = 33, 34
TIMEOUT = 60.0

# A run of token T blocked on its claim: another transaction holds the fence row.
_BLOCKED_ON_CLAIM = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND wait_event_type = 'Lock' AND query LIKE '%claim(%'"
)
# A run inside 0002, after its claim, waiting for the test to open the gate.
_BLOCKED_ON_GATE = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND wait_event_type = 'Lock' AND wait_event = 'advisory' AND query LIKE '%pg_advisory_xact_lock%'"
)


@dataclass
class Run:
    """One racing ``fencemigrate upgrade head --json`` process and, once finished, its outcome."""

    token: int
    process: Process
    code: int | None = None
    stdout: str = ""
    stderr: str = ""

    def wait(self) -> Run:
        """Wait for the process (killing it after TIMEOUT) and capture its output."""
        try:
            self.stdout, self.stderr = self.process.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.stdout, self.stderr = self.process.communicate()
            pytest.fail(f"token {self.token} hung\n{self}")
        self.code = self.process.returncode
        return self

    @property
    def payload(self) -> dict[str, Any]:
        """The one JSON object the run printed."""
        assert len(self.stdout.strip().splitlines()) == 1, str(self)
        return dict(json.loads(self.stdout))

    @property
    def applied(self) -> list[str]:
        """Revisions this run applied (empty unless it exited 0 with steps)."""
        if self.code != 0:
            return []
        return [rev for step in self.payload["steps"] for rev in step["revisions"]]

    def __str__(self) -> str:
        return (
            f"[token {self.token}: exit {self.code}]\n--- stdout ---\n{self.stdout}"
            f"--- stderr ---\n{chr(10).join(stderr_lines(self.stderr))}\n"
        )


_started: list[Run] = []


@pytest.fixture(autouse=True)
def _kill_leftover_runs() -> Iterator[None]:
    """A test that fails while a run is still blocked must not leave the process behind."""
    yield
    while _started:
        run = _started.pop()
        if run.process.poll() is None:
            run.process.kill()
            run.process.communicate()


def start(project: Project, token: int) -> Run:
    """Start ``fencemigrate upgrade head --token T --json`` in the background."""
    argv = script_command("fencemigrate") + [
        "upgrade",
        "head",
        "--token",
        str(token),
        "--holder",
        f"racer-{token}",
        "--json",
    ]
    process = start_process(argv, project.path)
    run = Run(token, process)
    _started.append(run)
    return run


def wait_until(url: str, sql: str, *runs: Run, timeout: float = 30.0) -> None:
    """Poll ``sql`` (a count) until it is positive; fail early if a run exits meanwhile."""
    deadline = time.monotonic() + timeout
    while query(url, sql)[0][0] == 0:
        for run in runs:
            if run.process.poll() is not None:
                pytest.fail(f"token {run.token} finished before the expected wait\n{run.wait()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for: {sql}")
        time.sleep(0.05)


@contextmanager
def gate_closed(url: str) -> Iterator[Any]:
    """Hold the gate (session advisory lock) so 0002 blocks right after the claim; yields the connection."""
    with connect(url) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (GATE_KEY,))
        try:
            yield conn
        finally:
            conn.execute("SELECT pg_advisory_unlock_all()")


def race_project(project: Project, sleep: float) -> None:
    """0001 applied under token 10; 0002 (gate, sleep, DDL) and 0003 still to apply."""
    project.add_revision("0001", None, "CREATE TABLE race_base (id int)", "DROP TABLE race_base", slug="base")
    project.run_cli("upgrade", "head", "--token", "10", "--holder", "setup").check(0)
    project.add_revision(
        "0002",
        "0001",
        [f"SELECT pg_advisory_xact_lock({GATE_KEY})", f"SELECT pg_sleep({sleep})", "CREATE TABLE race_a (id int)"],
        "DROP TABLE race_a",
        slug="slow",
    )
    project.add_revision("0003", "0002", "CREATE TABLE race_b (id int)", "DROP TABLE race_b", slug="fast")


def check_invariants(url: str, low: Run, high: Run) -> int:
    """Assert what holds in every interleaving; return the token that applied 0002 and 0003."""
    report = f"{low}{high}"
    # Never a lost or half-applied migration: head reached, each revision applied once, by one run.
    assert alembic_versions(url) == ["0003"], report
    for table in ("race_base", "race_a", "race_b"):
        assert table_exists(url, table), report
    tokens = ledger_tokens(url)
    assert set(tokens) == {"0001", "0002", "0003"} and tokens["0001"] == 10, report
    writer = tokens["0002"]
    assert tokens["0003"] == writer and writer in (LOW, HIGH), report
    by_token = {LOW: low, HIGH: high}
    assert by_token[writer].code == 0 and by_token[writer].applied == ["0002", "0003"], report
    other = by_token[HIGH if writer == LOW else LOW]
    assert other.applied == [], report

    # Outcomes: 0 or FENCED only, and FENCED only for the lower token after the higher one wrote.
    assert {low.code, high.code} <= {0, 3}, report
    assert high.code == 0, report  # nobody may fence the highest token; if LOW won, HIGH just proceeds
    if low.code == 3:
        assert writer == HIGH, report
        fenced = low.payload
        assert fenced["status"] == "fenced" and fenced["token"] == LOW and fenced["fence_token"] == HIGH, report
    if writer == LOW:
        assert high.payload["steps"] == [], report  # nothing left to do

    # The fence is the highest token that wrote (a run with nothing to do may have claimed too).
    fence = fence_token(url)
    successful = [run.token for run in (low, high) if run.code == 0]
    assert fence is not None and writer <= fence <= max(successful), report
    assert fence in successful, report
    assert all(token <= fence for token in tokens.values()), report
    return writer


def test_high_token_claims_first_then_low_token_is_fenced(project: Project, pg_url: str) -> None:
    """34 claims and holds the fence row; 33 blocks on it, and once 34 commits, 33 is FENCED (exit 3)."""
    race_project(project, sleep=0)
    with gate_closed(pg_url):
        high = start(project, HIGH)
        wait_until(pg_url, _BLOCKED_ON_GATE, high)  # 34 has claimed and is inside 0002
        low = start(project, LOW)
        wait_until(pg_url, _BLOCKED_ON_CLAIM, low, high)  # 33 waits on the fence row held by 34
    high.wait()
    low.wait()
    assert check_invariants(pg_url, low, high) == HIGH
    assert low.code == 3 and high.code == 0, f"{low}{high}"
    assert low.payload["reason"] == f"token {HIGH} has since written to db/migrations"


def test_low_token_claims_first_then_high_token_proceeds(project: Project, pg_url: str) -> None:
    """33 claims first and commits 0002..0003; 34, blocked on the fence row meanwhile, then just proceeds (exit 0)."""
    race_project(project, sleep=0)
    with gate_closed(pg_url):
        low = start(project, LOW)
        wait_until(pg_url, _BLOCKED_ON_GATE, low)  # 33 has claimed and is inside 0002
        high = start(project, HIGH)
        wait_until(pg_url, _BLOCKED_ON_CLAIM, low, high)  # 34 waits on the fence row held by 33
    low.wait()
    high.wait()
    assert low.code == 0, f"{low}{high}"
    assert check_invariants(pg_url, low, high) == LOW


@pytest.mark.parametrize("order", ["high-first", "low-first", "together"])
def test_unforced_race_keeps_the_invariants(project: Project, pg_url: str, order: str) -> None:
    """Without forcing an order (0002 sleeps 1 s to make the runs overlap), the invariants hold."""
    race_project(project, sleep=1)
    first, second = (HIGH, LOW) if order == "high-first" else (LOW, HIGH)
    runs = {first: start(project, first)}
    if order != "together":
        time.sleep(0.3)
    runs[second] = start(project, second)
    for run in runs.values():
        run.wait()
    check_invariants(pg_url, runs[LOW], runs[HIGH])
