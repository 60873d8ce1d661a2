"""A failing revision or env.py is named with its file and line; ``--raiseerr`` adds the traceback.

On PostgreSQL and SQLite a revision raising ``ValueError`` exits 1 with one line naming the
revision, its file and the line that raised, says nothing was applied, and leaves the database as
it was. The control: plain ``alembic`` fails the same way (exit 1, its traceback through the same
file and line), so fencemigrate reports the same failure, only more usefully.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import db, sqlite_rows
from support.fence_rows import stderr_lines
from support.project import MakeProject, Project, sqlite_url

FAILING_CODE = "raise ValueError('bad data in row 7')"
PASSWORD = "Sw0rdf1sh-in-url"


@dataclass
class Target:
    """A project on one database, and how to read that database back."""

    project: Project
    tables: Callable[[], list[str]]
    versions: Callable[[], list[str] | None]


@pytest.fixture(params=["postgresql", "sqlite"])
def target(request: pytest.FixtureRequest, make_project: MakeProject, tmp_path: Path) -> Target:
    """Revisions 0001 (creates ``one``) and 0002 (creates ``two``, then raises ValueError)."""
    if request.param == "postgresql":
        url = str(request.getfixturevalue("pg_url"))
        project = make_project(url=url)
        target = Target(project, lambda: sorted(db.table_names(url)), lambda: db.alembic_versions(url))
    else:
        database = tmp_path / "app.db"
        project = make_project(url=sqlite_url(database))
        target = Target(
            project,
            lambda: sqlite_rows.user_tables(database) if database.exists() else [],
            lambda: sqlite_rows.alembic_versions(database) if database.exists() else None,
        )
    project.add_revision("0001", None, "CREATE TABLE one (id int)", "DROP TABLE one")
    project.add_revision("0002", "0001", "CREATE TABLE two (id int)", "DROP TABLE two", extra_upgrade_code=FAILING_CODE)
    return target


def raising_line(project: Project, revision: str = "0002") -> int:
    """The line of the revision file that raises."""
    lines = (project.versions / f"{revision}_rev.py").read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if "raise ValueError" in line)


def failure_message(project: Project) -> str:
    return (
        f"revision 0002 (migrations/versions/0002_rev.py, line {raising_line(project)}, in upgrade) failed: "
        "ValueError: bad data in row 7; the run's transaction rolled back: nothing was applied"
    )


def assert_nothing_applied(target: Target) -> None:
    assert [name for name in target.tables() if name in ("one", "two")] == []
    assert target.versions() in (None, [])


def test_failing_revision_is_named_with_file_and_line(target: Target) -> None:
    result = target.project.run_cli("upgrade", "head").check(1)
    assert result.stdout == ""
    lines = stderr_lines(result.stderr)
    assert lines[-1] == f"fencemigrate: error: {failure_message(target.project)}", result
    assert "Traceback" not in result.stderr
    assert_nothing_applied(target)


def test_raiseerr_adds_the_traceback_and_keeps_the_exit_status(target: Target) -> None:
    result = target.project.run_cli("--raiseerr", "upgrade", "head").check(1)
    message = f"fencemigrate: error: {failure_message(target.project)}"
    assert message in result.stderr.splitlines(), result
    trace = result.stderr[result.stderr.index(message) + len(message) :]
    assert trace.lstrip("\n").startswith("Traceback (most recent call last):"), result
    revision_file = str((target.project.versions / "0002_rev.py").resolve())
    assert f'File "{revision_file}", line {raising_line(target.project)}, in upgrade' in trace, result
    assert "ValueError: bad data in row 7" in trace, result
    assert_nothing_applied(target)


def test_json_has_revision_file_and_line(target: Target) -> None:
    result = target.project.run_cli("upgrade", "head", "--json").check(1)
    assert len(result.stdout.splitlines()) == 1, result
    payload = json.loads(result.stdout)
    assert payload == {
        "status": "error",
        "message": failure_message(target.project),
        "revision": "0002",
        "file": "migrations/versions/0002_rev.py",
        "line": raising_line(target.project),
        "function": "upgrade",
        "error": "ValueError: bad data in row 7",
    }
    assert_nothing_applied(target)


def test_plain_alembic_fails_on_the_same_line(target: Target) -> None:
    """The control: ``alembic upgrade head`` (exit 1, an uncaught exception) shows the same file and line."""
    result = target.project.run_alembic("upgrade", "head")
    assert result.code == 1, result
    revision_file = str((target.project.versions / "0002_rev.py").resolve())
    assert f'File "{revision_file}", line {raising_line(target.project)}, in upgrade' in result.stderr, result
    assert result.stderr.rstrip().endswith("ValueError: bad data in row 7"), result


def test_earlier_revisions_in_their_own_transactions_stay_applied(make_project: MakeProject, pg_url: str) -> None:
    """With ``transaction_per_migration=True`` the revisions before the failing one committed: said so."""
    project = make_project(url=pg_url)
    project.set_env_option("transaction_per_migration", True)
    project.add_revision("0001", None, "CREATE TABLE one (id int)", "DROP TABLE one")
    project.add_revision("0002", "0001", "CREATE TABLE two (id int)", "DROP TABLE two", extra_upgrade_code=FAILING_CODE)
    result = project.run_cli("upgrade", "head", "--token", "5").check(1)
    assert stderr_lines(result.stderr)[-1] == (
        f"fencemigrate: error: revision 0002 (migrations/versions/0002_rev.py, line {raising_line(project)}, in "
        "upgrade) failed: ValueError: bad data in row 7; its transaction rolled back; applied before it, each in a "
        "transaction of its own: 0001"
    )
    assert db.alembic_versions(pg_url) == ["0001"]
    assert sorted(db.table_names(pg_url)) == ["alembic_version", "one"]


@pytest.mark.parametrize(
    "flags",
    [(), ("--raiseerr",), ("--json",), ("--raiseerr", "--json")],
    ids=["text", "raiseerr", "json", "raiseerr-json"],
)
def test_a_password_in_the_error_is_never_printed(
    make_project: MakeProject, pg_url: str, flags: tuple[str, ...]
) -> None:
    """The revision's error quotes the URL, password included: it is shown as ***, in the traceback too."""
    url = pg_url.replace("postgres@", f"postgres:{PASSWORD}@")
    project = make_project(url=url)
    project.add_revision(
        "0001",
        None,
        extra_upgrade_code=(
            "raise ValueError('cannot use ' + op.get_bind().engine.url.render_as_string(hide_password=False))"
        ),
    )
    json_flag = [flag for flag in flags if flag == "--json"]
    result = project.run_cli(*[flag for flag in flags if flag != "--json"], "upgrade", "head", *json_flag).check(1)
    assert PASSWORD not in result.output, result
    shown = url.replace(PASSWORD, "***")
    errors = [line for line in result.stderr.splitlines() if line.startswith("fencemigrate: error: ")]
    message = json.loads(result.stdout)["message"] if json_flag else errors[0]
    assert f"failed: ValueError: cannot use {shown}; " in message, result
    if "--raiseerr" in flags:
        assert f"ValueError: cannot use {shown}" in result.stderr.splitlines(), result


def test_env_py_failure_is_named_with_its_line(make_project: MakeProject, tmp_path: Path) -> None:
    project = make_project(url=sqlite_url(tmp_path / "app.db"))
    project.edit_env("config = context.config\n", "config = context.config\nundefined_helper()\n", count=1)
    line = project.env_py.read_text().splitlines().index("undefined_helper()") + 1
    result = project.run_cli("upgrade", "head").check(1)
    assert stderr_lines(result.stderr) == [
        f"fencemigrate: error: env.py (migrations/env.py, line {line}, in <module>) failed: "
        "NameError: name 'undefined_helper' is not defined"
    ], result
    payload = json.loads(project.run_cli("state", "--json").check(1).stdout)
    assert (payload["file"], payload["line"], payload["function"]) == ("migrations/env.py", line, "<module>")
