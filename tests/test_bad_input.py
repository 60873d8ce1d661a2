"""Bad input: one clear line (or one JSON object), the right exit status, and no change to the database.

Every rejected case runs against one shared database where token 10 has applied revision
0001 (so the fence schema exists) and 0002 is pending. A snapshot of everything fencemigrate
could touch (tables of ``public`` and ``fencemigrate``, ``alembic_version``, ``agent_fence``
and ledger rows, timestamps included) is taken before each command and compared after it.
Inputs that are valid but unusual (the largest token, a resource name full of quotes) run on
their own fresh database so they cannot pollute the shared one.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.db import alembic_versions, execute, query, schema_names, table_exists, table_names
from support.in_process import run_in_process
from support.pg import PgServer
from support.project import Project, Result, create_project

MAX_TOKEN = 2**62  # leaves room for the next grant (issue 12)
HUGE = "1" + "0" * 400  # a number float() makes infinite
FENCE_SCHEMA = "fencemigrate"
DEFAULT_RESOURCE = "db/migrations"

#: Variables that would change what a command sees; removed unless a test sets them.
_CLEAN_ENV: dict[str, str | None] = {"FENCEMIGRATE_TOKEN": None, "ALEMBIC_CONFIG": None}

#: Alembic's own log lines (env.py's logging config: ``INFO  [alembic.runtime.migration] ...``).
_LOG_LINE = re.compile(r"^[A-Z]{4,8} +\[[\w.]+\] ")

_TOKEN_RANGE = re.escape(f"must be an integer from 1 to {MAX_TOKEN}")
_TOKEN_EMPTY = re.escape(
    "empty fencing token: pass --token N, or leave --token out (and FENCEMIGRATE_TOKEN unset) "
    "to have fencemigrate take a lease"
)


# -- helpers -----------------------------------------------------------------------------------


def cli(project: Project, *args: str, env: Mapping[str, str | None] | None = None) -> Result:
    """Run ``fencemigrate *args`` in the project, without inherited token or config variables."""
    return project.run_cli(*args, env={**_CLEAN_ENV, **(env or {})})


def message_lines(stderr: str) -> list[str]:
    """The non-empty stderr lines that are not Alembic's own log lines."""
    return [line for line in stderr.splitlines() if line.strip() and not _LOG_LINE.match(line)]


def snapshot(url: str, schema: str = FENCE_SCHEMA) -> dict[str, Any]:
    """Everything a fenced command could change, with timestamps (a re-claim bumps updated_at)."""
    installed = table_exists(url, "agent_fence", schema)
    return {
        "schemas": schema_names(url),
        "public_tables": table_names(url),
        "fence_tables": table_names(url, schema),
        "fence_functions": query(
            url,
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = %s ORDER BY 1",
            (schema,),
        ),
        "versions": alembic_versions(url),
        "fences": query(url, f'SELECT resource, token, updated_at FROM "{schema}".agent_fence ORDER BY 1')
        if installed
        else None,
        "ledger": query(url, f'SELECT * FROM "{schema}".applied_revision ORDER BY 1, 2') if installed else None,
    }


def fences(url: str) -> dict[str, int]:
    """resource -> token of every fence row."""
    return {row[0]: row[1] for row in query(url, "SELECT resource, token FROM fencemigrate.agent_fence")}


def ledger(url: str) -> dict[str, tuple[Any, ...]]:
    """revision -> (resource, applied_token, holder, method) of every ledger row."""
    rows = query(url, "SELECT revision, resource, applied_token, holder, method FROM fencemigrate.applied_revision")
    return {row[0]: tuple(row[1:]) for row in rows}


