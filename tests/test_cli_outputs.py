"""Exact outputs and exit statuses of successful commands, and the Python API mirroring them.

Every rejection shown here (a stale stamp, a stale downgrade on another resource, a stale
downgrade through the API) is paired with a control: plain ``alembic`` lets the same stale
write through, so the test would fail if fencemigrate stopped fencing.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from collections.abc import Iterator, Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.db import alembic_versions, execute, query, schema_names, table_names
from support.fence_rows import FENCE_TABLES
from support.in_process import run_in_process
from support.pg import PgServer
from support.project import MakeProject, Project, Result, create_project, run_command, script_command

import fencemigrate
from fencemigrate import Fenced, UsageError, load_config
from fencemigrate.dialects import dialect_for

PG_VERSION = dialect_for("postgresql").schema_version()

DEFAULT_RESOURCE = "db/migrations"

_CLEAN_ENV: dict[str, str | None] = {"FENCEMIGRATE_TOKEN": None, "ALEMBIC_CONFIG": None}
_LOG_LINE = re.compile(r"^[A-Z]{4,8} +\[[\w.]+\] ")

RUN_KEYS = {
    "status",
    "command",
    "resource",
    "token",
    "holder",
    "offline",
    "steps",
    "heads",
    "installed_fence_schema",
    "leased",
    "lease_renewals",
    "lease_note",
    "no_lease",
    "forced_single_transaction",
    "mode",
    "adopted",
}
STATE_KEYS = {
    "status",
    "version_table",
    "heads",
    "fence_schema_version",
    "fences",
    "ledger",
    "dirty",
    "autocommit_leftovers",
    "ledger_above_fence",
    "fence_below_lease",
    "implausible_leases",
    "unexplained_tokens",
    "fence_schema_problems",
    "tokenless_writes",
    "unrecorded",
}
FENCE_ROW_KEYS = {"resource", "token", "updated_at", "token_source", "incarnation", "replication"}
LEDGER_ROW_KEYS = {
    "revision",
    "resource",
    "applied_token",
    "holder",
    "method",
    "applied_at",
    "script_sha256",
    "state",
}


# -- helpers -----------------------------------------------------------------------------------


def cli(project: Project, *args: str, env: Mapping[str, str | None] | None = None, in_process: bool = False) -> Result:
    """Run ``fencemigrate *args`` in the project, without inherited token or config variables
    (``in_process``: inside this process, for tests of what a command prints)."""
    environment = {**_CLEAN_ENV, **(env or {})}
    if in_process:
        return run_in_process(project.path, *args, env=environment)
    return project.run_cli(*args, env=environment)


def cli_json(project: Project, *args: str, code: int = 0, in_process: bool = False) -> dict[str, Any]:
    """Run ``fencemigrate *args --json``, check the exit status, return the one JSON object printed."""
    result = cli(project, *args, "--json", in_process=in_process).check(code)
    assert len(result.stdout.splitlines()) == 1, result
    payload = json.loads(result.stdout)
    assert isinstance(payload, dict)
    return payload


def message_lines(stderr: str) -> list[str]:
    """The non-empty stderr lines that are not Alembic's own log lines."""
    return [line for line in stderr.splitlines() if line.strip() and not _LOG_LINE.match(line)]


def fenced_lines(resource: str, token: int, fence_token: int) -> list[str]:
    """The agent message of a stale-token rejection."""
    return [
        f"FENCED: you no longer own {resource}.",
        f"Your lease token ({token}) is older than token {fence_token}, which has since written to this resource.",
        "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply.",
        "Your plan and your memory of this resource are probably stale, including anything",
        "your context summary says you 'hold'.",
        "Next step: run `fencemigrate state` and re-plan from what is actually there.",
        "If your goal is already met by the current state, report that and stop.",
    ]


def fences(url: str, schema: str = "fencemigrate") -> dict[str, int]:
    """resource -> token of every fence row."""
    return {row[0]: row[1] for row in query(url, f'SELECT resource, token FROM "{schema}".agent_fence')}


