"""``--expect-heads``: a writer's plan is refused (FENCED) unless the database still has the heads it
was made from, checked in the transaction that claims the fence.

Agent A applies r1 and r2 under token 5, reads the heads (r2) and plans ``downgrade r1``: undo its
own r2. Meanwhile agent B (token 6) applies r3 on top. A comes back with a fresh token 7 (its
lease is current: the fence alone lets it write) and runs its stale plan with ``--expect-heads
r2``: FENCED (exit 3, "heads are r3, you planned from r2"), the version rows, the fence token and
B's table as they were, a FENCED event logged. The control, the same command without
``--expect-heads``, goes through and rolls B's r3 back with A's r2.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from support import background_runs
from support.db import query
from support.project import MakeProject, Project, Result

import fencemigrate
from fencemigrate import Fenced, UsageError

R1, R2, R3 = "1111aaaa", "2222bbbb", "2222cccc"  # r2 and r3 share the prefix 2222
RESOURCE = "db/migrations"
STALE_REASON = f"heads are {R3}, you planned from {R2}"


@dataclass(frozen=True)
class Database:
    """What a test checks, read with SQLAlchemy on a connection of its own (nothing of fencemigrate's)."""

    url: str
    backend: str

    def _table(self, name: str) -> str:
        return f"fencemigrate.{name}" if self.backend == "postgresql" else f"fencemigrate_{name}"

    def _rows(self, sql: str, **params: Any) -> list[Any]:
        engine = sa.create_engine(self.url, poolclass=sa.NullPool)
        try:
            with engine.connect() as connection:
                return list(connection.execute(sa.text(sql), params))
        finally:
            engine.dispose()

    def tables(self) -> list[str]:
        """The project's own tables (those the revisions create)."""
        engine = sa.create_engine(self.url, poolclass=sa.NullPool)
        try:
            return sorted(name for name in sa.inspect(engine).get_table_names() if name.startswith("t_"))
        finally:
            engine.dispose()

    def versions(self) -> list[str]:
        return sorted(row[0] for row in self._rows("SELECT version_num FROM alembic_version"))

    def fence_token(self) -> int:
        return int(self._rows(f"SELECT token FROM {self._table('agent_fence')} WHERE resource = :r", r=RESOURCE)[0][0])

    def ledger(self) -> list[str]:
        """Every ledger row, every column (the state of pre-check mode's marks too)."""
        return sorted(repr(tuple(row)) for row in self._rows(f"SELECT * FROM {self._table('applied_revision')}"))

    def fenced_events(self) -> list[tuple[int, str]]:
        rows = self._rows(f"SELECT token, detail FROM {self._table('fence_event')} WHERE kind = 'FENCED' ORDER BY id")
        return [(int(row[0]), json.loads(row[1])["reason"]) for row in rows]

    def snapshot(self) -> tuple[list[str], int, list[str], list[str]]:
        return self.versions(), self.fence_token(), self.ledger(), self.tables()


@pytest.fixture
def target(backend: str, backend_url: str, make_project: MakeProject) -> Iterator[tuple[Project, Database]]:
    """A project with r1 <- r2 <- r3, each creating its table, on a fresh database of ``backend``."""
    project = make_project(url=backend_url)
    for revision, down in ((R1, None), (R2, R1), (R3, R2)):
        project.add_revision(revision, down, f"CREATE TABLE t_{revision} (id int)", f"DROP TABLE t_{revision}")
    yield project, Database(backend_url, backend)


def run(project: Project, *args: str, token: int) -> Result:
    return project.run_cli(*args, "--token", str(token), "--holder", f"agent-{token}", "--json")


def b_moved_on(project: Project) -> None:
    """A (5) applies r1 and r2 and plans from heads r2; B (6) then applies r3."""
    run(project, "upgrade", R2, token=5).check(0)
    run(project, "upgrade", R3, token=6).check(0)


def assert_fenced(result: Result, token: int, fence_token: int, reason: str) -> None:
    assert result.code == 3, str(result)
    payload = json.loads(result.stdout)
    assert payload == {
        "status": "fenced",
        "resource": RESOURCE,
        "token": token,
        "fence_token": fence_token,
        "reason": reason,
        "autocommitted": [],
        "message": payload["message"],
    }
    assert payload["message"].splitlines()[:2] == [
        f"FENCED: this write to {RESOURCE} is not yours to make.",
        f"Rejected for token {token}: {reason}.",
    ]
    assert "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply." in payload["message"]


def test_a_plan_from_old_heads_is_fenced_and_without_the_option_it_goes_through(
    target: tuple[Project, Database],
) -> None:
    project, db = target
    b_moved_on(project)
    before = db.snapshot()
    assert before[0] == [R3] and before[1] == 6 and before[3] == [f"t_{R1}", f"t_{R2}", f"t_{R3}"]

    stale = run(project, "downgrade", R1, "--expect-heads", R2, token=7)
    assert_fenced(stale, 7, 6, STALE_REASON)
    assert db.snapshot() == before  # version rows, fence token, ledger, B's table: as they were
    assert db.fenced_events() == [(7, STALE_REASON)]

    # Control: the same stale plan without --expect-heads rolls B's r3 back with A's r2.
    run(project, "downgrade", R1, token=7).check(0)
    assert (db.versions(), db.tables()) == ([R1], [f"t_{R1}"])


def test_matching_heads_pass_given_in_full_by_prefix_or_as_base(target: tuple[Project, Database]) -> None:
    project, db = target
    applied = run(project, "upgrade", R1, "--expect-heads", "base", token=5)
    assert applied.code == 0, str(applied)
    assert json.loads(applied.stdout)["heads"] == [R1]
    run(project, "upgrade", R2, "--expect-heads", "1111", token=5).check(0)  # a unique prefix of r1
    run(project, "upgrade", R3, "--expect-heads", R2, token=5).check(0)
    assert (db.versions(), db.tables()) == ([R3], [f"t_{R1}", f"t_{R2}", f"t_{R3}"])

    # base once a revision is applied: refused, nothing written.
    before = db.snapshot()
    stale = run(project, "downgrade", R2, "--expect-heads", "base", token=5)
    assert_fenced(stale, 5, 5, f"heads are {R3}, you planned from base")
    assert db.snapshot() == before


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("9999", "--expect-heads: no revision '9999' in the revision files (nor one that starts with it)"),
        ("2222", f"--expect-heads: '2222' is ambiguous, several revisions start with it ({R2}, {R3})"),
        (f"{R2},", "--expect-heads takes revision ids separated by commas, or base; an empty one was given"),
        (f"base,{R2}", "--expect-heads base means no revision applied: it cannot be given with revisions"),
    ],
    ids=["unknown", "ambiguous", "empty", "base-and-more"],
)
def test_an_unknown_or_ambiguous_revision_is_bad_usage_and_changes_nothing(
    target: tuple[Project, Database], given: str, message: str
) -> None:
    project, db = target
    b_moved_on(project)
    before = db.snapshot()
    result = run(project, "downgrade", R1, "--expect-heads", given, token=7)
    assert result.code == 2, str(result)
    assert json.loads(result.stdout) == {"status": "usage", "message": message}
    assert db.snapshot() == before
    assert db.fenced_events() == []


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_sql_is_bad_usage_that_says_why(target: tuple[Project, Database]) -> None:
    project, db = target
    result = run(project, "upgrade", R1, "--sql", "--expect-heads", "base", token=5)
    assert result.code == 2, str(result)
    assert json.loads(result.stdout) == {
        "status": "usage",
        "message": "--expect-heads cannot be used with --sql: an offline script never reads the database's "
        "heads, so nothing could check them when its claim is taken",
    }
    assert db.tables() == []


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"], indirect=True)
def test_transaction_per_migration_checks_once_in_the_first_claiming_transaction(
    target: tuple[Project, Database],
) -> None:
    """Each revision commits on its own, so the second one's transaction sees r2 applied: the
    check is made in the first only (the run passes), and a refusal leaves nothing of the run."""
    project, db = target
    project.set_env_option("transaction_per_migration", True)
    run(project, "upgrade", R1, token=5).check(0)
    before = db.snapshot()
    stale = run(project, "upgrade", R3, "--expect-heads", "base", token=5)
    assert_fenced(stale, 5, 5, f"heads are {R1}, you planned from base")
    assert db.snapshot() == before

    passed = run(project, "upgrade", R3, "--expect-heads", R1, token=5)
    assert passed.code == 0, str(passed)
    assert [step["revisions"] for step in json.loads(passed.stdout)["steps"]] == [[R2], [R3]]
    assert db.versions() == [R3]


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_precheck_mode_checks_in_the_transaction_that_claims(target: tuple[Project, Database]) -> None:
    """MariaDB runs in pre-check mode: the refusal comes in the claim's own transaction, before any
    revision is marked (no 'rolling_back' row, nothing dirty)."""
    project, db = target
    b_moved_on(project)
    before = db.snapshot()
    stale = run(project, "downgrade", R1, "--expect-heads", R2, token=7)
    assert_fenced(stale, 7, 6, STALE_REASON)
    assert db.snapshot() == before  # the ledger too: no revision marked 'rolling_back'
    assert json.loads(project.run_cli("state", "--json").stdout)["dirty"] == []
    assert db.fenced_events() == [(7, STALE_REASON)]
    control = run(project, "downgrade", R1, token=7)
    assert json.loads(control.stdout)["mode"] == "precheck"
    assert (db.versions(), db.tables()) == ([R1], [f"t_{R1}"])


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_precheck_mode_on_postgresql_checks_too(target: tuple[Project, Database]) -> None:
    project, db = target
    b_moved_on(project)
    before = db.snapshot()
    stale = run(project, "downgrade", R1, "--mode", "precheck", "--expect-heads", R2, token=7)
    assert_fenced(stale, 7, 6, STALE_REASON)
    assert db.snapshot() == before


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_stamp_and_reapply_are_checked_too(target: tuple[Project, Database]) -> None:
    project, db = target
    b_moved_on(project)
    before = db.snapshot()
    stamp = run(project, "stamp", R1, "--expect-heads", R2, token=7)
    assert_fenced(stamp, 7, 6, STALE_REASON)
    reapply = run(project, "reapply", R3, "--expect-heads", R2, token=6)
    assert_fenced(reapply, 6, 6, STALE_REASON)
    assert db.snapshot() == before
    # Controls: the heads as they are let both through.
    run(project, "reapply", R3, "--expect-heads", R3, token=6).check(0)
    run(project, "stamp", R1, "--expect-heads", R3, token=7).check(0)
    assert db.versions() == [R1]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_the_api_takes_expect_heads_as_the_cli_does(
    target: tuple[Project, Database], monkeypatch: pytest.MonkeyPatch
) -> None:
    project, db = target
    b_moved_on(project)
    monkeypatch.chdir(project.path)
    config = fencemigrate.load_config([str(project.ini)])
    with pytest.raises(Fenced) as refused:
        fencemigrate.downgrade(config, R1, token=7, holder="agent-A", expect_heads=[R2])
    assert (refused.value.reason, refused.value.token) == (STALE_REASON, 7)
    with pytest.raises(TypeError, match="expect_heads takes a sequence of revision ids, not the string"):
        fencemigrate.downgrade(config, R1, token=7, expect_heads=R3)
    with pytest.raises(UsageError, match="ambiguous"):
        fencemigrate.downgrade(config, R1, token=7, expect_heads=["2222"])
    assert db.versions() == [R3]
    outcome = fencemigrate.downgrade(config, R1, token=7, holder="agent-A", expect_heads=["2222c"])
    assert outcome.heads == [R1]


