"""One class per SQLSTATE fencemigrate's SQL raises, found by one lookup; one rendering for both entry points.

The SQL files are read for every ``ERRCODE = 'FM...'`` and ``SIGNAL SQLSTATE 'FM...'``: a new code
without its class fails here. Each code is raised for real on PostgreSQL and mapped by its SQLSTATE
(psycopg has no class of its own for them); on MySQL and SQLite, whose drivers do not report it, by
how its messages start. The monotonic guard (FM002) is a fencing refusal: a revision that lowers the
fence token exits 3 with the FENCED guidance (the control: without the guard trigger, the same
revision lowers the fence). ``fencemigrate`` and plain ``alembic`` through the fence-aware env.py
print the same words for the same error.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.db import alembic_versions, execute, query
from support.in_process import run_in_process
from support.mysql_server import mysql_rows
from support.project import Project, Result

from fencemigrate.dialects import dialect_for
from fencemigrate.dialects.statements import sections
from fencemigrate.errors import (
    Fenced,
    FencemigrateError,
    MonotonicGuardRefused,
    Refusal,
    from_database_error,
    lookup,
    refusal_of,
    sqlstate_of,
)

REPO = Path(__file__).resolve().parent.parent
SQL_FILES = sorted((REPO / "sql").rglob("*.sql"))
RAISED = re.compile(r"(?:ERRCODE\s*=\s*|SIGNAL\s+SQLSTATE\s+)'(FM\d{3})'")
MYSQL_SIGNAL = re.compile(r"SIGNAL\s+SQLSTATE\s+'(FM\d{3})'\s+SET\s+MESSAGE_TEXT\s*=\s*'([^']*)'")
SQLITE_RAISE = re.compile(r"RAISE\(ABORT,\s*'([^']*)'\)")
RESOURCE = "db/migrations"
LOWER = "UPDATE fencemigrate.agent_fence SET token = 1"
_LOG_LINE = re.compile(r"^[A-Z]{4,8} +\[[\w.]+\] ")
STALE_PLAN = [
    "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply.",
    "Your plan and your memory of this resource are probably stale, including anything",
    "your context summary says you 'hold'.",
    "Next step: run `fencemigrate state` and re-plan from what is actually there.",
    "If your goal is already met by the current state, report that and stop.",
]


def raised_codes() -> set[str]:
    """Every SQLSTATE the SQL files raise with ``RAISE ... ERRCODE`` or ``SIGNAL SQLSTATE``."""
    return {code for path in SQL_FILES for code in RAISED.findall(path.read_text())}


def message_lines(stderr: str) -> list[str]:
    """stderr without Alembic's log lines and fencemigrate's progress lines (``upgrade 0002 (1/1) under token 6``)."""
    return [
        line
        for line in stderr.splitlines()
        if line.strip() and not _LOG_LINE.match(line) and not re.match(r"^\w+ \S+ \(\d+/\d+\) under token", line)
    ]


def guard_refusal(revision_line: int = 16) -> list[str]:
    """What a revision lowering the fence token from 6 to 1 is told (its ``op.execute`` on ``revision_line``)."""
    return [
        f"FENCED: this write to {RESOURCE} is not yours to make.",
        "The fence's monotonic guard (FM002) refused a write by revision 0002 (migrations/versions/0002_lower.py, "
        f"line {revision_line}, in upgrade): agent_fence is monotonic: the token of {RESOURCE} cannot go down from "
        "6 to 1; the run's transaction rolled back: nothing was applied.",
        "No client may lower a fence token or the lease token counter, or rename or delete their rows:",
        "that would let older tokens write again.",
        *STALE_PLAN,
    ]


def fence_token(url: str) -> int:
    return int(query(url, "SELECT token FROM fencemigrate.agent_fence WHERE resource = %s", (RESOURCE,))[0][0])


# -- the registry ------------------------------------------------------------------------------


def test_every_sqlstate_the_sql_raises_has_its_class() -> None:
    """Each FM code raised in ``sql/`` looks up to a fencemigrate class that names it; none is psycopg's."""
    codes = raised_codes()
    assert codes >= {"FM001", "FM002", "FM003", "FM005", "FM006"}, codes
    for code in sorted(codes):
        outcome = lookup(code)
        assert outcome.sqlstate == code
        assert issubclass(outcome, FencemigrateError) and not issubclass(outcome, psycopg.Error)
        with pytest.raises(KeyError):
            psycopg.errors.lookup(code)  # psycopg has no class for our codes: it raises a generic one
    assert sqlstate_of(Fenced(RESOURCE, 4, 7, "token 7 has since written")) is None  # an outcome, not a database error


