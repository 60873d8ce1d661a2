"""Replacing an applied revision: a downgrade of a revision whose file changed since it was applied
runs the ``downgrade()`` of the text the ledger recorded, not the file's (issue 25).

The incident's agent B rewrites A's applied 0042 and rolls it back: the rewritten file's
``downgrade()`` drops a column A's 0042 never created. Plain ``alembic downgrade`` runs that file
and fails (the control); fencemigrate runs the applied text's ``downgrade()``, says so in its text and
JSON, and B's 0042 goes in after it. ``reapply`` (the same holder rewriting its own revision) does
the same; PostgreSQL, SQLite and MariaDB (pre-check mode). A ledger row without text is refused with
nothing written; a ``--sql`` script checks, when psql runs it, that the database applied the file
whose downgrade it holds.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from support.in_process import run_in_process
from support.mcp_client import mcp_agent, run
from support.offline_sql import run_psql
from support.old_schema import install_schema, old_ledger_row
from support.project import MakeProject, Project, Result, run_command, script_command, sqlite_url

A_UP = ["ALTER TABLE invoices ADD COLUMN currency varchar(8)"]
A_DOWN = ["ALTER TABLE invoices DROP COLUMN currency"]
B_UP = ["ALTER TABLE invoices ADD COLUMN currency_code char(3)"]
B_DOWN = ["ALTER TABLE invoices DROP COLUMN currency_code"]


def cli(project: Project, *args: str) -> Result:
    return run_in_process(project.path, *args)


def write_0041(project: Project) -> None:
    project.add_revision("0041", None, ["CREATE TABLE invoices (id int)"], ["DROP TABLE invoices"], slug="invoices")


def write_a_0042(project: Project) -> Path:
    """A's 0042: adds ``currency``, and its downgrade() drops it."""
    return project.add_revision("0042", "0041", A_UP, A_DOWN, slug="currency")


