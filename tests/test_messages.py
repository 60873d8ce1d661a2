"""What fencemigrate says is what happened (issue 14, "What was seen to be wrong or misleading").

Each test runs the real ``fencemigrate`` (and, as the control, ``alembic``) console scripts on
real databases and checks the exact lines printed against what the database and the event log
show: a reapply needs the token that applied the revision, a renew keeps the lease's TTL, a run
says how often it renewed its lease, a stamp says what it stamped or unstamped, ``--sql`` says
that nothing was applied, FENCED says whether the newer token has written or was only granted,
``state`` lists the ledger in apply order, and the wheel installs and runs on its own.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from support.db import schema_names, table_names
from support.project import MakeProject, Project, Result, run_command, script_command, sqlite_url, subprocess_env

REPO = Path(__file__).resolve().parent.parent
RESOURCE = "db/migrations"
BACKENDS = ["postgresql", "sqlite", "mariadb"]
_CLEAN_ENV: dict[str, str | None] = {"FENCEMIGRATE_TOKEN": None, "ALEMBIC_CONFIG": None}
_LOG_LINE = re.compile(r"^[A-Z]{4,8} +\[[\w.]+\] ")


# -- helpers -----------------------------------------------------------------------------------


def cli(project: Project, *args: str, env: Mapping[str, str | None] | None = None) -> Result:
    """``fencemigrate *args`` in the project, without an inherited token or config variable."""
    return project.run_cli(*args, env={**_CLEAN_ENV, **(env or {})})


def cli_json(project: Project, *args: str, code: int = 0) -> dict[str, Any]:
    """``fencemigrate *args --json``: the exit status checked, the one JSON object printed."""
    result = cli(project, *args, "--json").check(code)
    payload = json.loads(result.stdout)
    assert isinstance(payload, dict)
    return payload


def log_free(stderr: str) -> list[str]:
    """The non-empty stderr lines that are not Alembic's own log lines (``INFO  [alembic...] ...``)."""
    return [line for line in stderr.splitlines() if line.strip() and not _LOG_LINE.match(line)]


def chain(project: Project, *revisions: str) -> None:
    """Revisions in a chain, in the order given, each creating its table ``t_<id>``."""
    down = None
    for revision in revisions:
        project.add_revision(revision, down, f"CREATE TABLE t_{revision} (id int)", f"DROP TABLE t_{revision}")
        down = revision


def granted(project: Project, holder: str, *args: str) -> int:
    """``lease acquire`` for ``holder``: the token granted."""
    return int(cli_json(project, "lease", "acquire", "--holder", holder, *args)["lease"]["token"])


def events(project: Project, kind: str) -> list[dict[str, Any]]:
    """The timeline's events of one kind, oldest first."""
    return [event for event in cli_json(project, "timeline")["events"] if event["kind"] == kind]


def seconds_left(moment: str) -> float:
    """Seconds from now until the ISO-8601 ``moment``."""
    return (datetime.fromisoformat(moment) - datetime.now(UTC)).total_seconds()


@pytest.fixture(params=BACKENDS)
def on_backend(request: pytest.FixtureRequest, make_project: MakeProject, tmp_path: Path) -> Project:
    """A fresh project on PostgreSQL, SQLite or MariaDB."""
    if request.param == "postgresql":
        return make_project()
    if request.param == "sqlite":
        return make_project(url=sqlite_url(tmp_path / "db.sqlite"))
    return make_project(url=request.getfixturevalue("mariadb_url"))


# -- reapply: only under the token that applied the revision, so no lease of its own ----------

REAPPLY_NEEDS_TOKEN = (
    "fencemigrate: usage: reapply needs --token N, the token that applied the revision (or "
    "FENCEMIGRATE_TOKEN): a new lease's token could never re-apply it"
)


