"""Progress on stderr: waits for the lease (at once, then every 5 s) and each revision as it starts.

Never on stdout (``--json`` keeps it to one object), and none with ``-q``. Plain ``alembic`` has
neither (its ``Running upgrade`` lines are env.py's logging), so there is no control to keep here.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest
from support import db, sqlite_rows
from support.fence_rows import stderr_lines
from support.project import MakeProject, Project, Result, run_command, script_command, sqlite_url

RESOURCE = "db/migrations"


@pytest.fixture(params=["postgresql", "sqlite"])
def chain(request: pytest.FixtureRequest, make_project: MakeProject, tmp_path: Path) -> Project:
    """Three revisions r01..r03 on PostgreSQL or SQLite."""
    url = str(request.getfixturevalue("pg_url")) if request.param == "postgresql" else sqlite_url(tmp_path / "app.db")
    project = make_project(url=url)
    project.add_chain(3)
    return project


def versions(project: Project) -> list[str] | None:
    if project.url.startswith("sqlite"):
        database = Path(project.url.removeprefix("sqlite:///"))
        return sqlite_rows.alembic_versions(database) if database.exists() else None
    return db.alembic_versions(project.url)


def lease_for_other(project: Project) -> tuple[int, datetime]:
    """``other`` holds the lease for 30 s: its token and expiry by the lease service's clock."""
    return lease_for_other_on(project)


def lease_for_other_on(project: Project, *options: str) -> tuple[int, datetime]:
    """:func:`lease_for_other`, with more ``lease acquire`` options (``--lease-url``)."""
    lease = json.loads(
        project.run_cli("lease", "acquire", "--holder", "other", "--ttl", "30s", "--json", *options).check().stdout
    )["lease"]
    return int(lease["token"]), datetime.fromisoformat(lease["expires_at"])


def waiting_lines(result: Result, token: int, expires: datetime) -> list[str]:
    """The wait reports on stderr, each checked against the lease ``other`` holds."""
    shown = re.escape(
        f"waiting for the lease on {RESOURCE}: held by other with token {token} until "
        f"{expires.isoformat(timespec='seconds')} by the lease service's clock; waiting at most "
    )
    lines = [line for line in stderr_lines(result.stderr) if line.startswith("waiting for the lease")]
    for line in lines:
        assert re.fullmatch(shown + r"\d+s more", line), result
    return lines


def busy_line(token: int) -> str:
    return f"fencemigrate: busy: lease on {RESOURCE} is busy: held by other (token {token}) until "


def test_a_run_waiting_for_the_lease_says_so_at_once_and_every_five_seconds(chain: Project) -> None:
    token, expires = lease_for_other(chain)
    result = chain.run_cli("upgrade", "head", "--wait", "7s").check(4)
    assert result.stdout == ""
    lines = waiting_lines(result, token, expires)
    assert len(lines) >= 2, result
    assert lines[0].endswith("waiting at most 7s more"), result  # at once, before any time has passed
    assert stderr_lines(result.stderr)[: len(lines)] == lines, result
    others = stderr_lines(result.stderr)[len(lines) :]
    assert len(others) == 1 and others[0].startswith(busy_line(token)), result
    assert versions(chain) in (None, [])


def test_quiet_waits_silently(chain: Project) -> None:
    token, _ = lease_for_other(chain)
    result = chain.run_cli("-q", "upgrade", "head", "--wait", "6s").check(4)
    assert result.stdout == ""
    lines = stderr_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith(busy_line(token)), result


def test_json_keeps_stdout_to_one_object_while_stderr_reports_the_wait(chain: Project) -> None:
    token, expires = lease_for_other(chain)
    result = chain.run_cli("upgrade", "head", "--wait", "6s", "--json").check(4)
    assert len(result.stdout.splitlines()) == 1, result
    payload = json.loads(result.stdout)
    assert (payload["status"], payload["holder"]) == ("busy", "other")
    assert len(waiting_lines(result, token, expires)) >= 2, result
    assert [line for line in stderr_lines(result.stderr) if not line.startswith("waiting for")] == [], result


