"""Nothing to do, nothing written; read commands never create a database.

A run whose plan has no steps (``upgrade head`` at head, ``downgrade`` to the current revision,
``stamp`` to where the version table is) decides so from the heads it reads before anything else:
without ``--token`` it takes no lease (no GRANT or RELEASE, the lease counter stays), installs no
fence schema and writes nothing, so it works on a read-only SQLite file as ``alembic upgrade head``
does (the control). With ``--token`` it claims nothing either; a stale token is FENCED. When there
is work after all by the time the run's transaction reads the heads, it plans again and does it
under a lease. ``state``, ``timeline``, ``current`` and ``check --db`` on a SQLite URL whose file
does not exist fail (exit 1) and leave no file; plain ``alembic current`` creates it (the control).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.db import schema_names
from support.fence_rows import assert_fenced, stderr_lines
from support.mysql_server import mysql_table_names
from support.project import (
    MakeProject,
    Project,
    Result,
    run_command,
    script_command,
    sqlite_url,
    start_process,
)
from support.sqlite_rows import events as sqlite_events
from support.sqlite_rows import fence_installed as sqlite_fence_installed
from support.zygote import Process

HOLDER = "agent-A"
NO_LEASE = "  no lease taken: there was nothing to do"
DONE_BY_ANOTHER = "  no lease taken: another runner finished the work while this one waited for the lease"
NOT_TRANSACTIONAL = (
    "fencemigrate: error: refusing to migrate: the connection env.py gave Alembic is in autocommit mode or outside "
    "a transaction, so the fence claim could not share a transaction with the DDL; nothing was applied"
)


@dataclass
class Database:
    """A project on one kind of database, and how to tell whether its fence schema is installed."""

    project: Project
    fence_installed: Callable[[], bool]


@pytest.fixture(params=["postgresql", "sqlite", "mariadb"])
def database(request: pytest.FixtureRequest, make_project: MakeProject, tmp_path: Path) -> Database:
    """A two-revision project (r01, r02) on a fresh PostgreSQL database, SQLite file or MariaDB database."""
    if request.param == "sqlite":
        path = tmp_path / "db.sqlite"
        project = make_project(url=sqlite_url(path))
        installed = lambda: path.exists() and sqlite_fence_installed(path)  # noqa: E731
    elif request.param == "mariadb":
        url = request.getfixturevalue("mariadb_url")
        project = make_project(url=url)
        installed = lambda: "fencemigrate_agent_fence" in mysql_table_names(url)  # noqa: E731
    else:
        url = request.getfixturevalue("pg_url")
        project = make_project(url=url)
        installed = lambda: "fencemigrate" in schema_names(url)  # noqa: E731
    project.add_chain(2)
    return Database(project, installed)


def as_json(result: Result) -> Any:
    """The one JSON object a command printed."""
    return json.loads(result.stdout)


def timeline(project: Project) -> list[dict[str, Any]]:
    """Every logged event, from `timeline --json`."""
    return list(as_json(project.run_cli("timeline", "--json").check(0))["events"])


def lease(project: Project) -> dict[str, Any]:
    """The lease (holder, last token issued, fence token), from `lease status --json`."""
    return dict(as_json(project.run_cli("lease", "status", "--json").check(0))["lease"])


def idle_lines(command: str, heads: str, token: str = "(none)", holder: str = HOLDER) -> list[str]:
    """What a run with nothing to do prints (without --token: also that it took no lease)."""
    first = f"{command} done: resource db/migrations, token {token}, holder {holder}"
    lease_line = [NO_LEASE] if token == "(none)" else []
    return [first, *lease_line, "  nothing to do", f"  heads now: {heads}"]


NOTHING_TO_DO_COMMANDS = [("upgrade", "head"), ("downgrade", "r02"), ("stamp", "r02"), ("stamp", "head")]


# -- without --token: no lease, no install, no write ---------------------------------------------


def test_at_head_no_lease_is_taken(database: Database) -> None:
    """After a fenced upgrade to head, `upgrade head`, `downgrade r02` and `stamp r02`/`stamp head`
    exit 0 with "nothing to do": no GRANT or RELEASE in the timeline, the lease's last token issued
    unchanged; the JSON outcome says why no lease was taken."""
    project = database.project
    project.run_cli("upgrade", "head", "--holder", HOLDER).check(0)
    events, held = timeline(project), lease(project)
    assert [event["kind"] for event in events] == ["GRANT", "APPLY", "APPLY", "RELEASE"]
    assert held["token"] == 1
    for command in NOTHING_TO_DO_COMMANDS:
        result = project.run_cli(*command, "--holder", HOLDER).check(0)
        assert result.stdout.splitlines() == idle_lines(command[0], "r02"), result
    outcome = as_json(project.run_cli("upgrade", "head", "--holder", HOLDER, "--json").check(0))
    assert (outcome["no_lease"], outcome["token"], outcome["leased"], outcome["steps"]) == (
        "nothing_to_do",
        None,
        False,
        [],
    )
    assert timeline(project) == events
    assert lease(project) == held


def test_at_head_without_fence_schema_installs_nothing(database: Database) -> None:
    """Plain Alembic brought the database to head: the fenced commands with nothing to do install no
    fence schema (nor take a lease); `fencemigrate install` installs it on demand."""
    project = database.project
    project.run_alembic("upgrade", "head").check(0)  # the control: plain Alembic, no fence
    for command in NOTHING_TO_DO_COMMANDS:
        result = project.run_cli(*command, "--holder", HOLDER).check(0)
        assert result.stdout.splitlines() == idle_lines(command[0], "r02"), result
    assert not database.fence_installed()
    project.run_cli("install").check(0)
    assert database.fence_installed()
    # install adopts what plain Alembic applied (docs/adopting.md), and nothing else happens
    assert [(event["kind"], event["detail"]["revisions"]) for event in timeline(project)] == [("ADOPT", ["r01", "r02"])]


def test_read_only_sqlite_file_at_head(tmp_path: Path, make_project: MakeProject) -> None:
    """On a SQLite file opened read-only (`?mode=ro`: refused to root too, unlike chmod), plain
    `alembic upgrade head` at head exits 0 (the control), and so do fencemigrate's commands with
    nothing to do, fenced file or not; a run with work fails and the file is unchanged."""
    path = tmp_path / "db.sqlite"
    fenced = make_project(url=sqlite_url(path), name="fenced")
    fenced.add_chain(2)
    fenced.run_cli("upgrade", "head", "--holder", HOLDER).check(0)
    plain_path = tmp_path / "plain.sqlite"
    plain = make_project(url=sqlite_url(plain_path), name="plain")
    plain.add_chain(2)
    plain.run_alembic("upgrade", "head").check(0)
    for project, file in ((fenced, path), (plain, plain_path)):
        before = hashlib.sha256(file.read_bytes()).hexdigest()
        project.set_url(f"sqlite:///file:{file}?mode=ro&uri=true")
        project.run_alembic("upgrade", "head").check(0)  # the control
        for command in NOTHING_TO_DO_COMMANDS:
            result = project.run_cli(*command, "--holder", HOLDER).check(0)
            assert result.stdout.splitlines() == idle_lines(command[0], "r02"), result
        result = project.run_cli("upgrade", "head", "--holder", HOLDER, "--token", "1").check(0)
        assert result.stdout.splitlines() == idle_lines("upgrade", "r02", token="1"), result
        work = project.run_cli("downgrade", "r01", "--holder", HOLDER).check(1)
        assert "attempt to write a readonly database" in work.stderr
        assert hashlib.sha256(file.read_bytes()).hexdigest() == before


# -- with --token ---------------------------------------------------------------------------------


def test_at_head_with_a_token_claims_nothing_and_a_stale_token_is_fenced(database: Database) -> None:
    """At head, `upgrade head --token N` with N at or above the fence exits 0 and claims nothing (the
    fence stays, no event); with N below it, FENCED (exit 3): nothing changes but the logged FENCED."""
    project = database.project
    project.run_cli("upgrade", "r01", "--token", "5", "--holder", HOLDER).check(0)
    project.run_cli("upgrade", "head", "--token", "7", "--holder", "agent-B").check(0)
    events = timeline(project)
    for token in ("7", "9"):
        result = project.run_cli("upgrade", "head", "--token", token, "--holder", "agent-C").check(0)
        assert result.stdout.splitlines() == idle_lines("upgrade", "r02", token=token, holder="agent-C"), result
    assert timeline(project) == events
    assert lease(project)["fence_token"] == 7
    stale = project.run_cli("upgrade", "head", "--token", "5", "--holder", HOLDER)
    assert_fenced(stale, 5, 7)
    after = timeline(project)
    assert after[:-1] == events
    assert (after[-1]["kind"], after[-1]["token"], after[-1]["holder"]) == ("FENCED", 5, HOLDER)
    assert lease(project)["fence_token"] == 7


def test_at_head_a_token_the_lease_service_never_issued_is_fenced(database: Database) -> None:
    """After the lease service issued tokens 1..3, at head `--token 3` exits 0 with nothing written;
    `--token 8` (and 2**62, and `upgrade heads`, `stamp heads`) is FENCED as the claim would refuse it
    with work to do: the never-issued reason, exit 3, nothing changed but the logged FENCED event."""
    project = database.project
    project.run_cli("upgrade", "head", "--holder", HOLDER).check(0)  # grants token 1
    for issued in (2, 3):
        # 10 minutes: the held lease must outlive this test on a loaded machine.
        acquired = as_json(project.run_cli("lease", "acquire", "--holder", HOLDER, "--ttl", "10m", "--json").check(0))
        assert acquired["lease"]["token"] == issued
        if issued < 3:
            project.run_cli("lease", "release", "--holder", HOLDER).check(0)
    events, held = timeline(project), lease(project)
    result = project.run_cli("upgrade", "head", "--token", "3", "--holder", HOLDER).check(0)
    assert result.stdout.splitlines() == idle_lines("upgrade", "r02", token="3"), result
    assert (timeline(project), lease(project)) == (events, held)
    for command, token in (
        (("upgrade", "head"), 8),
        (("upgrade", "heads"), 8),
        (("stamp", "heads"), 8),
        (("upgrade", "head"), 2**62),
    ):
        forged = project.run_cli(*command, "--token", str(token), "--holder", "agent-F")
        forged.check(3)
        reason = (
            f"token {token} was never issued by the lease service for db/migrations (the last token it issued is 3)"
        )
        assert stderr_lines(forged.stderr)[:2] == [
            "FENCED: this write to db/migrations is not yours to make.",
            f"Rejected for token {token}: {reason}.",
        ], forged
        after = timeline(project)
        assert after[:-1] == events
        assert (after[-1]["kind"], after[-1]["token"], after[-1]["holder"]) == ("FENCED", token, "agent-F")
        assert after[-1]["detail"]["reason"] == reason
        assert lease(project) == held
        assert "r02 (head)" in project.run_cli("current", "--check-heads").check(0).stdout
        events = after
    rejected = as_json(project.run_cli("upgrade", "head", "--token", "8", "--json").check(3))
    assert (rejected["status"], rejected["token"], rejected["fence_token"]) == ("fenced", 8, 3)


def test_at_head_an_external_resource_takes_any_token_at_or_above_its_fence(database: Database) -> None:
    """No lease ever granted (tokens from a harness's own leases): at head, any token at or above the
    fence, up to 2**62, exits 0 with nothing to do and nothing written, as before."""
    project = database.project
    project.run_cli("upgrade", "head", "--token", "5", "--holder", HOLDER).check(0)
    events = timeline(project)
    for command, token in (
        (("upgrade", "head"), 5),
        (("upgrade", "heads"), 9),
        (("stamp", "heads"), 9),
        (("upgrade", "head"), 2**62),
    ):
        result = project.run_cli(*command, "--token", str(token), "--holder", HOLDER).check(0)
        assert result.stdout.splitlines() == idle_lines(command[0], "r02", token=str(token)), result
    assert timeline(project) == events
    assert lease(project)["fence_token"] == 5


# -- races ---------------------------------------------------------------------------------------


_PAUSE = """\
        import os, pathlib, time
        pause = os.environ.get('FM_TEST_PAUSE')
        if pause and not pathlib.Path(pause + '.done').exists():
            pathlib.Path(pause + '.done').touch()
            pathlib.Path(pause + '.inside').touch()
            while not pathlib.Path(pause + '.go').exists():
                time.sleep(0.05)
        with context.begin_transaction():
"""


def wait_for(path: Path, process: Process) -> None:
    """Wait until ``process`` creates ``path`` (failing if it exits first, or after 60 s)."""
    deadline = time.monotonic() + 60
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_work_that_appears_after_nothing_to_do_is_done_under_a_lease(tmp_path: Path, make_project: MakeProject) -> None:
    """Runner B finds nothing to do when env.py connects, then pauses before its transaction; runner
    C moves the database down meanwhile. B's transaction reads the heads again, finds work, plans
    again and does it under a lease of its own: exit 0, r02 applied by B."""
    path = tmp_path / "db.sqlite"
    project = make_project(url=sqlite_url(path))
    project.add_chain(2)
    project.edit_env("        with context.begin_transaction():\n", _PAUSE)
    project.run_cli("upgrade", "head", "--holder", HOLDER).check(0)
    pause = tmp_path / "b"
    runner_b = start_process(
        [*script_command("fencemigrate"), "upgrade", "head", "--holder", "agent-B", "--json"],
        project.path,
        {"FM_TEST_PAUSE": str(pause)},
    )
    try:
        wait_for(Path(f"{pause}.inside"), runner_b)
        project.run_cli("downgrade", "r01", "--holder", "agent-C").check(0)
        Path(f"{pause}.go").touch()
        stdout, stderr = runner_b.communicate(timeout=60)
    finally:
        runner_b.kill()
    assert runner_b.returncode == 0, stderr
    outcome = json.loads(stdout)
    assert (outcome["no_lease"], outcome["leased"], outcome["token"], outcome["heads"]) == (None, True, 3, ["r02"])
    assert [step["revisions"] for step in outcome["steps"]] == [["r02"]]
    assert [(kind, holder) for kind, holder, _, _ in sqlite_events(path)][-3:] == [
        ("GRANT", "agent-B"),
        ("APPLY", "agent-B"),
        ("RELEASE", "agent-B"),
    ]


# -- read commands never create a database --------------------------------------------------------


MISSING = (
    "no SQLite database at {path}: read commands never create one; check sqlalchemy.url (a fenced upgrade "
    "creates the file)"
)
CHECK_HINT = (  # check fails without its database, as alembic check does
    "; check compares the database and the models, as `alembic check` does, so it fails without them: "
    "to lint the revision files alone, give --no-db"
)


@pytest.mark.parametrize(
    "command",
    [
        ("state",),
        ("state", "--json"),
        ("timeline",),
        ("current",),
        ("current", "--json"),
        ("check", "--db"),
        ("history", "-i"),
    ],
    ids=lambda command: "-".join(command),
)
def test_read_commands_on_a_missing_sqlite_file_create_none(
    tmp_path: Path, make_project: MakeProject, command: tuple[str, ...]
) -> None:
    """Each read command on a SQLite URL whose file does not exist exits 1 with the error and leaves
    no file; plain `alembic current` creates the file (the control)."""
    path = tmp_path / "missing.sqlite"
    project = make_project(url=sqlite_url(path))
    project.add_chain(1)
    result = project.run_cli(*command).check(1)
    message = MISSING.format(path=path) + (CHECK_HINT if command[0] == "check" else "")
    if "--json" in command:
        assert json.loads(result.stdout) == {"status": "error", "message": message}
    else:
        assert stderr_lines(result.stderr) == ["fencemigrate: error: " + message]
    assert not path.exists()
    project.run_alembic("current").check(0)
    assert path.exists()


@pytest.mark.parametrize("command", [("heads",), ("history",), ("show", "r01")], ids=lambda command: command[0])
def test_commands_that_do_not_connect_create_no_file(
    tmp_path: Path, make_project: MakeProject, command: tuple[str, ...]
) -> None:
    """`heads`, `history` and `show` read the revision files only: exit 0, no database file."""
    path = tmp_path / "missing.sqlite"
    project = make_project(url=sqlite_url(path))
    project.add_chain(1)
    assert "r01" in project.run_cli(*command).check(0).stdout
    assert not path.exists()


# -- `fencemigrate init` -----------------------------------------------------------------------------


def tables(path: Path) -> list[str]:
    """The tables of a SQLite file, sorted."""
    with closing(sqlite3.connect(path)) as connection:
        return sorted(row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))


def init_project(directory: Path) -> Project:
    """`fencemigrate init migrations` in ``directory``, with revision r01; its default URL kept."""
    directory.mkdir()
    run_command(script_command("fencemigrate") + ["init", "migrations"], directory).check(0)
    project = Project(path=directory, url=sqlite_url(directory / "database.sqlite"), template="fencemigrate")
    project.add_chain(1)
    return project


def test_init_defaults_to_a_sqlite_file_that_works_out_of_the_box(tmp_path: Path) -> None:
    """The alembic.ini `fencemigrate init` writes points at a SQLite file next to it, and says fencing
    works on SQLite, PostgreSQL and MySQL/MariaDB: `fencemigrate upgrade head` works as written."""
    project = init_project(tmp_path / "new")
    ini = project.ini.read_text()
    assert "sqlalchemy.url = sqlite:///%(here)s/database.sqlite" in ini
    assert "Fencing works on\n# SQLite, PostgreSQL and MySQL/MariaDB" in ini
    assert "needs PostgreSQL" not in ini
    result = project.run_cli("upgrade", "head", "--holder", HOLDER).check(0)
    assert "  applied r01 under token 1" in result.stdout.splitlines()
    path = project.path / "database.sqlite"
    assert "t01" in tables(path) and sqlite_fence_installed(path)


def test_plain_alembic_with_a_token_on_a_fresh_sqlite_file_writes_nothing(
    tmp_path: Path, make_project: MakeProject
) -> None:
    """With a `fencemigrate init` env.py, plain `alembic -x fence_token=5 upgrade head` on a fresh
    SQLite file is refused (exit 1: pysqlite commits each statement on its own) before Alembic creates
    its version table; without a token, refused (exit 2) with nothing written either. The control:
    the generic env.py lets plain Alembic create the version table and the revision's table."""
    project = init_project(tmp_path / "fenced")
    path = project.path / "database.sqlite"
    result = project.run_alembic("-x", "fence_token=5", "upgrade", "head").check(1)
    assert stderr_lines(result.stderr) == [NOT_TRANSACTIONAL]
    assert tables(path) == []
    project.run_alembic("upgrade", "head").check(2)
    assert tables(path) == []
    control = make_project(url=sqlite_url(tmp_path / "control.sqlite"), name="control")
    shutil.copy(next(project.versions.glob("r01_*.py")), control.versions)
    control.run_alembic("-x", "fence_token=5", "upgrade", "head").check(0)
    assert tables(tmp_path / "control.sqlite") == ["alembic_version", "t01"]


def test_a_dirty_revision_is_never_nothing_to_do(mariadb_url: str, make_project: MakeProject) -> None:
    """Pre-check mode: a downgrade that failed midway leaves 0001 dirty with the version table still
    at head. `upgrade head` reads that before deciding there is nothing to do: DIRTY (exit 5), no
    lease taken (no GRANT), with or without --token."""
    project = make_project(url=mariadb_url)
    project.add_revision("0001", None, ["CREATE TABLE a (id int)"], ["DROP TABLE a", "DROP TABLE missing_table"])
    project.run_cli("upgrade", "head", "--token", "5", "--holder", HOLDER).check(0)
    project.run_cli("downgrade", "base", "--token", "5", "--holder", HOLDER).check(1)
    events = timeline(project)
    for token in ((), ("--token", "5")):
        result = project.run_cli("upgrade", "head", *token).check(5)
        assert stderr_lines(result.stderr)[0].startswith("DIRTY: revision 0001"), result
    assert timeline(project) == events