def test_reapply_needs_the_token_that_applied_it_and_offers_no_lease_options(project: Project) -> None:
    """Without --token a reapply is refused (exit 2, nothing written), and its help says why and
    lists no lease option; a lease taken now brings a token the ledger lets re-apply nothing,
    while the token that applied the revision re-applies it."""
    chain(project, "0001")
    refused = cli(project, "reapply", "0001").check(2)
    assert (refused.stdout, log_free(refused.stderr)) == ("", [REAPPLY_NEEDS_TOKEN])
    assert "fencemigrate" not in schema_names(project.url) and table_names(project.url) == []

    help_text = cli(project, "reapply", "--help").check(0).stdout
    about, options = help_text.split("\nOptions:\n")
    assert "a lease taken now would bring a new token, which could never re-apply anything" in " ".join(about.split())
    assert [line.split()[0] for line in options.splitlines() if line.startswith("  -")] == [
        "--token",
        "--holder",
        "--resource",
        "--tag",
        "--mode",
        "--expect-heads",
        "--wait",
        "--json",
        "-h,",
    ]
    ttl = cli(project, "reapply", "0001", "--token", "1", "--ttl", "5m").check(2)
    assert "No such option '--ttl'" in ttl.stderr

    cli(project, "upgrade", "head", "--holder", "deploy").check(0)  # its own lease: token 1
    redone = cli(project, "reapply", "0001", "--token", "1", "--holder", "deploy").check(0)
    assert redone.stdout.splitlines() == [
        f"reapply done: resource {RESOURCE}, token 1, holder deploy",
        "  rolled back 0001 under token 1",
        "  re-applied 0001 under token 1",
        "  heads now: 0001",
    ]
    token = granted(project, "agent-B")
    assert token == 2
    stale = cli_json(project, "reapply", "0001", "--token", "2", "--holder", "agent-B", code=3)
    assert stale["reason"] == "0001 was applied under token 1, not yours"


# -- lease renew keeps the lease's TTL ----------------------------------------------------------


def _renew_keeps_ttl(project: Project, *lease_url: str) -> None:
    def lease(*args: str) -> dict[str, Any]:
        return cli_json(project, "lease", *args, "--holder", "agent-A", *lease_url)["lease"]

    first = lease("acquire", "--ttl", "10m")
    assert (first["ttl"], first["ttl_ms"]) == ("10m", 600_000)
    renewed = lease("renew")
    assert (renewed["token"], renewed["ttl"], renewed["ttl_ms"]) == (first["token"], "10m", 600_000)
    assert 590 < seconds_left(renewed["expires_at"]) <= 600
    shorter = lease("renew", "--ttl", "2m")
    assert (shorter["ttl"], shorter["ttl_ms"]) == ("2m", 120_000)
    assert 110 < seconds_left(shorter["expires_at"]) <= 120
    kept = lease("renew")
    assert kept["ttl"] == "2m" and 110 < seconds_left(kept["expires_at"]) <= 120

    text = cli(project, "lease", "renew", "--holder", "agent-A", *lease_url).check(0).stdout
    assert text.startswith(f"renewed {RESOURCE} to agent-A: token {first['token']}, ttl 2m, expires ")
    assert [event["detail"]["ttl_ms"] for event in events(project, "RENEW")] == [600_000, 120_000, 120_000, 120_000]


def test_lease_renew_keeps_the_ttl_of_the_lease(on_backend: Project) -> None:
    """acquire --ttl 10m, then renew without --ttl: still 10 minutes (not the 60 s default);
    with --ttl 2m, 2 minutes, and the next renew keeps those; the RENEW events say the same."""
    _renew_keeps_ttl(on_backend)


def test_lease_renew_keeps_the_ttl_of_a_redis_lease(project: Project, redis_url: str) -> None:
    """The same on the Redis lease backend (the TTL kept in the last-grant hash)."""
    _renew_keeps_ttl(project, "--lease-url", redis_url)


# -- a run says how often it renewed its lease --------------------------------------------------