def write_b_0042(project: Project) -> Path:
    """B's rewrite of 0042, in the same file: adds ``currency_code``, and its downgrade() drops that."""
    return project.add_revision("0042", "0041", B_UP, B_DOWN, slug="currency")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def columns(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        return [column["name"] for column in sa.inspect(engine).get_columns("invoices")]
    finally:
        engine.dispose()


def snapshot(project: Project) -> tuple[Any, ...]:
    """What a refused command must leave as it was: the table, the heads, ledger, fences and events."""
    state = json.loads(cli(project, "state", "--json").check().stdout)
    events = json.loads(cli(project, "timeline", "--json").check().stdout)["events"]
    return columns(project.url), state["heads"], state["ledger"], state["fences"], state["fence_schema_version"], events


def applied_by_a(make_project: MakeProject, url: str) -> tuple[Project, Path]:
    """A applies 0041 and its 0042 under token 33; then the file is rewritten as B's 0042."""
    project = make_project(url=url)
    write_0041(project)
    a_file = write_a_0042(project)
    cli(project, "upgrade", "head", "--token", "33", "--holder", "agent-A").check()
    assert columns(url) == ["id", "currency"]
    return project, a_file


@pytest.mark.parametrize("backend", ["postgresql", "sqlite", "mysql"], indirect=True)
def test_a_rewritten_revision_is_rolled_back_with_its_applied_text(make_project: MakeProject, backend_url: str) -> None:
    """B rewrites A's applied 0042 and rolls it back: plain alembic runs the rewritten downgrade()
    and fails; fencemigrate runs A's, reports it, and B's 0042 then applies cleanly."""
    project, a_file = applied_by_a(make_project, backend_url)
    a_sha = sha256(a_file)
    b_file = write_b_0042(project)
    b_sha = sha256(b_file)
    assert b_file == a_file and b_sha != a_sha

    # The control: plain alembic runs the file on disk, whose downgrade() drops a column that is not there.
    project.allow_tokenless_writes()
    control = project.run_alembic("downgrade", "0041")
    assert control.code != 0, control
    assert "currency_code" in control.stderr, control
    assert columns(backend_url) == ["id", "currency"]
    cli(project, "install", "--forbid-tokenless-writes").check()

    result = cli(project, "downgrade", "0041", "--token", "34", "--holder", "agent-B", "--json").check()
    (step,) = json.loads(result.stdout)["steps"]
    assert step["revisions"] == ["0042"] and step["action"] == "rolled back" and step["token"] == 34
    assert step["applied_text"] == {
        "applied_token": 33,
        "applied_by": "agent-A",
        "applied_sha256": a_sha,
        "file_sha256": b_sha,
    }
    assert columns(backend_url) == ["id"]
    state = json.loads(cli(project, "state", "--json").check().stdout)
    assert state["heads"] == ["0041"] and [row["revision"] for row in state["ledger"]] == ["0041"]
    # The timeline says which downgrade() ran, in the ROLLBACK event's detail and line.
    rollback = json.loads(cli(project, "timeline", "--json").check().stdout)["events"][-1]
    assert (rollback["kind"], rollback["revision"], rollback["token"]) == ("ROLLBACK", "0042", 34)
    assert rollback["detail"] == {"applied_text": step["applied_text"]}
    assert (
        cli(project, "timeline")
        .check()
        .stdout.splitlines()[-1]
        .endswith(
            f"ROLLBACK 0042 by agent-B token=34: ran the downgrade() of the text applied under token 33 by "
            f"agent-A (sha256 {a_sha[:12]}), not the changed file's (sha256 {b_sha[:12]})"
        )
    )

    cli(project, "upgrade", "head", "--token", "34", "--holder", "agent-B").check()
    assert columns(backend_url) == ["id", "currency_code"]
    shown = json.loads(cli(project, "show", "0042", "--applied", "--json").check().stdout)
    assert (shown["token"], shown["script_sha256"]) == (34, b_sha)


@pytest.mark.parametrize("backend", ["postgresql", "sqlite", "mysql"], indirect=True)
def test_reapply_of_a_rewritten_revision_undoes_the_applied_text(make_project: MakeProject, backend_url: str) -> None:
    """``reapply`` under the token that applied 0042, after its file was rewritten: the applied text's
    downgrade(), then the file's upgrade(); the text output says which downgrade() ran."""
    project, a_file = applied_by_a(make_project, backend_url)
    a_sha = sha256(a_file)
    b_sha = sha256(write_b_0042(project))

    result = cli(project, "reapply", "0042", "--token", "33", "--holder", "agent-A").check()
    assert (
        f"    0042's file changed since it was applied (sha256 {b_sha[:12]} on disk): ran the downgrade() of "
        f"the text applied under token 33 by agent-A (sha256 {a_sha[:12]}), not the file's"
    ) in result.stdout.splitlines(), result
    assert "  rolled back 0042 under token 33" in result.stdout.splitlines()
    assert "  re-applied 0042 under token 33" in result.stdout.splitlines()
    assert columns(backend_url) == ["id", "currency_code"]
    shown = json.loads(cli(project, "show", "0042", "--applied", "--json").check().stdout)
    assert (shown["token"], shown["script_sha256"]) == (33, b_sha)

    # The file unchanged since: a downgrade runs it as ever, with no applied_text.
    result = cli(project, "downgrade", "0041", "--token", "35", "--holder", "agent-B", "--json").check()
    (step,) = json.loads(result.stdout)["steps"]
    assert "applied_text" not in step
    assert columns(backend_url) == ["id"]
    rollbacks = [
        (event["token"], event["detail"])
        for event in json.loads(cli(project, "timeline", "--json").check().stdout)["events"]
        if event["kind"] == "ROLLBACK"
    ]
    assert [token for token, _ in rollbacks] == [33, 35]
    assert "applied_text" in rollbacks[0][1] and rollbacks[1][1] == {}


@pytest.mark.parametrize("backend", ["postgresql", "sqlite", "mysql"], indirect=True)
def test_a_rewritten_revision_whose_applied_text_was_not_kept_is_refused(
    make_project: MakeProject, backend_url: str
) -> None:
    """A ledger row recorded without its text: the rewritten file's downgrade() is not known to undo
    it, nor is any other; exit 1, a message naming the revision and what to do, and nothing written
    (not even a lease)."""
    project = make_project(url=backend_url)
    write_0041(project)
    a_file = write_a_0042(project)
    project.run_alembic("upgrade", "head").check()
    install_schema(backend_url)
    old_ledger_row(backend_url, "0042", sha256(a_file))
    a_sha = sha256(a_file)
    b_sha = sha256(write_b_0042(project))
    before = snapshot(project)

    result = cli(project, "downgrade", "0041", "--token", "34", "--holder", "agent-B")
    assert result.code == 1, result
    assert result.stdout == ""
    assert (
        f"cannot roll back 0042: its file changed since it was applied under token 3 (sha256 {b_sha[:12]} on "
        f"disk, {a_sha[:12]} applied), and the ledger has no text of the applied version"
    ) in result.stderr, result
    assert f"Put back the file as it was applied (from version control: its sha256 is {a_sha})" in result.stderr
    assert "Traceback" not in result.stderr
    assert snapshot(project) == before

    leased = cli(project, "downgrade", "0041", "--holder", "agent-B", "--json")  # no --token: it would take a lease
    assert leased.code == 1, leased
    payload = json.loads(leased.stdout)
    assert (payload["status"], payload["revision"]) == ("error", "0042")
    assert payload["message"].startswith("cannot roll back 0042: its file changed since it was applied")
    assert snapshot(project) == before

    # With the applied file put back, the same downgrade runs it.
    write_a_0042(project)
    cli(project, "downgrade", "0041", "--token", "34", "--holder", "agent-B").check()
    assert columns(backend_url) == ["id"]


@pytest.mark.parametrize("backend", ["postgresql", "sqlite", "mysql"], indirect=True)
def test_an_applied_text_changed_in_the_database_is_not_run(
    make_project: MakeProject, backend_url: str, tmp_path: Path
) -> None:
    """Plain SQL appends code to the ledger's text of A's 0042 (the row's sha256 left as it was):
    B's rollback of its rewrite refuses it as it does a missing text, naming both hashes; the code
    never ran (no marker file) and nothing was written. Without the check it would have run."""
    project, a_file = applied_by_a(make_project, backend_url)
    a_sha = sha256(a_file)
    write_b_0042(project)
    marker = tmp_path / "ran"
    payload = f"\nimport pathlib\npathlib.Path({str(marker)!r}).touch()\n"
    table = "fencemigrate.applied_revision" if backend_url.startswith("postgresql") else "fencemigrate_applied_revision"
    read, write = (
        ("source", ":source") if not backend_url.startswith("mysql") else ("UNCOMPRESS(source)", "COMPRESS(:source)")
    )
    engine = sa.create_engine(backend_url)
    try:
        with engine.begin() as connection:
            source = connection.execute(sa.text(f"SELECT {read} FROM {table} WHERE revision = '0042'")).scalar_one()
            source = source.decode() if isinstance(source, bytes) else source
            connection.execute(
                sa.text(f"UPDATE {table} SET source = {write} WHERE revision = '0042'"), {"source": source + payload}
            )
    finally:
        engine.dispose()
    altered_sha = hashlib.sha256((source + payload).encode()).hexdigest()
    before = snapshot(project)

    result = cli(project, "downgrade", "0041", "--token", "34", "--holder", "agent-B")
    assert result.code == 1, result
    assert (
        f"and the ledger's text of the applied version hashes to {altered_sha[:12]}, not to the sha256 recorded "
        "with it: it was changed in the database after it was applied, so it is not run. Nothing was run."
    ) in result.stderr, result
    assert f"its sha256 is {a_sha}" in result.stderr
    assert not marker.exists()
    assert snapshot(project) == before


def test_an_offline_downgrade_checks_the_applied_file_when_it_runs(make_project: MakeProject, pg_url: str) -> None:
    """``downgrade --sql``: no database to read when the script is written, so the script checks when
    psql runs it that the database applied the file whose downgrade() it holds; a rewritten file's
    script stops there with nothing rolled back (the control: A's own file's script runs)."""
    project, a_file = applied_by_a(make_project, pg_url)
    a_text = a_file.read_bytes()
    b_sha = sha256(write_b_0042(project))

    written = cli(project, "downgrade", "0042:0041", "--sql", "--token", "34", "--holder", "agent-B").check()
    assert "ALTER TABLE invoices DROP COLUMN currency_code" in written.stdout
    refused = run_psql(pg_url, written.stdout, project.path)
    assert refused.code != 0, refused
    assert "fencemigrate: 0042 was applied from another text than the file this script rolls it back with " in (
        refused.stderr
    ), refused
    assert f"(sha256 {b_sha}): nothing was rolled back" in refused.stderr
    assert columns(pg_url) == ["id", "currency"]
    assert json.loads(cli(project, "state", "--json").check().stdout)["heads"] == ["0042"]

    a_file.write_bytes(a_text)  # the control: the file as applied
    project.remove_pycache()
    written = cli(project, "downgrade", "0042:0041", "--sql", "--token", "34", "--holder", "agent-B").check()
    run_psql(pg_url, written.stdout, project.path).check()
    assert columns(pg_url) == ["id"]


def test_the_mcp_tools_roll_back_with_the_applied_text(make_project: MakeProject, pg_url: str) -> None:
    """The server's ``downgrade`` and ``reapply`` tools: the outcome's step names the applied text."""
    project = make_project(url=pg_url)
    write_0041(project)
    a_sha = sha256(write_a_0042(project))

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "5m") as agent:
            token = (await agent.ok("acquire_lease"))["server_token"]
            await agent.ok("upgrade", revision="head")
            b_sha = sha256(write_b_0042(project))
            reapplied = await agent.ok("reapply", revision="0042")
            down, up = reapplied["outcome"]["steps"]
            assert down["applied_text"] == {
                "applied_token": token,
                "applied_by": "agent-A",
                "applied_sha256": a_sha,
                "file_sha256": b_sha,
            }
            assert "applied_text" not in up and up["action"] == "re-applied"
            assert columns(pg_url) == ["id", "currency_code"]
            write_a_0042(project)
            rolled_back = await agent.ok("downgrade", revision="0041")
            (step,) = rolled_back["outcome"]["steps"]
            assert step["applied_text"]["applied_sha256"] == b_sha and step["applied_text"]["file_sha256"] == a_sha
            assert columns(pg_url) == ["id"]

    run(scenario)