def ledger(url: str, schema: str = "fencemigrate") -> dict[str, tuple[Any, ...]]:
    """revision -> (resource, applied_token, holder, method) of every ledger row."""
    rows = query(url, f'SELECT revision, resource, applied_token, holder, method FROM "{schema}".applied_revision')
    return {row[0]: tuple(row[1:]) for row in rows}


def add_revisions(project: Project, count: int = 2) -> None:
    """Revisions 0001..000<count>, each creating table t<n>."""
    for n in range(1, count + 1):
        down = None if n == 1 else f"{n - 1:04d}"
        project.add_revision(f"{n:04d}", down, f"CREATE TABLE t{n} (id int)", f"DROP TABLE t{n}", slug=f"t{n}")


def sha256_of(path: Path) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def two(project: Project) -> Project:
    """A fresh project with revisions 0001 and 0002 and nothing applied."""
    add_revisions(project)
    return project


# -- upgrade and downgrade ---------------------------------------------------------------------


def test_upgrade_text_output(two: Project) -> None:
    """Exact summary lines on stdout; `installed the fence schema` only on the first run."""
    result = cli(two, "upgrade", "head", "--token", "7", "--holder", "h1").check()
    assert result.stdout == (
        "upgrade done: resource db/migrations, token 7, holder h1\n"
        "  installed the fence schema\n"
        "  applied 0001 under token 7\n"
        "  applied 0002 under token 7\n"
        "  heads now: 0002\n"
    )
    assert message_lines(result.stderr) == ["upgrade 0001 (1/2) under token 7", "upgrade 0002 (2/2) under token 7"]

    add_revisions(two, 3)
    result = cli(two, "upgrade", "head", "--token", "7", "--holder", "h1").check()
    assert result.stdout == (
        "upgrade done: resource db/migrations, token 7, holder h1\n  applied 0003 under token 7\n  heads now: 0003\n"
    )
    assert message_lines(result.stderr) == ["upgrade 0003 (1/1) under token 7"], result
    assert alembic_versions(two.url) == ["0003"]

    result = cli(two, "upgrade", "head", "--token", "7", "--holder", "h1").check()
    assert result.stdout.splitlines() == [
        "upgrade done: resource db/migrations, token 7, holder h1",
        "  nothing to do",
        "  heads now: 0003",
    ]


def test_upgrade_json_output(two: Project) -> None:
    """--json prints one object with exactly the documented keys and values."""
    payload = cli_json(two, "upgrade", "0001", "--token", "7", "--holder", "h1")
    assert set(payload) == RUN_KEYS
    assert payload == {
        "status": "ok",
        "command": "upgrade",
        "resource": DEFAULT_RESOURCE,
        "token": 7,
        "holder": "h1",
        "offline": False,
        "steps": [{"revisions": ["0001"], "direction": "up", "action": "applied", "token": 7, "atomic": True}],
        "heads": ["0001"],
        "installed_fence_schema": True,
        "leased": False,
        "lease_renewals": 0,
        "lease_note": None,
        "no_lease": None,
        "forced_single_transaction": False,
        "mode": "transactional",
        "adopted": None,
    }

    payload = cli_json(two, "upgrade", "head", "--token", "8", "--holder", "h2")
    assert payload["installed_fence_schema"] is False
    assert payload["steps"] == [
        {"revisions": ["0002"], "direction": "up", "action": "applied", "token": 8, "atomic": True}
    ]
    assert payload["heads"] == ["0002"]
    assert ledger(two.url) == {
        "0001": (DEFAULT_RESOURCE, 7, "h1", "upgrade"),
        "0002": (DEFAULT_RESOURCE, 8, "h2", "upgrade"),
    }


def test_upgrade_holder_defaults_to_host_and_pid(two: Project) -> None:
    """Without --holder the holder is `host:pid` of the fencemigrate process."""
    payload = cli_json(two, "upgrade", "head", "--token", "7")
    host, _, pid = payload["holder"].rpartition(":")
    assert host == socket.gethostname() and pid.isdigit()
    assert ledger(two.url)["0001"][2] == payload["holder"]