@pytest.mark.serial
@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_a_run_says_how_often_it_renewed_its_lease(backend: str, make_project: MakeProject, tmp_path: Path) -> None:
    """A quick run never renews: it says nothing about renewing (lease_renewals 0, no RENEW
    event). Two revisions of 0.5 s under a 1 s TTL renew after each: "renewed 2 times", as the
    timeline's RENEW events show."""
    project = make_project(url=sqlite_url(tmp_path / "db.sqlite")) if backend == "sqlite" else make_project()
    chain(project, "0001")
    quick = cli(project, "upgrade", "head", "--holder", "pod-1").check(0)
    assert quick.stdout.splitlines()[:2] == [
        f"upgrade done: resource {RESOURCE}, token 1, holder pod-1",
        "  the token came from a lease this run took and released",
    ]
    assert events(project, "RENEW") == []

    for revision, down in (("0002", "0001"), ("0003", "0002")):
        project.add_revision(revision, down, extra_upgrade_code="import time\ntime.sleep(0.5)")
    payload = cli_json(project, "upgrade", "head", "--holder", "pod-2", "--ttl", "1s")
    assert (payload["leased"], payload["lease_renewals"]) == (True, 2)
    assert [(event["holder"], event["token"]) for event in events(project, "RENEW")] == [("pod-2", 2)] * 2

    project.add_revision("0004", "0003", extra_upgrade_code="import time\ntime.sleep(0.5)")
    project.add_revision("0005", "0004", extra_upgrade_code="import time\ntime.sleep(0.5)")
    slow = cli(project, "upgrade", "head", "--holder", "pod-3", "--ttl", "1s").check(0)
    assert slow.stdout.splitlines()[1] == (
        "  the token came from a lease this run took, renewed 2 times while it worked and released"
    )


# -- stamp says what it stamped or unstamped ----------------------------------------------------


def test_stamp_down_says_what_it_unstamped(on_backend: Project, make_project: MakeProject, tmp_path: Path) -> None:
    """stamp 0003 then stamp 0001: "unstamped 0002, 0003", direction "down"; back up to 0003:
    "stamped 0002, 0003", direction "up". The version table ends as plain alembic's does."""
    project = on_backend
    chain(project, "0001", "0002", "0003")
    up = cli(project, "stamp", "0003", "--holder", "ops").check(0)
    assert "  stamped 0001, 0002, 0003 under token 1" in up.stdout.splitlines()

    down = cli(project, "stamp", "0001", "--holder", "ops").check(0)
    assert "  unstamped 0002, 0003 under token 2" in down.stdout.splitlines()
    assert "  heads now: 0001" in down.stdout.splitlines()
    assert [row["revision"] for row in cli_json(project, "state")["ledger"]] == ["0001"]

    again = cli_json(project, "stamp", "0003", "--holder", "ops")
    assert again["steps"] == [
        {"revisions": ["0002", "0003"], "direction": "up", "action": "stamped", "token": 3, "atomic": True}
    ]
    back = cli_json(project, "stamp", "0001", "--holder", "ops")
    assert back["steps"] == [
        {"revisions": ["0002", "0003"], "direction": "down", "action": "unstamped", "token": 4, "atomic": True}
    ]
    assert back["heads"] == ["0001"]

    control = make_project(url=sqlite_url(tmp_path / "control.sqlite"), name="control")
    chain(control, "0001", "0002", "0003")
    control.run_alembic("stamp", "0003").check(0)
    control.run_alembic("stamp", "0001").check(0)
    assert control.run_alembic("current").check(0).stdout.split() == back["heads"]


# -- --sql applies nothing, and says so ---------------------------------------------------------