def test_each_outcome_keeps_its_exit_status_and_status() -> None:
    """FENCED and the monotonic guard exit 3, the tokenless write 2 (usage), the others 1."""
    assert {
        code: (lookup(code).__name__, lookup(code).outcome.exit_status, lookup(code).outcome.status)
        for code in raised_codes()
    } == {
        "FM001": ("Fenced", 3, "fenced"),
        "FM002": ("MonotonicGuardRefused", 3, "fenced"),
        "FM003": ("NotTransactional", 1, "error"),
        "FM005": ("TokenlessWriteRefused", 2, "usage"),
        "FM006": ("LeaseGuardRefused", 1, "refused"),
    }


def test_a_code_is_registered_once() -> None:
    """A second class for a registered SQLSTATE is refused when it is defined."""
    with pytest.raises(TypeError, match="SQLSTATE FM002 is already the outcome MonotonicGuardRefused"):

        class Again(FencemigrateError, sqlstate="FM002"):
            pass

    assert lookup("FM002") is MonotonicGuardRefused
    with pytest.raises(KeyError):
        lookup("FM999")


def test_each_code_raised_on_postgresql_maps_to_its_class_by_sqlstate(pg_conn: psycopg.Connection[Any]) -> None:
    """Raised by the server (DETAIL and all), psycopg's generic error maps to the code's class."""
    detail = json.dumps({"resource": RESOURCE, "token": 4, "fence_token": 7, "reason": "token 7 has since written"})
    for code in sorted(raised_codes()):
        with pytest.raises(psycopg.Error) as raised:
            pg_conn.execute(
                f"DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '{code}', MESSAGE = 'lease guard: a test', "
                f"DETAIL = '{detail}'; END $$"
            )
        assert raised.value.sqlstate == code and type(raised.value).sqlstate is None  # psycopg's generic class
        mapped = from_database_error(raised.value, RESOURCE, 4)
        assert type(mapped) is lookup(code), (code, mapped)
    other = psycopg.errors.UniqueViolation
    with pytest.raises(other) as unique:
        pg_conn.execute("CREATE TEMP TABLE u (id int PRIMARY KEY); INSERT INTO u VALUES (1), (1)")
    assert from_database_error(unique.value, RESOURCE, 4) is None


def test_mysql_signals_are_told_by_the_start_of_their_message() -> None:
    """Every ``SIGNAL SQLSTATE 'FM...'`` message starts with one of its class's prefixes, and maps to it
    (read by MySQL's dialect, loaded before any MySQL error can arrive)."""
    dialect_for("mysql")
    signals = [match for path in SQL_FILES for match in MYSQL_SIGNAL.findall(path.read_text())]
    assert {code for code, _ in signals} == {"FM002", "FM005", "FM006"}, signals
    for code, message in signals:
        assert message.startswith(lookup(code).message_prefixes), (code, message)
        assert type(from_database_error(Exception(1644, message), RESOURCE, 5)) is lookup(code)
    assert from_database_error(Exception(1644, "a user's own SIGNAL"), RESOURCE, 5) is None


