"""CI's slice of the fault-injection harness (bench/faults): a fixed seed, a small budget.

The same harness as ``bash bench/faults/run --schedules 1000``, against a PostgreSQL server of its
own (with ``track_commit_timestamp``; the harness restarts it as a fault, which the server the
other tests share must never see), SQLite, and the MariaDB and Redis servers ``.ci/test`` started,
one schedule each in turn. fencemigrate
must keep every property; the control (plain Alembic behind a hand-rolled lease) must break at
least one, or the schedules are not testing anything. Every schedule also has a tokenless writer
(a plain ``alembic downgrade -1``), which the version-table guard must refuse. A second slice fails
PostgreSQL over to a streaming standby that missed the stale agent's grant and writes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.replication import Server, own_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from faults.__main__ import make_backend, parse_args, run_harness  # noqa: E402
from faults.project import SCRIPT_DIR, alembic_template, chain, checkout  # noqa: E402
from faults.schedule import generate  # noqa: E402

SEED = 12
SCHEDULES = 8
BUDGET_S = 110


@pytest.fixture
def harness_postgres(monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """The harness's own PostgreSQL server, which the backends of ``make_backend`` point at."""
    with own_server("-c track_commit_timestamp=on") as server:
        monkeypatch.setenv("FENCEMIGRATE_TEST_PG_HOST", "127.0.0.1")
        monkeypatch.setenv("FENCEMIGRATE_TEST_PG_PORT", str(server.port))
        yield server


def test_fencemigrate_survives_the_seeded_slice_and_the_control_does_not(
    harness_postgres: Server, redis_server_url: str, mysql_server_url: str
) -> None:
    args = parse_args(
        [
            "--seed",
            str(SEED),
            "--schedules",
            str(SCHEDULES),
            "--budget",
            str(BUDGET_S),
            "--restarts",
            "--with-tokenless",
        ]
    )
    pgdata = str(harness_postgres.pgdata)
    backends = [make_backend(name, pgdata) for name in ("postgresql", "sqlite", "mariadb", "redis")]
    summary = run_harness(args, backends)
    report = "\n".join(summary.lines())
    assert sum(summary.schedules.values()) >= 4, report
    assert sum(summary.faults.values()) >= 4, report
    assert summary.total("fencemigrate") == 0, report
    assert summary.total("control") > 0, report


#: Seed 745, schedule 143 (PostgreSQL, ``--failovers``): the WAL is held from the start (before the first
#: runner starts), agent S is granted token 1 and upgrades, the primary fails over at 2.76 s; R1 and R2 take
#: leases on the promoted server from 3.58 s, then S, its lease long expired, runs ``upgrade head`` under token 1.
FAILOVER_SEED, FAILOVER_SCHEDULE = 745, 143


def test_a_failover_is_scheduled_once_and_never_beside_a_restart() -> None:
    """``--failovers`` adds the fault kind (at most once a schedule); without it none is drawn."""
    options = {"preempt": True, "kill_connections": True, "restart": True, "autocommit_block": True, "tokenless": True}
    plans = [generate(SEED, index, **options, failover=True) for index in range(200)]
    kinds = [[fault.kind for fault in plan.faults] for plan in plans]
    assert any("failover" in plan for plan in kinds)
    assert all(plan.count("failover") <= 1 and not {"failover", "restart"} <= set(plan) for plan in kinds)
    assert all("failover" not in [f.kind for f in generate(SEED, index, **options).faults] for index in range(200))


def test_half_the_schedules_run_a_transaction_per_revision(tmp_path: Path) -> None:
    """``per_migration`` comes from a random stream of its own (the rest of each schedule stays what
    it was without it) and holds for about half the schedules; their checkouts' env.py runs each
    revision in a transaction of its own, the others' the whole chain in one."""
    options = {"preempt": True, "kill_connections": True, "restart": True, "autocommit_block": True, "tokenless": True}
    plans = [generate(SEED, index, **options) for index in range(200)]
    assert 60 <= sum(plan.per_migration for plan in plans) <= 140
    template = alembic_template(tmp_path)
    env_py = {
        per_migration: (
            checkout(
                template,
                tmp_path / str(per_migration),
                "sqlite:///unused.db",
                "db/migrations",
                chain((0.0, 0.0, 0.0), autocommit_block=False),
                "fencemigrate_agent_fence",
                per_migration=per_migration,
            )
            / SCRIPT_DIR
            / "env.py"
        ).read_text()
        for per_migration in (True, False)
    }
    assert "target_metadata=target_metadata, transaction_per_migration=True" in env_py[True]
    assert "transaction_per_migration" not in env_py[False]


def test_fencemigrate_survives_a_failover_to_a_standby_that_missed_a_grant(harness_postgres: Server) -> None:
    """fencemigrate keeps every property on the promoted server: no token issued twice (S's lost
    token 1 again), no write of S's under it. The control grants token 1 to R1 too, and S's
    downgrade under it goes through."""
    args = parse_args(
        ["--seed", str(FAILOVER_SEED), "--start", str(FAILOVER_SCHEDULE), "--schedules", "1", "--failovers"]
    )
    summary = run_harness(args, [make_backend("postgresql", None)])
    report = "\n".join(summary.lines())
    assert summary.faults["failover"] == 2, report
    assert summary.violations["control"]["token-reissued"] > 0, report
    assert summary.total("fencemigrate") == 0, report