def test_sql_output_says_written_as_sql_not_applied(project: Project) -> None:
    """upgrade/downgrade --sql: every step "written as SQL" (text and JSON), nothing "applied";
    the database is untouched."""
    chain(project, "0001", "0002")
    up = cli(project, "upgrade", "head", "--sql", "--token", "5", "--holder", "ci").check(0)
    assert "CREATE TABLE t_0001" in up.stdout
    assert log_free(up.stderr) == [
        f"upgrade written as SQL: resource {RESOURCE}, token 5, holder ci",
        "  0001 written as SQL, to be applied under token 5",
        "  0002 written as SQL, to be applied under token 5",
        "  heads after the script: 0002",
    ]
    down = cli(project, "downgrade", "0002:0001", "--sql", "--token", "5", "--holder", "ci").check(0)
    assert log_free(down.stderr) == [
        f"downgrade written as SQL: resource {RESOURCE}, token 5, holder ci",
        "  0002 written as SQL, to be rolled back under token 5",
        "  heads after the script: 0001",
    ]
    payload = cli(project, "upgrade", "head", "--sql", "--token", "5", "--json").check(0)
    summary = json.loads(payload.stderr.splitlines()[-1])
    assert summary["offline"] is True
    assert [(step["revisions"], step["direction"], step["action"]) for step in summary["steps"]] == [
        (["0001"], "up", "written as SQL"),
        (["0002"], "up", "written as SQL"),
    ]
    assert "fencemigrate" not in schema_names(project.url) and table_names(project.url) == []


# -- FENCED: "has since written" only when the newer token has written ---------------------------


def fenced_message(token: int, fence: int, news: str) -> list[str]:
    return [
        f"FENCED: you no longer own {RESOURCE}.",
        f"Your lease token ({token}) is older than token {fence}, which {news}.",
        "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply.",
        "Your plan and your memory of this resource are probably stale, including anything",
        "your context summary says you 'hold'.",
        "Next step: run `fencemigrate state` and re-plan from what is actually there.",
        "If your goal is already met by the current state, report that and stop.",
    ]


def test_fenced_says_granted_until_the_newer_token_has_written(on_backend: Project) -> None:
    """agent-A (token 1) applies 0001 and releases; agent-B is granted token 2. A's next write is
    FENCED "was granted after yours" (B has not written); once B has applied 0002, "has since
    written". The reasons in --json and in the timeline's FENCED events say the same."""
    project = on_backend
    chain(project, "0001", "0002")
    token_a = granted(project, "agent-A", "--ttl", "10m")
    cli(project, "upgrade", "0001", "--token", str(token_a), "--holder", "agent-A").check(0)
    cli(project, "lease", "release", "--holder", "agent-A").check(0)
    token_b = granted(project, "agent-B", "--ttl", "10m")
    assert (token_a, token_b) == (1, 2)
    before = cli_json(project, "state")

    only_granted = cli(project, "upgrade", "head", "--token", "1", "--holder", "agent-A").check(3)
    assert log_free(only_granted.stderr) == fenced_message(1, 2, "was granted after yours (it has not written yet)")
    payload = cli_json(project, "upgrade", "head", "--token", "1", "--holder", "agent-A", code=3)
    assert (payload["fence_token"], payload["reason"]) == (2, f"token 2 has since been granted {RESOURCE}")
    assert cli_json(project, "state") == before

    cli(project, "upgrade", "head", "--token", "2", "--holder", "agent-B").check(0)
    wrote = cli(project, "downgrade", "base", "--token", "1", "--holder", "agent-A").check(3)
    assert log_free(wrote.stderr) == fenced_message(1, 2, "has since written to this resource")
    assert [event["detail"]["reason"] for event in events(project, "FENCED")] == [
        f"token 2 has since been granted {RESOURCE}",
        f"token 2 has since been granted {RESOURCE}",
        f"token 2 has since written to {RESOURCE}",
    ]