def test_downgrade_text_and_json_output(two: Project) -> None:
    """downgrade reports `rolled back` steps; the ledger rows go and the fence keeps the newest token."""
    cli(two, "upgrade", "head", "--token", "7", "--holder", "h1").check()

    result = cli(two, "downgrade", "0001", "--token", "8", "--holder", "h2").check()
    assert result.stdout == (
        "downgrade done: resource db/migrations, token 8, holder h2\n"
        "  rolled back 0002 under token 8\n"
        "  heads now: 0001\n"
    )
    assert message_lines(result.stderr) == ["downgrade 0002 (1/1) under token 8"], result
    assert ledger(two.url) == {"0001": (DEFAULT_RESOURCE, 7, "h1", "upgrade")}

    payload = cli_json(two, "downgrade", "base", "--token", "8", "--holder", "h2")
    assert payload == {
        "status": "ok",
        "command": "downgrade",
        "resource": DEFAULT_RESOURCE,
        "token": 8,
        "holder": "h2",
        "offline": False,
        "steps": [{"revisions": ["0001"], "direction": "down", "action": "rolled back", "token": 8, "atomic": True}],
        "heads": [],
        "installed_fence_schema": False,
        "leased": False,
        "lease_renewals": 0,
        "lease_note": None,
        "no_lease": None,
        "forced_single_transaction": False,
        "mode": "transactional",
        "adopted": None,
    }
    assert alembic_versions(two.url) == []
    assert table_names(two.url) == ["alembic_version"]
    assert ledger(two.url) == {}
    assert fences(two.url) == {DEFAULT_RESOURCE: 8}


# -- stamp ---------------------------------------------------------------------------------------


def test_stale_stamp_is_fenced_and_plain_alembic_is_not(two: Project) -> None:
    """A stamp under a stale token exits 3 and leaves alembic_version alone; plain `alembic stamp` moves it."""
    cli(two, "upgrade", "0001", "--token", "7", "--holder", "old").check()
    cli(two, "upgrade", "head", "--token", "8", "--holder", "new").check()
    before = (alembic_versions(two.url), ledger(two.url), fences(two.url))

    result = cli(two, "stamp", "0001", "--token", "7", "--holder", "old").check(3)
    assert result.stdout == ""
    assert message_lines(result.stderr) == fenced_lines(DEFAULT_RESOURCE, 7, 8)
    assert (alembic_versions(two.url), ledger(two.url), fences(two.url)) == before

    payload = cli_json(two, "stamp", "0001", "--token", "7", "--holder", "old", code=3)
    assert payload == {
        "status": "fenced",
        "resource": DEFAULT_RESOURCE,
        "token": 7,
        "fence_token": 8,
        "reason": "token 8 has since written to db/migrations",
        "autocommitted": [],
        "message": "\n".join(fenced_lines(DEFAULT_RESOURCE, 7, 8)),
    }
    assert (alembic_versions(two.url), ledger(two.url), fences(two.url)) == before

    # Control: nothing stops plain alembic from making the same stale write.
    two.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    two.run_alembic("stamp", "0001").check()
    assert alembic_versions(two.url) == ["0001"]


def test_stamp_writes_and_removes_ledger_rows(two: Project) -> None:
    """A valid stamp records method 'stamp' (never over a real upgrade row); `stamp base` removes the rows."""
    cli(two, "upgrade", "0001", "--token", "5", "--holder", "u").check()

    result = cli(two, "stamp", "head", "--token", "6", "--holder", "s").check()
    assert result.stdout == (
        "stamp done: resource db/migrations, token 6, holder s\n  stamped 0002 under token 6\n  heads now: 0002\n"
    )
    assert alembic_versions(two.url) == ["0002"]
    assert table_names(two.url) == ["alembic_version", "t1"]  # 0002 did not run
    assert ledger(two.url) == {
        "0001": (DEFAULT_RESOURCE, 5, "u", "upgrade"),
        "0002": (DEFAULT_RESOURCE, 6, "s", "stamp"),
    }

    payload = cli_json(two, "stamp", "base", "--token", "6", "--holder", "s")
    assert payload["command"] == "stamp" and payload["heads"] == []
    assert [(sorted(step["revisions"]), step["direction"], step["token"]) for step in payload["steps"]] == [
        (["0001", "0002"], "down", 6)  # unstamped
    ]
    assert alembic_versions(two.url) == []
    assert ledger(two.url) == {}
    assert table_names(two.url) == ["alembic_version", "t1"]

    cli(two, "stamp", "head", "--token", "6", "--holder", "s2").check()
    assert ledger(two.url) == {
        "0001": (DEFAULT_RESOURCE, 6, "s2", "stamp"),
        "0002": (DEFAULT_RESOURCE, 6, "s2", "stamp"),
    }
    assert fences(two.url) == {DEFAULT_RESOURCE: 6}