def test_an_applied_text_that_fails_is_named_in_the_error(make_project: MakeProject, tmp_path: Path) -> None:
    """The applied text's downgrade() failing: the error's location is that text, by its line, not the file."""
    url = sqlite_url(tmp_path / "db.sqlite")
    project = make_project(url=url)
    write_0041(project)
    a_file = project.add_revision("0042", "0041", A_UP, ["DROP TABLE no_such_table"], slug="currency")
    cli(project, "upgrade", "head", "--token", "33", "--holder", "agent-A").check()
    a_sha, a_lines = sha256(a_file), a_file.read_text().splitlines()
    write_b_0042(project)

    result = cli(project, "downgrade", "0041", "--token", "34", "--holder", "agent-B", "--json")
    assert result.code == 1, result
    payload = json.loads(result.stdout)
    assert payload["revision"] == "0042"
    assert payload["file"] == f"<0042 as applied under token 33, sha256 {a_sha[:12]}>"
    assert (payload["function"], payload["line"]) == (
        "downgrade",
        a_lines.index("    op.execute('DROP TABLE no_such_table')") + 1,
    )
    assert "no such table: no_such_table" in payload["error"]
    assert columns(url) == ["id", "currency"]


def test_plain_alembic_through_the_fence_aware_env_py_rolls_back_with_the_applied_text(
    tmp_path: Path, pg_url: str
) -> None:
    """``alembic -x fence_token=N downgrade`` with the env.py ``fencemigrate init`` writes: the same
    rollback as ``fencemigrate downgrade``, said on stderr."""
    root = tmp_path / "fenced"
    root.mkdir()
    run_command(script_command("fencemigrate") + ["init", "migrations"], root).check()
    project = Project(path=root, url=pg_url, template="fencemigrate")
    project.set_url(pg_url)
    write_0041(project)
    a_sha = sha256(write_a_0042(project))
    project.run_alembic("-x", "fence_token=33", "-x", "fence_holder=agent-A", "upgrade", "head").check()
    b_sha = sha256(write_b_0042(project))

    result = project.run_alembic("-x", "fence_token=34", "downgrade", "0041").check()
    assert (
        f"fencemigrate: 0042's file changed since it was applied (sha256 {b_sha[:12]} on disk): ran the "
        f"downgrade() of the text applied under token 33 by agent-A (sha256 {a_sha[:12]}), not the file's"
    ) in result.stderr.splitlines(), result
    assert columns(pg_url) == ["id"]