def test_each_signal_raised_by_mariadb_keeps_its_own_message(mysql_url: str) -> None:
    """Raised by the server through PyMySQL (whose errors carry the SQLSTATE since 1.2), a signal maps to
    its class, and the refusal's message is the signal's text, not the driver's ``(1644, '...')``."""
    import pymysql

    signals = {code: message for path in SQL_FILES for code, message in MYSQL_SIGNAL.findall(path.read_text())}
    for code, message in sorted(signals.items()):
        with pytest.raises(pymysql.err.MySQLError) as raised:
            mysql_rows(mysql_url, f"BEGIN NOT ATOMIC SIGNAL SQLSTATE '{code}' SET MESSAGE_TEXT = '{message}'; END")
        refusal = refusal_of(raised.value)
        assert refusal == Refusal(code, message), (code, refusal)


def test_sqlite_raises_are_told_by_the_start_of_their_message() -> None:
    """SQLite's guard messages map to FM002, FM005 and FM006; only its token range checks map to none."""
    # (not a --sql script's refusals, the script_* statements of sql/queries/sqlite.sql: the sqlite3 shell shows them)
    texts = [path.read_text() for path in SQL_FILES if path.parent.name != "queries"]
    texts += [
        text
        for file in ("postgresql", "sqlite", "mysql", "prefixed")
        for name, text in sections(file).items()
        if not (file in ("sqlite", "prefixed") and name.startswith("script_"))
    ]
    messages = {message for text in texts for message in SQLITE_RAISE.findall(text)}
    told: dict[str, set[str]] = {}
    for message in messages:
        mapped = from_database_error(sqlite3.IntegrityError(message), RESOURCE, 5)
        told.setdefault("none" if mapped is None else str(type(mapped).sqlstate), set()).add(message)
    assert sorted(told) == ["FM002", "FM005", "FM006", "none"], told
    assert told["none"] == {
        "fence tokens are integers from 1 to 4611686018427387904",
        "lease tokens are integers from 0 to 4611686018427387904",
        "ledger tokens are integers from 1 to 4611686018427387904",
        "Redis grant tokens are integers from 1 to 4611686018427387904",
    }


def test_the_monotonic_guard_refusal_reads_as_fenced() -> None:
    """Built from the database's message alone (env.py, a script): the FENCED headline and guidance."""
    refused = MonotonicGuardRefused.from_refusal(
        Refusal("FM002", "agent_fence is monotonic: deleting fence rows is not allowed"), RESOURCE, 0
    )
    assert str(refused).splitlines() == [
        f"FENCED: this write to {RESOURCE} is not yours to make.",
        "The fence's monotonic guard (FM002) refused a write: agent_fence is monotonic: deleting fence rows is "
        "not allowed.",
        "No client may lower a fence token or the lease token counter, or rename or delete their rows:",
        "that would let older tokens write again.",
        *STALE_PLAN,
    ]
    assert refused.as_json() == {
        "status": "fenced",
        "resource": RESOURCE,
        "reason": "agent_fence is monotonic: deleting fence rows is not allowed",
        "writer": None,
        "message": str(refused),
    }


# -- FM002 end to end --------------------------------------------------------------------------


def lowering(project: Project) -> None:
    """0001 applied under token 5, then 0002, whose upgrade lowers the fence token to 1."""
    project.add_revision("0001", None, "CREATE TABLE one (id int)", "DROP TABLE one", slug="one")
    project.run_cli("upgrade", "0001", "--token", "5").check(0)
    project.add_revision("0002", "0001", LOWER, "SELECT 1", slug="lower")


def test_a_revision_lowering_the_fence_token_is_fenced(project: Project) -> None:
    """Exit 3, the FENCED guidance naming the revision and its line; nothing applied, and the claim of
    token 6 rolled back with it (the fence stays at 5). Before FM002 had a class: exit 1, ``fencemigrate:
    error: revision 0002 (...) failed: database error: agent_fence is monotonic: ...``."""
    lowering(project)
    result = project.run_cli("upgrade", "head", "--token", "6").check(3)
    assert result.stdout == ""
    assert message_lines(result.stderr) == guard_refusal()
    assert alembic_versions(project.url) == ["0001"]
    assert fence_token(project.url) == 5

    payload = json.loads(project.run_cli("upgrade", "head", "--token", "6", "--json").check(3).stdout)
    assert payload == {
        "status": "fenced",
        "resource": RESOURCE,
        "reason": f"agent_fence is monotonic: the token of {RESOURCE} cannot go down from 6 to 1",
        "writer": "revision 0002 (migrations/versions/0002_lower.py, line 16, in upgrade)",
        "message": "\n".join(guard_refusal()),
    }