# -- state -----------------------------------------------------------------------------------------


def test_state_before_any_fenced_run(two: Project) -> None:
    """After a plain alembic upgrade, state shows the heads and says the fence schema is not installed."""
    two.run_alembic("upgrade", "head").check()

    result = cli(two, "state", in_process=True).check()
    assert result.stdout == "heads: 0002\nfence schema: not installed (no fenced run has written here yet)\n"
    assert cli_json(two, "state", in_process=True) == {
        "status": "ok",
        "version_table": "alembic_version",
        "heads": ["0002"],
        "fence_schema_version": None,
        "fences": [],
        "ledger": [],
        "dirty": [],
        "autocommit_leftovers": [],
        "ledger_above_fence": [],
        "fence_below_lease": [],
        "implausible_leases": [],
        "unexplained_tokens": [],
        "fence_schema_problems": [],
        "tokenless_writes": None,
        "unrecorded": {"version_table_only": [], "ledger_only": []},
    }
    assert "fencemigrate" not in schema_names(two.url)


def test_state_on_empty_database(two: Project) -> None:
    """On a database nothing ran on, state reports no heads and creates nothing."""
    assert cli(two, "state", in_process=True).check().stdout.splitlines()[0] == "heads: (none)"
    assert cli_json(two, "state", in_process=True)["heads"] == []
    assert table_names(two.url) == [] and schema_names(two.url) == ["public"]


def test_state_after_runs(two: Project) -> None:
    """state --json has the documented keys and the database's values; the text is the same data."""
    cli(two, "upgrade", "0001", "--token", "7", "--holder", "h1").check()
    cli(two, "upgrade", "head", "--token", "8", "--holder", "h2").check()

    payload = cli_json(two, "state", in_process=True)
    assert set(payload) == STATE_KEYS
    (updated_at,) = query(two.url, "SELECT updated_at FROM fencemigrate.agent_fence")[0]
    applied = dict(query(two.url, "SELECT revision, applied_at FROM fencemigrate.applied_revision"))
    sha = {rev: sha256_of(next(two.versions.glob(f"{rev}_*.py"))) for rev in ("0001", "0002")}
    assert payload == {
        "status": "ok",
        "version_table": "alembic_version",
        "heads": ["0002"],
        "fence_schema_version": PG_VERSION,
        "fences": [
            {
                "resource": DEFAULT_RESOURCE,
                "token": 8,
                "updated_at": updated_at.isoformat(),
                "token_source": "external",
                "incarnation": None,
                "replication": None,
            }
        ],
        "ledger": [
            {
                "revision": rev,
                "resource": DEFAULT_RESOURCE,
                "applied_token": token,
                "holder": holder,
                "method": "upgrade",
                "applied_at": applied[rev].isoformat(),
                "script_sha256": sha[rev],
                "state": "applied",
            }
            for rev, token, holder in [("0001", 7, "h1"), ("0002", 8, "h2")]
        ],
        "dirty": [],
        "autocommit_leftovers": [],
        "ledger_above_fence": [],
        "fence_below_lease": [],
        "implausible_leases": [],
        "unexplained_tokens": [],
        "fence_schema_problems": [],
        "tokenless_writes": {"status": "refused", "allowed_at": None},
        "unrecorded": {"version_table_only": [], "ledger_only": []},
    }
    assert all(set(row) == FENCE_ROW_KEYS for row in payload["fences"])
    assert all(set(row) == LEDGER_ROW_KEYS for row in payload["ledger"])

    result = cli(two, "state", in_process=True).check()
    assert result.stdout.splitlines() == [
        "heads: 0002",
        f"fence schema: {PG_VERSION}",
        "fences:",
        f"  db/migrations  token=8  since {updated_at.isoformat()}  tokens from external",
        "ledger (alembic_version):",
        f"  0001  applied_token=7  holder=h1  upgrade at {applied['0001'].isoformat()}",
        f"  0002  applied_token=8  holder=h2  upgrade at {applied['0002'].isoformat()}",
    ]


