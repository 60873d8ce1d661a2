"""The README's main job: ``fencemigrate demo`` replays the incident fenced and unfenced."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from support.db import query
from support.pg import PgServer
from support.project import script_command, subprocess_env

#: The fenced run's timeline, as `fencemigrate timeline` prints it (times left out).
FENCED_TIMELINE = [
    "GRANT    db/migrations -> setup  token=1 ttl=1m",
    "APPLY    0041 by setup token=1",
    "RELEASE  db/migrations by setup token=1",
    "GRANT    db/migrations -> agent-A  token=2 ttl=1s",
    "APPLY    0042 by agent-A token=2",
    "EXPIRE   db/migrations (holder agent-A)",
    "GRANT    db/migrations -> agent-B  token=3 ttl=5m",
    "ROLLBACK 0042 by agent-B token=3",
    "APPLY    0042 by agent-B token=3",
    "RELEASE  db/migrations by agent-B token=3",
    "FENCED   reapply 0042 by agent-A token=2 < 3",
    "FENCED   upgrade head by agent-A token=2 < 3",
]
_TIMED = re.compile(r"^   \d\d:\d\d:\d\d  (.*)$")


def run_demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*script_command("fencemigrate"), "demo", *args],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_incident_replayed(output: str) -> None:
    lines = output.splitlines()
    assert "agent-A   reapply 0042 --token 2: FENCED (token 3 has since written to db/migrations)" in lines
    assert (
        "agent-A   renumbered its copy to 0043: upgrade head --token 2: FENCED "
        "(token 3 has since written to db/migrations)" in lines
    )
    assert any(line.startswith("agent-A   read state:") and line.endswith("goal met, stopping") for line in lines)
    # the heads as the CLI prints them, not a Python list
    assert "agent-B   read state: heads 0042, 0042 applied by agent-A under token 2: half-done, rewriting it" in lines
    assert (
        "agent-A   read state: heads 0042, 0042 applied by agent-B under token 3; invoice already has a currency "
        "column: goal met, stopping" in lines
    )
    assert not any("['" in line for line in lines)
    fenced, control = [line for line in lines if line.startswith("   invoice columns now:")]
    assert fenced == "   invoice columns now: id, amount, currency_code"
    assert control == "   invoice columns now: id, amount, currency"
    timed = [match[1] for line in lines if (match := _TIMED.match(line))]
    assert timed[: len(FENCED_TIMELINE)] == FENCED_TIMELINE
    assert timed[-1] == "agent-A   reapply 0042: rolled back B's 0042, applied its own -- nothing stopped it"
    assert lines[-1] == "verdict: fencing kept agent-B's work; plain alembic destroyed it"


def test_demo_runs_on_sqlite_with_no_setup(tmp_path: Path) -> None:
    """With no arguments: fresh SQLite files, exit 0 only because fencing kept agent-B's column
    and plain alembic replaced it with A's; both timelines are printed."""
    result = run_demo(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == "== fenced: fencemigrate with leases and tokens (sqlite) =="
    assert_incident_replayed(result.stdout)
    assert list(tmp_path.iterdir()) == []  # nothing left behind in the working directory


def test_demo_json_is_one_object_with_the_story_on_stderr(tmp_path: Path) -> None:
    """--json: stdout is the verdict as one JSON object; the replay is told on stderr."""
    result = run_demo(tmp_path, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout) == {
        "status": "ok",
        "fenced_kept_b": True,
        "control_lost_b": True,
        "verdict": "fencing kept agent-B's work; plain alembic destroyed it",
    }
    assert result.stderr.splitlines()[0] == "== fenced: fencemigrate with leases and tokens (sqlite) =="


def test_demo_on_postgresql(pg_server: PgServer, tmp_path: Path) -> None:
    """With --url: the same story on two scratch PostgreSQL databases, dropped afterwards."""
    result = run_demo(tmp_path, "--url", pg_server.url("postgres"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == "== fenced: fencemigrate with leases and tokens (postgresql) =="
    assert_incident_replayed(result.stdout)
    leftovers = query(pg_server.url("postgres"), "SELECT datname FROM pg_database WHERE datname LIKE 'fm_demo_%'")
    assert leftovers == []


@pytest.mark.parametrize("url", ["sqlite:///x.db", "mysql://127.0.0.1/x", "not a url"])
def test_demo_refuses_a_non_postgresql_url(tmp_path: Path, url: str) -> None:
    """Bad input: a clear one-line usage error and exit 2."""
    result = run_demo(tmp_path, "--url", url)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip() == (
        "fencemigrate: usage: --url must name a PostgreSQL server (postgresql+psycopg://...); "
        "leave it out to run on fresh SQLite files"
    )
