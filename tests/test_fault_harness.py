"""CI's slice of the fault-injection harness (bench/faults): a fixed seed, a small budget.

The same harness as ``bash bench/faults/run --schedules 1000``, against the servers ``.ci/test``
started: PostgreSQL (with ``track_commit_timestamp``, which the harness turns on by restarting the
server once), SQLite, MariaDB and the Redis lease backend, one schedule each in turn. fencemigrate
must keep every property; the control (plain Alembic behind a hand-rolled lease) must break at
least one, or the schedules are not testing anything. Every schedule also has a tokenless writer
(a plain ``alembic downgrade -1``), which the version-table guard must refuse.
"""

from __future__ import annotations

import sys
from pathlib import Path

from support.pg import PgServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from faults.__main__ import make_backend, parse_args, run_harness  # noqa: E402

SEED = 12
SCHEDULES = 8
BUDGET_S = 110


def test_fencemigrate_survives_the_seeded_slice_and_the_control_does_not(
        pg_server: PgServer, redis_server_url: str, mysql_server_url: str) -> None:
    args = parse_args(["--seed", str(SEED), "--schedules", str(SCHEDULES), "--budget", str(BUDGET_S), "--restarts",
                       "--with-tokenless"])
    backends = [make_backend(name, None) for name in ("postgresql", "sqlite", "mariadb", "redis")]
    summary = run_harness(args, backends)
    report = "\n".join(summary.lines())
    assert sum(summary.schedules.values()) >= 4, report
    assert sum(summary.faults.values()) >= 4, report
    assert summary.total("fencemigrate") == 0, report
    assert summary.total("control") > 0, report