# -- install ----------------------------------------------------------------------------------------


def test_install_then_already_installed(two: Project) -> None:
    """`install` creates the fence schema and Alembic's version table, empty and guarded (so that
    plain Alembic's first write is refused too); a second run says so."""
    assert cli(two, "install").check().stdout == "installed\n"
    assert table_names(two.url, "fencemigrate") == FENCE_TABLES
    assert alembic_versions(two.url) == []
    assert cli(two, "install").check().stdout == "already installed\n"

    result = cli(two, "upgrade", "head", "--token", "1", "--holder", "h").check()
    assert "installed the fence schema" not in result.stdout


def test_install_sql_prints_a_complete_script(two: Project) -> None:
    """`install --sql` prints the install script (no psql \\echo guard) without touching the database;
    running that script by hand is a full install."""
    result = cli(two, "install", "--sql").check()
    script = result.stdout
    assert re.search(r'CREATE TABLE (?:"fencemigrate"|fencemigrate)\.agent_fence\b', script), script[:500]
    assert not [line for line in script.splitlines() if line.lstrip().startswith("\\echo")]
    assert "@extschema@" not in script
    assert "fencemigrate" not in schema_names(two.url)

    execute(two.url, script)
    assert table_names(two.url, "fencemigrate") == FENCE_TABLES
    assert cli(two, "install").check().stdout == "already installed\n"
    cli(two, "upgrade", "head", "--token", "1", "--holder", "h").check()
    assert fences(two.url) == {DEFAULT_RESOURCE: 1}


def test_fence_schema_option_moves_the_fence_tables(two: Project) -> None:
    """`fencemigrate_schema = other_schema` in alembic.ini puts every fence table there."""
    two.set_ini_option("fencemigrate_schema", "other_schema")

    result = cli(two, "upgrade", "head", "--token", "7", "--holder", "h1").check()
    assert "  installed the fence schema" in result.stdout.splitlines()
    assert table_names(two.url, "other_schema") == FENCE_TABLES
    assert "fencemigrate" not in schema_names(two.url)
    assert fences(two.url, "other_schema") == {DEFAULT_RESOURCE: 7}
    assert ledger(two.url, "other_schema")["0002"] == (DEFAULT_RESOURCE, 7, "h1", "upgrade")

    state = cli_json(two, "state")
    assert state["fence_schema_version"] == PG_VERSION
    assert [row["token"] for row in state["fences"]] == [7]
    assert "other_schema.agent_fence" in cli(two, "install", "--sql").check().stdout
    assert cli(two, "install").check().stdout == "already installed\n"


# -- resources -------------------------------------------------------------------------------------


def test_resources_are_fenced_independently(two: Project) -> None:
    """--resource gets its own fence row: a low token there is fine, a lower one there is FENCED
    (plain alembic makes the same stale write)."""
    cli(two, "upgrade", "0001", "--token", "50", "--holder", "a").check()

    result = cli(two, "upgrade", "head", "--token", "3", "--holder", "b", "--resource", "other/res").check()
    assert result.stdout.splitlines()[0] == "upgrade done: resource other/res, token 3, holder b"
    assert fences(two.url) == {DEFAULT_RESOURCE: 50, "other/res": 3}
    assert ledger(two.url)["0002"] == ("other/res", 3, "b", "upgrade")

    result = cli(two, "downgrade", "0001", "--token", "2", "--resource", "other/res").check(3)
    assert message_lines(result.stderr) == fenced_lines("other/res", 2, 3)
    assert alembic_versions(two.url) == ["0002"]
    assert fences(two.url) == {DEFAULT_RESOURCE: 50, "other/res": 3}

    # Control: plain alembic performs the stale downgrade.
    two.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    two.run_alembic("downgrade", "0001").check()
    assert alembic_versions(two.url) == ["0001"]