def test_plain_alembic_through_a_fence_aware_env_says_granted_too(tmp_path: Path, pg_url: str) -> None:
    """The env.py `fencemigrate init` writes fences plain `alembic -x fence_token=N` the same way,
    and words FENCED the same way: "was granted" until the newer token has written. Control: the
    same stale token through fencemigrate gets the same lines."""
    directory = tmp_path / "fenced"
    directory.mkdir()
    run_command(script_command("fencemigrate") + ["init", "migrations"], directory).check(0)
    project = Project(path=directory, url=pg_url, template="fencemigrate")
    project.set_url(pg_url)
    chain(project, "0001", "0002")
    project.run_alembic("-x", "fence_token=1", "upgrade", "0001").check(0)
    assert granted(project, "agent-B") == 2

    stale = project.run_alembic("-x", "fence_token=1", "upgrade", "head").check(3)
    assert log_free(stale.stderr) == fenced_message(1, 2, "was granted after yours (it has not written yet)")
    control = cli(project, "upgrade", "head", "--token", "1").check(3)
    assert log_free(control.stderr) == log_free(stale.stderr)

    cli(project, "upgrade", "head", "--token", "2", "--holder", "agent-B").check(0)
    wrote = project.run_alembic("-x", "fence_token=1", "downgrade", "base").check(3)
    assert log_free(wrote.stderr) == fenced_message(1, 2, "has since written to this resource")


# -- state lists the ledger in apply order ------------------------------------------------------


def test_state_lists_the_ledger_in_apply_order(on_backend: Project) -> None:
    """Revision b (the root) is applied before a, in one run: state lists b, then a, although
    "a" sorts first and both rows may share their applied_at (one transaction on PostgreSQL)."""
    project = on_backend
    chain(project, "b", "a")
    cli(project, "upgrade", "head", "--token", "4", "--holder", "h").check(0)
    assert [row["revision"] for row in cli_json(project, "state")["ledger"]] == ["b", "a"]
    text = cli(project, "state").check(0).stdout.splitlines()
    ledger = text[text.index("ledger (alembic_version):") + 1 :][:2]
    assert [line.split()[0] for line in ledger] == ["b", "a"]


# -- the wheel: installs from a checkout, carries its data, runs the demo ------------------------


def test_the_wheel_built_from_a_checkout_runs_on_its_own(tmp_path: Path) -> None:
    """The README's install route: `pip wheel` from the checkout; the wheel carries the SQL, the
    init template and the Redis scripts, and, installed on its own, prints its version and
    replays the demo. The README no longer offers `pip install fencemigrate` (not on PyPI)."""
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "-q", "-w", str(wheels)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("fencemigrate-*.whl")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(tmp_path / "site"), str(wheel)],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    package = tmp_path / "site" / "fencemigrate"
    for data in (
        "_data/sql/fencemigrate.control",
        "_data/sql/queries/sqlite.sql",
        "_data/alembic_template/env.py",
        "leases/lua/renew.lua",
    ):
        assert (package / data).is_file(), data

    def installed(*args: str) -> subprocess.CompletedProcess[str]:
        env = {"PYTHONPATH": str(tmp_path / "site")}
        return subprocess.run(
            [sys.executable, "-m", "fencemigrate", *args],
            cwd=tmp_path,
            env=subprocess_env(env),
            capture_output=True,
            text=True,
            timeout=300,
        )

    where = subprocess.run(
        [sys.executable, "-c", "import fencemigrate.config as r; print(r.sql_dir())"],
        cwd=tmp_path,
        env=subprocess_env({"PYTHONPATH": str(tmp_path / "site")}),
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(where.stdout.strip()) == package / "_data" / "sql"
    assert installed("--version").stdout == (
        f"python -m fencemigrate, version {version('fencemigrate')} (Alembic {version('alembic')})\n"
    )
    demo = installed("demo")
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert demo.stdout.splitlines()[-1] == "verdict: fencing kept agent-B's work; plain alembic destroyed it"

    readme = (REPO / "README.md").read_text()
    assert "pip install fencemigrate\n" not in readme and "pip install fencemigrate " not in readme
    assert "pip wheel /path/to/fencemigrate --no-deps -w dist/" in readme