def add_revisions(project: Project) -> None:
    """0001 creates table t1, 0002 creates table t2."""
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.add_revision("0002", "0001", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")


def apply_0001_under_token_10(project: Project) -> None:
    """The starting state of every test here: token 10 applied 0001; 0002 is pending."""
    add_revisions(project)
    cli(project, "upgrade", "0001", "--token", "10", "--holder", "h10").check()
    assert alembic_versions(project.url) == ["0001"]
    assert fences(project.url) == {DEFAULT_RESOURCE: 10}


# -- the shared database ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Project]:
    """One project and database for all rejected inputs (they must not change it anyway)."""
    dbname = f"fm_bad_input_{os.getpid()}"
    admin = pg_server.url("postgres")
    execute(admin, f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    execute(admin, f'CREATE DATABASE "{dbname}"')
    try:
        project = create_project(tmp_path_factory.mktemp("bad_input"), pg_server.url(dbname))
        apply_0001_under_token_10(project)
        yield project
    finally:
        execute(admin, f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


@pytest.fixture(scope="module")
def baseline(shared: Project) -> dict[str, Any]:
    """The shared database's snapshot right after setup."""
    return snapshot(shared.url)


@pytest.fixture(scope="module")
def no_config_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory without alembic.ini or pyproject.toml."""
    return tmp_path_factory.mktemp("no_config")


# -- rejected inputs -------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A rejected command line: ``message`` is a regex for the text after ``fencemigrate: usage: ``."""

    args: tuple[str, ...]
    message: str
    status: int = 2
    env: dict[str, str | None] = field(default_factory=dict)
    in_dir_without_config: bool = False


def exact(text: str) -> str:
    """Regex matching exactly ``text``."""
    return re.escape(text)


def _invalid_token(value: str) -> str:
    return re.escape(f"invalid token {value!r}: ") + _TOKEN_RANGE


BAD_INPUT: dict[str, Case] = {
    # -- tokens
    **{
        f"upgrade-token-{name}": Case(("upgrade", "head", f"--token={value}"), _invalid_token(value))
        for name, value in [
            ("abc", "abc"),
            ("1.5", "1.5"),
            ("zero", "0"),
            ("negative", "-3"),
            ("2**63", str(2**63)),
            ("2**62+1", str(2**62 + 1)),
            ("hex", "0x10"),
            ("1e3", "1e3"),
            ("underscore", "1_000"),
            ("plus-sign", "+5"),
            ("arabic-indic-digits", "\u0661\u0662"),
        ]
    },
    "upgrade-token-empty": Case(("upgrade", "head", "--token="), _TOKEN_EMPTY),
    "upgrade-token-blank": Case(("upgrade", "head", "--token=   "), _TOKEN_EMPTY),
    "upgrade-token-env-blank": Case(("upgrade", "head"), _TOKEN_EMPTY, env={"FENCEMIGRATE_TOKEN": "  "}),
    "upgrade-token-env-abc": Case(("upgrade", "head"), _invalid_token("abc"), env={"FENCEMIGRATE_TOKEN": "abc"}),
    "upgrade-token-env-zero": Case(("upgrade", "head"), _invalid_token("0"), env={"FENCEMIGRATE_TOKEN": "0"}),
    "downgrade-token-abc": Case(("downgrade", "base", "--token=abc"), _invalid_token("abc")),
    "stamp-token-zero": Case(("stamp", "head", "--token=0"), _invalid_token("0")),
    "stamp-token-2**63": Case(("stamp", "head", f"--token={2**63}"), _invalid_token(str(2**63))),
    "reapply-token-negative": Case(("reapply", "0001", "--token=-3"), _invalid_token("-3")),
    # -- revisions
    **{
        f"{command}-unknown-revision": Case(
            (command, "nope", "--token=10"), exact("Can't locate revision identified by 'nope'")
        )
        for command in ("upgrade", "downgrade", "stamp", "reapply")
    },
    "stamp-second-revision-unknown": Case(
        ("stamp", "0002", "nope", "--token=10"), exact("Can't locate revision identified by 'nope'")
    ),
    "upgrade-sql-unknown-start": Case(
        ("upgrade", "nope:0002", "--sql", "--token=10"), exact("Can't locate revision identified by 'nope'")
    ),
    "reapply-not-applied": Case(
        ("reapply", "0002", "--token=10"), exact("cannot reapply 0002: it is not applied to this database")
    ),
    # -- resource and holder names
    "resource-empty": Case(("upgrade", "head", "--token=10", "--resource="), exact("resource name must not be empty")),
    "resource-blank": Case(
        ("upgrade", "head", "--token=10", "--resource=  \t "), exact("resource name must not be empty")
    ),
    "resource-256-chars": Case(
        ("upgrade", "head", "--token=10", "--resource=" + "r" * 256),
        exact("resource name is 256 characters long; the limit is 255"),
    ),
    "resource-newline": Case(
        ("upgrade", "head", "--token=10", "--resource=db/migrations\nDROP"),
        exact("resource name must not contain control characters"),
    ),
    "resource-escape-char": Case(
        ("stamp", "head", "--token=10", "--resource=a\x1bb"), exact("resource name must not contain control characters")
    ),
    "holder-empty": Case(("upgrade", "head", "--token=10", "--holder="), exact("holder name must not be empty")),
    "holder-newline": Case(
        ("upgrade", "head", "--token=10", "--holder=agent\nB"), exact("holder name must not contain control characters")
    ),
    # -- configuration
    "config-file-missing": Case(
        ("-c", "nope.ini", "upgrade", "head", "--token=10"), exact("config file 'nope.ini' does not exist")
    ),
    "config-env-file-missing": Case(
        ("upgrade", "head", "--token=10"),
        r"no Alembic configuration found: 'nope\.ini' does not exist.*",
        env={"ALEMBIC_CONFIG": "nope.ini"},
    ),
    "config-section-missing": Case(
        ("-n", "nosuch", "upgrade", "head", "--token=10"), exact("config file 'alembic.ini' has no [nosuch] section")
    ),
    "no-alembic-ini-here": Case(
        ("upgrade", "head", "--token=10"),
        exact("no Alembic configuration found: 'alembic.ini' does not exist (pass -c/--config, or set ALEMBIC_CONFIG)"),
        in_dir_without_config=True,
    ),
    # -- ranges
    "upgrade-range-without-sql": Case(
        ("upgrade", "0001:0002", "--token=10"),
        exact("a revision range (0001:0002) is only allowed with --sql for upgrade"),
    ),
    "downgrade-range-without-sql": Case(
        ("downgrade", "0002:0001", "--token=10"),
        exact("a revision range (0002:0001) is only allowed with --sql for downgrade"),
    ),
    "stamp-range-without-sql": Case(
        ("stamp", "0001:0002", "--token=10"),
        exact("a revision range (0001:0002) is only allowed with --sql for stamp"),
    ),
    "downgrade-sql-without-range": Case(
        ("downgrade", "base", "--sql", "--token=10"), exact("downgrade with --sql needs a range FROM:TO")
    ),
    # -- relative revisions that walk off the revision graph (before any lease is taken)
    "upgrade-past-head": Case(
        ("upgrade", "head+999"),
        exact(
            "relative revision 'head+999' goes past the end of the revision graph: there are not 999 "
            "revisions above head"
        ),
    ),
    "upgrade-past-head-token": Case(
        ("upgrade", "head+1", "--token=10"),
        exact(
            "relative revision 'head+1' goes past the end of the revision graph: there are not 1 revisions above head"
        ),
    ),
    "downgrade-past-base": Case(
        ("downgrade", "0001-5", "--token=10"),
        exact(
            "relative revision '0001-5' goes past the end of the revision graph: there are not 5 revisions below 0001"
        ),
    ),
    "upgrade-below-the-heads": Case(
        ("upgrade", "0001-1", "--token=10"),
        exact("'0001-1' is not above the current heads (0001): nothing to upgrade to (use downgrade to go down)"),
    ),
    # -- durations too long to be a number
    "timeline-since-huge": Case(
        ("timeline", "--since", HUGE + "h"),
        exact(f"invalid --since '{HUGE}h': at most 876000h (100 years) ago; give a date-time instead"),
    ),
    "upgrade-wait-huge": Case(
        ("upgrade", "head", "--wait", HUGE + "s"), exact(f"invalid --wait '{HUGE}s': at most 24h")
    ),
    "lease-acquire-ttl-huge": Case(
        ("lease", "acquire", "--holder", "x", "--ttl", HUGE),
        exact(
            f"invalid --ttl '{HUGE}': at most 24h; a lease is renewed while its holder makes progress, "
            "so pick a short TTL"
        ),
    ),
}


def _run_case(case: Case, shared: Project, no_config_dir: Path, as_json: bool) -> Result:
    args = case.args + (("--json",) if as_json else ())
    if case.in_dir_without_config:
        return run_in_process(no_config_dir, *args, env={**_CLEAN_ENV, **case.env})
    return cli(shared, *args, env=case.env)


@pytest.mark.parametrize("case", list(BAD_INPUT.values()), ids=list(BAD_INPUT))
def test_bad_input_is_one_line_and_changes_nothing(
    case: Case, shared: Project, baseline: dict[str, Any], no_config_dir: Path
) -> None:
    """Text mode: exit 2, nothing on stdout, exactly one `fencemigrate: usage:` line, database untouched."""
    before = snapshot(shared.url)
    assert before == baseline, "an earlier test changed the shared database"

    result = _run_case(case, shared, no_config_dir, as_json=False)

    assert result.code == case.status, result
    assert "Traceback" not in result.output, result
    assert result.stdout == "", result
    lines = message_lines(result.stderr)
    assert len(lines) == 1, result
    assert re.fullmatch("fencemigrate: usage: " + case.message, lines[0]), lines[0]
    assert snapshot(shared.url) == before


#: One case per kind of bad input is enough to show --json reports it the same way.
JSON_CASES = [
    "upgrade-token-abc",
    "upgrade-token-2**63",
    "upgrade-token-empty",
    "upgrade-token-env-abc",
    "stamp-token-zero",
    "downgrade-unknown-revision",
    "reapply-unknown-revision",
    "reapply-not-applied",
    "resource-newline",
    "resource-256-chars",
    "config-file-missing",
    "no-alembic-ini-here",
    "upgrade-range-without-sql",
    "downgrade-sql-without-range",
]


@pytest.mark.parametrize("case", [BAD_INPUT[name] for name in JSON_CASES], ids=JSON_CASES)
def test_bad_input_with_json_is_one_object(
    case: Case, shared: Project, baseline: dict[str, Any], no_config_dir: Path
) -> None:
    """--json: the same exit status, one {"status": "usage", "message"} object on stdout, nothing else."""
    before = snapshot(shared.url)
    assert before == baseline, "an earlier test changed the shared database"

    result = _run_case(case, shared, no_config_dir, as_json=True)

    assert result.code == case.status, result
    assert "Traceback" not in result.output, result
    assert message_lines(result.stderr) == [], result
    assert len(result.stdout.splitlines()) == 1, result
    payload = json.loads(result.stdout)
    assert set(payload) == {"status", "message"}
    assert payload["status"] == "usage"
    assert re.fullmatch(case.message, payload["message"]), payload
    assert snapshot(shared.url) == before


# -- valid but unusual input, each on a fresh database ----------------------------------------


@pytest.fixture
def started(project: Project) -> Project:
    """A fresh project where token 10 applied 0001 and 0002 is pending."""
    apply_0001_under_token_10(project)
    return project


def test_largest_token_is_accepted(started: Project) -> None:
    """2**62 is the largest token: it applies 0002, and the fence and ledger hold it exactly."""
    result = cli(started, "upgrade", "head", f"--token={MAX_TOKEN}", "--holder", "max", "--json").check()

    payload = json.loads(result.stdout)
    assert payload["token"] == MAX_TOKEN
    assert payload["steps"] == [
        {"revisions": ["0002"], "direction": "up", "action": "applied", "token": MAX_TOKEN, "atomic": True}
    ]
    assert alembic_versions(started.url) == ["0002"]
    assert fences(started.url) == {DEFAULT_RESOURCE: MAX_TOKEN}
    assert ledger(started.url)["0002"] == (DEFAULT_RESOURCE, MAX_TOKEN, "max", "upgrade")


def test_token_from_environment_when_option_missing(started: Project) -> None:
    """Without --token, FENCEMIGRATE_TOKEN is the token the run claims with."""
    result = cli(started, "upgrade", "head", "--holder", "env", env={"FENCEMIGRATE_TOKEN": "11"}).check()

    assert result.stdout.splitlines()[0] == "upgrade done: resource db/migrations, token 11, holder env"
    assert alembic_versions(started.url) == ["0002"]
    assert fences(started.url) == {DEFAULT_RESOURCE: 11}
    assert ledger(started.url)["0002"] == (DEFAULT_RESOURCE, 11, "env", "upgrade")


def test_token_option_wins_over_environment(started: Project) -> None:
    """An explicit --token is used even when FENCEMIGRATE_TOKEN holds garbage."""
    cli(started, "upgrade", "head", "--token", "12", "--holder", "opt", env={"FENCEMIGRATE_TOKEN": "abc"}).check()

    assert fences(started.url) == {DEFAULT_RESOURCE: 12}
    assert ledger(started.url)["0002"] == (DEFAULT_RESOURCE, 12, "opt", "upgrade")


@pytest.mark.parametrize(
    "resource",
    [
        pytest.param("o'brien\"; DROP TABLE x; --", id="quotes-and-semicolons"),
        pytest.param("r'); DELETE FROM fencemigrate.agent_fence; --", id="injection-into-fence"),
        pytest.param("\\x'\\'; SELECT 1 $$ $q$", id="backslashes-and-dollars"),
        pytest.param("ü" * 255, id="255-non-ascii-chars"),
    ],
)
def test_resource_name_is_stored_verbatim(started: Project, resource: str) -> None:
    """SQL is parameterised: any printable name up to 255 chars applies and is stored exactly as given."""
    execute(started.url, "CREATE TABLE x (id int)")

    cli(started, "upgrade", "head", "--token", "10", "--resource", resource, "--holder", resource[:40]).check()

    assert alembic_versions(started.url) == ["0002"]
    assert fences(started.url) == {DEFAULT_RESOURCE: 10, resource: 10}
    assert ledger(started.url)["0002"] == (resource, 10, resource[:40], "upgrade")
    assert table_names(started.url) == ["alembic_version", "t1", "t2", "x"]


# -- a database that cannot be reached ---------------------------------------------------------

PASSWORD = "s3cretpw"


@pytest.fixture(scope="module")
def unreachable(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A project whose sqlalchemy.url (with a password) points at a closed port."""
    project = create_project(
        tmp_path_factory.mktemp("unreachable"), f"postgresql+psycopg://bob:{PASSWORD}@127.0.0.1:1/x"
    )
    add_revisions(project)
    return project


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("upgrade", "head", "--token=10"), id="upgrade"),
        pytest.param(("upgrade", "head", "--token=10", "--json"), id="upgrade-json"),
        pytest.param(("downgrade", "base", "--token=10"), id="downgrade"),
        pytest.param(("downgrade", "base", "--token=10", "--json"), id="downgrade-json"),
        pytest.param(("stamp", "head", "--token=10", "--json"), id="stamp-json"),
        pytest.param(("reapply", "0001", "--token=10"), id="reapply"),
        pytest.param(("state",), id="state"),
        pytest.param(("state", "--json"), id="state-json"),
        pytest.param(("install",), id="install"),
        pytest.param(("current",), id="current"),
    ],
)
def test_unreachable_database_is_one_line_without_password(unreachable: Project, args: tuple[str, ...]) -> None:
    """Exit 1 with one `database error: connection failed` line (or JSON); the password is never printed."""
    as_json = "--json" in args
    result = cli(unreachable, *args)

    assert result.code == 1, result
    assert PASSWORD not in result.output, result
    assert "Traceback" not in result.output, result
    if as_json:
        assert message_lines(result.stderr) == [], result
        payload = json.loads(result.stdout)
        assert set(payload) == {"status", "message"} and payload["status"] == "error", payload
        message = payload["message"]
    else:
        assert result.stdout == "", result
        lines = message_lines(result.stderr)
        assert len(lines) == 1, result
        assert lines[0].startswith("fencemigrate: error: "), result
        message = lines[0].removeprefix("fencemigrate: error: ")
    assert message.startswith("database error: connection failed"), message
    assert "127.0.0.1" in message and "port 1" in message, message


@pytest.mark.parametrize(
    "url",
    [
        pytest.param(f"postgresql+psycopg://bob@127.0.0.1:1/x?password={PASSWORD}", id="password-in-query"),
        pytest.param(f"postgresql+psycopg://bob:{PASSWORD}@127.0.0.1:notaport/x", id="unparseable-port"),
    ],
)
def test_other_bad_urls_hide_the_password(tmp_path: Path, url: str) -> None:
    """A password in the query string, or a URL SQLAlchemy cannot use: exit 1, one line, no password."""
    project = create_project(tmp_path / "badurl", url)
    add_revisions(project)

    for json_flag in ((), ("--json",)):
        result = cli(project, "upgrade", "head", "--token=10", *json_flag)
        assert result.code == 1, result
        assert PASSWORD not in result.output, result
        assert "Traceback" not in result.output, result
        if json_flag:
            assert json.loads(result.stdout)["status"] == "error", result
        else:
            lines = message_lines(result.stderr)
            assert len(lines) == 1 and lines[0].startswith("fencemigrate: error: "), result


@pytest.mark.parametrize(
    ("scheme", "suggestion"),
    [("postgres", "postgresql+psycopg"), ("postgres+psycopg", "postgresql+psycopg")],
)
@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("upgrade", "head", "--token=10"), id="upgrade"),
        pytest.param(("state",), id="state"),
        pytest.param(("current",), id="current"),
        pytest.param(("lease", "status"), id="lease-status"),
    ],
)
def test_postgres_scheme_is_bad_config(tmp_path: Path, scheme: str, suggestion: str, args: tuple[str, ...]) -> None:
    """``postgres://`` (which SQLAlchemy dropped): bad config, exit 2, one line naming the spelling to
    use, no password, in text and JSON."""
    project = create_project(tmp_path / "scheme", f"{scheme}://bob:{PASSWORD}@127.0.0.1:1/x")
    add_revisions(project)
    message = (
        f"bad database URL: SQLAlchemy has no dialect {scheme}:// (it dropped the postgres spelling in 1.4); "
        f"write {suggestion}:// instead"
    )

    result = cli(project, *args)
    assert result.code == 2, result
    assert result.stdout == "" and message_lines(result.stderr) == [f"fencemigrate: usage: {message}"], result
    result = cli(project, *args, "--json")
    assert result.code == 2, result
    assert json.loads(result.stdout) == {"status": "usage", "message": message}, result
    assert PASSWORD not in result.output, result