def test_resource_from_ini_option(two: Project) -> None:
    """`fencemigrate_resource` in alembic.ini replaces the default resource; --resource still wins."""
    two.set_ini_option("fencemigrate_resource", "ini/res")
    assert cli_json(two, "upgrade", "0001", "--token", "4")["resource"] == "ini/res"
    assert cli_json(two, "upgrade", "head", "--token", "4", "--resource", "cli/res")["resource"] == "cli/res"
    assert fences(two.url) == {"ini/res": 4, "cli/res": 4}


# -- Alembic's read-only commands ------------------------------------------------------------------


@pytest.fixture(scope="module")
def readonly(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    """One project (0001 applied under a fence, 0002 pending) shared by the read-only command tests."""
    dbname = f"fm_cli_outputs_{os.getpid()}"
    admin = pg_server.url("postgres")
    execute(admin, f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    execute(admin, f'CREATE DATABASE "{dbname}"')
    try:
        project = create_project(tmp_path_factory.mktemp("readonly"), pg_server.url(dbname))
        add_revisions(project)
        cli(project, "upgrade", "0001", "--token", "1").check()
        yield project
    finally:
        execute(admin, f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


@pytest.mark.parametrize(
    "args",
    [
        ("current",),
        ("current", "-v"),
        ("heads",),
        ("heads", "-v"),
        ("history",),
        ("history", "-v"),
        ("history", "-r", "0001:0002"),
        ("show", "0002"),
        ("show", "head"),
    ],
    ids=" ".join,
)
def test_alembic_commands_print_what_alembic_prints(readonly: Project, args: tuple[str, ...]) -> None:
    """current/heads/history/show: same exit status and stdout as plain alembic."""
    ours = cli(readonly, *args)
    theirs = readonly.run_alembic(*args)
    assert theirs.code == 0, theirs
    assert ours.code == 0, ours
    assert theirs.stdout.strip(), theirs
    assert ours.stdout == theirs.stdout


# -- version, help, unknown command ----------------------------------------------------------------


def _bare(tmp_path: Path, *args: str) -> Result:
    return run_command(script_command("fencemigrate") + list(args), tmp_path, _CLEAN_ENV)


def _bare_in_process(tmp_path: Path, *args: str) -> Result:
    return run_in_process(tmp_path, *args, env=_CLEAN_ENV)


def test_version(tmp_path: Path) -> None:
    """--version prints the installed distribution's version and the Alembic version it runs, and exits 0."""
    result = _bare_in_process(tmp_path, "--version").check()
    assert result.stdout == f"fencemigrate, version {version('fencemigrate')} (Alembic {version('alembic')})\n"


def test_quiet_help_says_where_alembic_log_lines_come_from(tmp_path: Path) -> None:
    """-q's help: Alembic's log lines come from env.py's logging and stay, as with alembic -q."""
    help_text = " ".join(_bare_in_process(tmp_path, "--help").check().stdout.split())
    assert (
        "-q, --quiet No progress on stderr and none of Alembic's own output; results and errors are still "
        "printed. Alembic's log lines (INFO ... Running upgrade) come from env.py's logging config and stay, "
        "as with alembic -q."
    ) in help_text


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_every_command(tmp_path: Path, flag: str) -> None:
    """--help / -h exit 0 and list every command."""
    result = _bare_in_process(tmp_path, flag).check()
    assert result.stdout.startswith("Usage: fencemigrate")
    for command in (
        "upgrade",
        "downgrade",
        "reapply",
        "stamp",
        "state",
        "install",
        "init",
        "current",
        "heads",
        "history",
        "show",
        "lease",
        "timeline",
    ):
        assert re.search(rf"^\s+{command}\b", result.stdout, re.MULTILINE), command


def test_command_help_documents_token(tmp_path: Path) -> None:
    """`upgrade --help` exits 0 and documents --token and its environment variable."""
    result = _bare_in_process(tmp_path, "upgrade", "--help").check()
    assert "--token" in result.stdout and "FENCEMIGRATE_TOKEN" in result.stdout


def test_unknown_command_is_usage_error(tmp_path: Path) -> None:
    """An unknown command exits 2 with click's message and no traceback."""
    result = _bare(tmp_path, "bogus").check(2)
    assert "No such command 'bogus'" in result.stderr
    assert "Traceback" not in result.output


# -- the Python API --------------------------------------------------------------------------------


@pytest.fixture
def second_database(pg_server: PgServer, pg_conn: psycopg.Connection[Any], pg_dbname: str) -> Iterator[str]:
    """URL of a second fresh database, dropped afterwards."""
    name = f"{pg_dbname}_second"
    pg_conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield pg_server.url(name)
    finally:
        pg_conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_api_upgrade_matches_cli_json(make_project: MakeProject, second_database: str) -> None:
    """fencemigrate.upgrade(...).as_json() is what `upgrade --json` prints for the same run (holder aside);
    fencemigrate.state(...).as_json() is what `state --json` prints."""
    api_project = make_project(name="api")
    cli_project = make_project(url=second_database, name="cli")
    add_revisions(api_project)
    add_revisions(cli_project)

    printed = cli_json(cli_project, "upgrade", "head", "--token", "3")
    outcome = fencemigrate.upgrade(load_config([str(api_project.ini)]), "head", token=3)
    returned = outcome.as_json()

    assert returned["holder"] == f"{socket.gethostname()}:{os.getpid()}"
    assert {k: v for k, v in returned.items() if k != "holder"} == {k: v for k, v in printed.items() if k != "holder"}
    assert returned["steps"] == [
        {"revisions": [rev], "direction": "up", "action": "applied", "token": 3, "atomic": True}
        for rev in ("0001", "0002")
    ]
    assert alembic_versions(api_project.url) == ["0002"]
    assert fences(api_project.url) == {DEFAULT_RESOURCE: 3}

    state = fencemigrate.state(load_config([str(api_project.ini)])).as_json()
    assert state == cli_json(api_project, "state")


def test_api_raises_fenced_for_stale_token(two: Project) -> None:
    """A stale token raises Fenced (exit_status 3, token, fence_token, reason); plain alembic lets it through."""
    cli(two, "upgrade", "0001", "--token", "5").check()
    cli(two, "upgrade", "head", "--token", "8").check()

    with pytest.raises(Fenced) as caught:
        fencemigrate.downgrade(load_config([str(two.ini)]), "0001", token=5, holder="stale")
    error = caught.value
    assert error.exit_status == 3
    assert (error.resource, error.token, error.fence_token) == (DEFAULT_RESOURCE, 5, 8)
    assert error.reason == "token 8 has since written to db/migrations"
    assert str(error).splitlines() == fenced_lines(DEFAULT_RESOURCE, 5, 8)
    assert alembic_versions(two.url) == ["0002"]
    assert table_names(two.url) == ["alembic_version", "t1", "t2"]

    # Control: plain alembic performs the stale downgrade.
    two.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    two.run_alembic("downgrade", "0001").check()
    assert alembic_versions(two.url) == ["0001"]


@pytest.mark.parametrize(
    "token",
    ["abc", "", "1.5", "0", 0, -1, 2**63, 2**62 + 1, True, 1.5, 7.0],
    ids=repr,
)
def test_api_rejects_bad_token(two: Project, token: Any) -> None:
    """A bad token raises UsageError (exit_status 2) before the database is touched."""
    with pytest.raises(UsageError) as caught:
        fencemigrate.upgrade(load_config([str(two.ini)]), "head", token=token)
    assert caught.value.exit_status == 2
    assert "token" in str(caught.value)
    assert alembic_versions(two.url) is None
    assert schema_names(two.url) == ["public"]
