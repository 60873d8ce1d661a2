"""The README's main job: ``fencemigrate demo`` replays the incident fenced and unfenced."""

from __future__ import annotations

import subprocess
from pathlib import Path

from support.db import query
from support.pg import PgServer
from support.project import script_command, subprocess_env


def test_demo_keeps_b_s_work_fenced_and_loses_it_without_fencing(pg_server: PgServer, tmp_path: Path) -> None:
    """Exit 0 only because fencing kept agent-B's column and plain alembic replaced it with A's;
    the scratch databases are dropped afterwards."""
    result = subprocess.run(
        [*script_command("fencemigrate"), "demo", "--url", pg_server.url("postgres")],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "agent-A   reapply 0042 --token 33: FENCED (token 34 has since written to db/migrations)" in lines
    assert any(line.startswith("agent-A   renumbered its copy to 0043") and "FENCED" in line for line in lines)
    fenced, control = [line for line in lines if line.startswith("   invoice columns now:")]
    assert fenced == "   invoice columns now: id, amount, currency_code"
    assert control == "   invoice columns now: id, amount, currency"
    assert lines[-1] == "verdict: fencing kept agent-B's work; plain alembic destroyed it"
    leftovers = query(pg_server.url("postgres"), "SELECT datname FROM pg_database WHERE datname LIKE 'fm_demo_%'")
    assert leftovers == []


def test_demo_refuses_a_non_postgresql_url(tmp_path: Path) -> None:
    """Bad input: a clear one-line usage error and exit 2."""
    result = subprocess.run(
        [*script_command("fencemigrate"), "demo", "--url", f"sqlite:///{tmp_path}/x.db"],
        cwd=tmp_path,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "fencemigrate: usage: the demo needs a PostgreSQL URL (postgresql+psycopg://...)"
    )