def race(project: Project, db: Database, gate: Path, *a_options: str) -> Result:
    """B (token 6) upgrades to r3 and stops inside r3, holding its claim; A (token 7), planning
    from B's uncommitted state (heads r2), runs ``downgrade r1 A_OPTIONS`` and waits for the
    fence; B commits; A's outcome."""
    run(project, "upgrade", R2, token=5).check(0)
    gate.mkdir()
    wait_inside = f"""
        import pathlib, time
        pathlib.Path({str(gate)!r}, "inside").touch()
        while not pathlib.Path({str(gate)!r}, "go").exists():
            time.sleep(0.05)
    """
    project.add_revision(R3, R2, f"CREATE TABLE t_{R3} (id int)", f"DROP TABLE t_{R3}", extra_upgrade_code=wait_inside)
    b = background_runs.start(project, "upgrade", R3, "--token", "6", "--holder", "agent-B")
    background_runs.wait_for(lambda: (gate / "inside").exists())
    a = background_runs.start(project, "downgrade", R1, "--token", "7", "--holder", "agent-A", "--json", *a_options)
    waiting = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
    background_runs.wait_for(lambda: query(db.url, waiting) == [(1,)])
    (gate / "go").touch()
    background_runs.finish(b).check(0)
    return background_runs.finish(a)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_heads_moved_by_a_writer_the_claim_waited_for_are_fenced(
    target: tuple[Project, Database], tmp_path: Path
) -> None:
    """The check is made after the claim: heads that another fenced writer moved while A's claim
    waited for it are seen, and refused (without the option, A plans again from the new heads)."""
    project, db = target
    refused = race(project, db, tmp_path / "gate", "--expect-heads", R2)
    assert_fenced(refused, 7, 6, STALE_REASON)
    assert (db.versions(), db.fence_token(), db.tables()) == ([R3], 6, [f"t_{R1}", f"t_{R2}", f"t_{R3}"])


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_without_expect_heads_the_waiting_writer_replans_over_the_new_heads(
    target: tuple[Project, Database], tmp_path: Path
) -> None:
    """The control: A's claim waits for B as above, A plans again from r3 and rolls B's r3 back."""
    project, db = target
    race(project, db, tmp_path / "gate").check(0)
    assert (db.versions(), db.tables()) == ([R1], [f"t_{R1}"])


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_run_with_nothing_to_do_claims_nothing_and_checks_nothing(target: tuple[Project, Database]) -> None:
    """No claim, no check: ``upgrade r3`` at r3 writes nothing whatever heads it was told to expect,
    and its output names the heads it found."""
    project, db = target
    run(project, "upgrade", R3, token=5).check(0)
    before = db.snapshot()
    idle = run(project, "upgrade", R3, "--expect-heads", R1, token=5)
    assert idle.code == 0, str(idle)
    assert (json.loads(idle.stdout)["steps"], json.loads(idle.stdout)["heads"]) == ([], [R3])
    assert db.snapshot() == before


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_run_that_takes_its_own_lease_is_refused_and_releases_it(target: tuple[Project, Database]) -> None:
    """Without --token the run's grant advances the fence (as every grant does); the claim and the
    DDL roll back, and the lease is released."""
    project, db = target
    b_moved_on(project)
    versions, _, ledger, tables = db.snapshot()
    stale = project.run_cli("downgrade", R1, "--expect-heads", R2, "--holder", "agent-A", "--json")
    assert_fenced(stale, 7, 7, STALE_REASON)  # the lease service's first token above the fence (6)
    assert db.snapshot() == (versions, 7, ledger, tables)
    assert json.loads(project.run_cli("lease", "status", "--json").stdout)["lease"]["holder"] is None