def test_lease_acquire_wait_says_so(chain: Project) -> None:
    token, expires = lease_for_other(chain)
    result = chain.run_cli("lease", "acquire", "--holder", "me", "--wait", "6s").check(4)
    assert len(waiting_lines(result, token, expires)) >= 2, result
    assert stderr_lines(result.stderr)[-1].startswith(busy_line(token)), result
    quiet = chain.run_cli("-q", "lease", "acquire", "--holder", "me", "--wait", "1s").check(4)
    assert [line for line in stderr_lines(quiet.stderr) if line.startswith("waiting")] == [], quiet


def test_each_revision_is_reported_as_it_starts(chain: Project) -> None:
    result = chain.run_cli("upgrade", "head", "--token", "5").check()
    assert stderr_lines(result.stderr) == [
        "upgrade r01 (1/3) under token 5",
        "upgrade r02 (2/3) under token 5",
        "upgrade r03 (3/3) under token 5",
    ], result
    assert result.stdout.startswith(f"upgrade done: resource {RESOURCE}, token 5, holder "), result
    assert "(1/3)" not in result.stdout
    assert versions(chain) == ["r03"]


def test_quiet_leaves_stdout_as_it_is_and_json_keeps_it_one_object(chain: Project) -> None:
    run = ("upgrade", "r02", "--token", "5", "--holder", "h")
    back = ("downgrade", "base", "--token", "5", "--holder", "h")
    progress = ["upgrade r01 (1/2) under token 5", "upgrade r02 (2/2) under token 5"]
    chain.run_cli(*run).check()  # installs the fence schema, which the summary says once
    chain.run_cli(*back).check()
    loud = chain.run_cli(*run).check()
    assert stderr_lines(loud.stderr) == progress, loud
    chain.run_cli(*back).check()
    quiet = chain.run_cli("-q", *run).check()
    assert stderr_lines(quiet.stderr) == [], quiet
    assert quiet.stdout == loud.stdout
    down = chain.run_cli("-q", *back).check()
    assert stderr_lines(down.stderr) == [], down
    as_json = chain.run_cli(*run, "--json").check()
    assert len(as_json.stdout.splitlines()) == 1, as_json
    assert json.loads(as_json.stdout)["status"] == "ok"
    assert stderr_lines(as_json.stderr) == progress, as_json
    assert versions(chain) == ["r02"]


def test_quiet_silences_alembic_own_output_as_alembic_q_does(chain: Project) -> None:
    """``-q heads`` prints nothing, like the control ``alembic -q heads``; without -q both print the head."""
    assert chain.run_cli("heads").check().stdout == "r03 (head)\n"
    assert chain.run_alembic("heads").check().stdout == "r03 (head)\n"
    assert chain.run_cli("-q", "heads").check().stdout == ""
    assert chain.run_alembic("-q", "heads").check().stdout == ""


def test_quiet_init_prints_what_alembic_q_init_prints(tmp_path: Path) -> None:
    """``-q init -t generic`` leaves out Alembic's "Creating directory" and closing advice, as the
    control ``alembic -q init -t generic`` does; fencemigrate's result line stays."""
    outputs = {}
    for tool in ("alembic", "fencemigrate"):
        (tmp_path / tool).mkdir()
        result = run_command(script_command(tool) + ["-q", "init", "-t", "generic", "migrations"], tmp_path / tool)
        outputs[tool] = result.check().stdout.replace(str(tmp_path / tool), "DIR").splitlines()
    assert not any(line.startswith(("Creating directory", "Please edit")) for line in outputs["alembic"])
    assert outputs["fencemigrate"] == [
        *outputs["alembic"],
        (
            "Alembic environment (template generic) written to migrations; edit sqlalchemy.url in alembic.ini; "
            "its env.py is not fence-aware: plain alembic runs it without a token"
        ),
    ]


def test_a_run_waiting_for_a_redis_lease_says_so(project: Project, redis_url: str) -> None:
    """The same reports from the Redis lease service, by Redis's clock."""
    project.add_chain(1)
    token, expires = lease_for_other_on(project, "--lease-url", redis_url)
    result = project.run_cli("upgrade", "head", "--wait", "6s", "--lease-url", redis_url).check(4)
    assert len(waiting_lines(result, token, expires)) >= 2, result
    assert stderr_lines(result.stderr)[-1].startswith(busy_line(token)), result