def test_control_without_the_guard_the_same_revision_lowers_the_fence(project: Project) -> None:
    """Control: with the monotonic trigger dropped, the same run exits 0 and the fence token is 1."""
    lowering(project)
    execute(project.url, "DROP TRIGGER agent_fence_monotonic ON fencemigrate.agent_fence")
    project.run_cli("upgrade", "head", "--token", "6").check(0)
    assert alembic_versions(project.url) == ["0002"]
    assert fence_token(project.url) == 1


# -- the same words from fencemigrate and plain alembic ------------------------------------------


@pytest.fixture
def fenced_project(tmp_path: Path, pg_url: str) -> Project:
    """A project written by ``fencemigrate init migrations`` (the fence-aware env.py), on PostgreSQL."""
    root = tmp_path / "fenced"
    root.mkdir()
    run_in_process(root, "init", "migrations").check(0)
    project = Project(path=root, url=pg_url, template="fencemigrate")
    project.set_url(pg_url)
    return project


def both_ways(project: Project, token: int) -> tuple[Result, Result]:
    """``fencemigrate upgrade head --token T`` and ``alembic -x fence_token=T upgrade head``."""
    cli = project.run_cli("upgrade", "head", "--token", str(token))
    alembic = project.run_alembic("-x", f"fence_token={token}", "upgrade", "head")
    return cli, alembic


def test_the_monotonic_guard_reads_the_same_from_alembic(fenced_project: Project) -> None:
    """A revision lowering the fence: the same exit status and lines from both entry points."""
    lowering(fenced_project)
    cli, alembic = both_ways(fenced_project, 6)
    assert (cli.code, alembic.code) == (3, 3), (cli, alembic)
    assert message_lines(cli.stderr) == message_lines(alembic.stderr) == guard_refusal(), (cli, alembic)


def test_fenced_reads_the_same_from_alembic(fenced_project: Project) -> None:
    """A stale token after a newer one wrote: the same FENCED lines from both entry points."""
    fenced_project.add_revision("0001", None, "CREATE TABLE one (id int)", "DROP TABLE one", slug="one")
    fenced_project.run_cli("upgrade", "0001", "--token", "7").check(0)
    fenced_project.add_revision("0002", "0001", "CREATE TABLE two (id int)", "DROP TABLE two", slug="two")
    cli, alembic = both_ways(fenced_project, 6)
    assert (cli.code, alembic.code) == (3, 3), (cli, alembic)
    assert message_lines(cli.stderr) == message_lines(alembic.stderr), (cli, alembic)
    assert message_lines(cli.stderr)[:2] == [
        f"FENCED: you no longer own {RESOURCE}.",
        "Your lease token (6) is older than token 7, which has since written to this resource.",
    ]


def test_a_bad_token_reads_the_same_from_alembic(fenced_project: Project) -> None:
    """A token that is not a number: ``fencemigrate: usage: ...``, exit 2, from both entry points."""
    fenced_project.add_revision("0001", None, "CREATE TABLE one (id int)", "DROP TABLE one", slug="one")
    cli = fenced_project.run_cli("upgrade", "head", "--token", "-3")
    alembic = fenced_project.run_alembic("-x", "fence_token=-3", "upgrade", "head")
    assert (cli.code, alembic.code) == (2, 2), (cli, alembic)
    assert message_lines(cli.stderr) == message_lines(alembic.stderr), (cli, alembic)
    assert message_lines(cli.stderr)[0].startswith("fencemigrate: usage: invalid token '-3'"), cli
