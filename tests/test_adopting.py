"""Adopting a database that plain Alembic migrated (issue 25, item 3).

Plain ``alembic upgrade`` takes a database to revision 3 of 5; the first fenced run (or
``fencemigrate install``) records revisions 1 to 3 in the ledger as adopted: method ``adopt``,
token 0 (applied before fencing, by no token), the file's sha256 and text, one ADOPT event. Then
``state`` has nothing NOT IN LEDGER and ``check --db`` no FM407. Before, every one of them was an
FM407 error. Control: what plain Alembic writes *after* the database is fenced (opted out of the
guard) is still reported revision by revision: adoption happens once, at fencing, and never again.
On PostgreSQL, MariaDB and SQLite.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from support.backend_rows import table
from support.background_runs import start
from support.db import libpq_url
from support.in_process import run_in_process
from support.project import MakeProject, Project, Result

REFUSED = "fencemigrate refused"  # "... this" on PostgreSQL and SQLite, "... a version-table write" on MariaDB
ADOPTED_TEXT = (
    "adopted 3 revisions that alembic_version applied before fencing (ledger rows with no token): 0001, 0002, 0003"
)
ADOPTED_JSON = {"version_table": "alembic_version", "revisions": ["0001", "0002", "0003"], "missing_files": []}
NO_UNRECORDED = {"version_table_only": [], "ledger_only": []}


def five_revisions(project: Project) -> Project:
    for number in range(1, 6):
        down = None if number == 1 else f"000{number - 1}"
        project.add_revision(
            f"000{number}", down, f"CREATE TABLE t{number} (id int)", f"DROP TABLE t{number}", slug=f"t{number}"
        )
    return project


def migrated_by_plain_alembic(make_project: MakeProject, url: str) -> Project:
    """A project of five revisions whose database plain ``alembic upgrade 0003`` migrated."""
    project = five_revisions(make_project(url=url))
    project.run_alembic("upgrade", "0003").check()
    return project


def cli(project: Project, *args: str) -> Result:
    return run_in_process(project.path, *args)


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(url, poolclass=sa.NullPool)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(sa.text(sql))]
    finally:
        engine.dispose()


def ledger(backend: str, url: str) -> list[tuple[Any, ...]]:
    """``(revision, applied_token, holder, method, script_sha256)`` of every ledger row, by revision."""
    return rows(
        url,
        "SELECT revision, applied_token, holder, method, script_sha256 "
        f"FROM {table(backend, 'applied_revision')} ORDER BY revision",
    )


def events(backend: str, url: str, kind: str) -> list[tuple[Any, ...]]:
    """``(holder, token, revision, detail)`` of the events of ``kind``, oldest first."""
    found = rows(url, f"SELECT holder, token, revision, detail, kind FROM {table(backend, 'fence_event')} ORDER BY id")
    return [
        (holder, token, revision, json.loads(detail or "{}"))
        for holder, token, revision, detail, k in found
        if k == kind
    ]


def revision_file(project: Project, revision: str) -> Path:
    (path,) = (project.path / "migrations" / "versions").glob(f"{revision}_*.py")
    return path


def sha256(project: Project, revision: str) -> str:
    return hashlib.sha256(revision_file(project, revision).read_bytes()).hexdigest()


def adopted(project: Project, holder: str, *revisions: str) -> list[tuple[Any, ...]]:
    return [(revision, 0, holder, "adopt", sha256(project, revision)) for revision in revisions]


def applied(project: Project, token: int, holder: str, *revisions: str) -> list[tuple[Any, ...]]:
    return [(revision, token, holder, "upgrade", sha256(project, revision)) for revision in revisions]


def assert_nothing_unrecorded(project: Project) -> None:
    """``state`` has nothing NOT IN LEDGER, and ``check --db`` finds nothing (FM407 included; FM401,
    a revision not applied yet, left out)."""
    state = cli(project, "state", "--json").check()
    assert json.loads(state.stdout)["unrecorded"] == NO_UNRECORDED
    assert "NOT IN LEDGER" not in cli(project, "state").check().stdout
    check = cli(project, "check", "--db", "--ignore", "FM401")
    assert check.code == 0 and "FM407" not in check.stdout, str(check)


def test_the_first_fenced_run_adopts_what_plain_alembic_applied(
    backend: str, backend_url: str, make_project: MakeProject
) -> None:
    project = migrated_by_plain_alembic(make_project, backend_url)

    run = cli(project, "upgrade", "head", "--token", "5", "--holder", "agent-A", "--json").check()

    assert json.loads(run.stdout)["adopted"] == ADOPTED_JSON
    assert ledger(backend, backend_url) == [
        *adopted(project, "agent-A", "0001", "0002", "0003"),
        *applied(project, 5, "agent-A", "0004", "0005"),
    ]
    assert events(backend, backend_url, "ADOPT") == [("agent-A", None, None, ADOPTED_JSON)]
    assert_nothing_unrecorded(project)
    timeline = cli(project, "timeline").check().stdout
    assert "ADOPT    0001, 0002, 0003 by agent-A: applied before fencing, recorded with no token" in timeline
    state = cli(project, "state").check().stdout
    assert "  0002  applied_token=0 (none: applied before fencing)  holder=agent-A  adopt at " in state
    shown = cli(project, "show", "0002", "--applied").check()
    assert "\n0002 applied before fencing, adopted with no token by agent-A at " in shown.stderr
    assert shown.stdout == revision_file(project, "0002").read_text(encoding="utf-8")

    # An adopted revision is downgraded like any other; the next run adopts nothing again.
    cli(project, "downgrade", "0002", "--token", "6", "--holder", "agent-B").check()
    assert ledger(backend, backend_url) == adopted(project, "agent-A", "0001", "0002")
    again = cli(project, "upgrade", "head", "--token", "6", "--holder", "agent-B", "--json").check()
    assert json.loads(again.stdout)["adopted"] is None
    assert len(events(backend, backend_url, "ADOPT")) == 1
    assert_nothing_unrecorded(project)


def test_install_adopts_and_plain_alembic_is_refused_from_then_on(
    backend: str, backend_url: str, make_project: MakeProject
) -> None:
    project = migrated_by_plain_alembic(make_project, backend_url)

    install = cli(project, "install").check()

    assert install.stdout == f"installed\n{ADOPTED_TEXT}\n"
    assert ledger(backend, backend_url)[:3] == adopted(
        project, ledger(backend, backend_url)[0][2], "0001", "0002", "0003"
    )
    assert_nothing_unrecorded(project)
    # Idempotent: a second install and the first fenced run adopt nothing more.
    again = cli(project, "install", "--json").check()
    assert json.loads(again.stdout)["adopted"] is None
    cli(project, "upgrade", "head", "--token", "5", "--holder", "agent-A").check()
    assert len(events(backend, backend_url, "ADOPT")) == 1
    assert [row[:4] for row in ledger(backend, backend_url)][3:] == [
        ("0004", 5, "agent-A", "upgrade"),
        ("0005", 5, "agent-A", "upgrade"),
    ]
    assert_nothing_unrecorded(project)

    refused = project.run_alembic("downgrade", "-1")
    assert refused.code != 0 and REFUSED in refused.stderr, str(refused)
    assert rows(backend_url, "SELECT version_num FROM alembic_version") == [("0005",)]


def test_adoption_never_hides_a_tokenless_write_made_after_fencing(
    backend: str, backend_url: str, make_project: MakeProject
) -> None:
    """Control: once fenced, what plain Alembic writes (opted out of the guard) is one FM407 error per
    revision, as it always was; opting back in does not adopt it."""
    project = five_revisions(make_project(url=backend_url))
    project.run_alembic("upgrade", "0002").check()
    cli(project, "upgrade", "0003", "--token", "5", "--holder", "agent-A").check()
    cli(project, "install", "--allow-tokenless-writes").check()

    project.run_alembic("upgrade", "head").check()
    forbid = cli(project, "install", "--forbid-tokenless-writes").check()

    assert "adopted" not in forbid.stdout
    state = json.loads(cli(project, "state", "--json").check().stdout)
    assert state["unrecorded"] == {"version_table_only": ["0004", "0005"], "ledger_only": []}
    check = cli(project, "check", "--db", "--select", "FM407")
    assert check.code == 1, str(check)
    assert [line.split(" error ", 1)[1].strip() for line in check.stdout.splitlines() if " FM407 " in line] == [
        f"{revision} is applied by alembic_version but has no ledger row: it was written without a fencing token"
        for revision in ("0004", "0005")
    ]
    assert [row[:4] for row in ledger(backend, backend_url)] == [
        ("0001", 0, "agent-A", "adopt"),
        ("0002", 0, "agent-A", "adopt"),
        ("0003", 5, "agent-A", "upgrade"),
    ]


def test_reapplying_an_adopted_revision_is_fenced(backend: str, backend_url: str, make_project: MakeProject) -> None:
    """No token applied an adopted revision, so none may re-apply it (exit 3, nothing changed)."""
    project = migrated_by_plain_alembic(make_project, backend_url)
    cli(project, "upgrade", "0004", "--token", "5", "--holder", "agent-A").check()
    before = ledger(backend, backend_url)

    result = cli(project, "reapply", "0003", "--token", "5", "--holder", "agent-A")

    assert result.code == 3, str(result)
    assert (
        "Rejected for token 5: 0003 was applied before fencing (adopted: no token applied it), "
        "so no token may re-apply it."
    ) in result.stderr
    assert ledger(backend, backend_url) == before
    assert rows(backend_url, "SELECT version_num FROM alembic_version") == [("0004",)]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_a_revision_whose_file_is_gone_is_adopted_as_far_as_it_is_known(
    backend: str, backend_url: str, make_project: MakeProject
) -> None:
    """The version table's head has no file here (applied from another checkout): it is adopted
    without its text, and nothing below it, which no file tells."""
    project = migrated_by_plain_alembic(make_project, backend_url)
    for revision in ("0003", "0004", "0005"):
        revision_file(project, revision).unlink()

    install = cli(project, "install").check()

    assert install.stdout == (
        "installed\n"
        "adopted 1 revision that alembic_version applied before fencing (ledger rows with no token): 0003\n"
        "  no revision file for 0003: adopted without its text; the revisions below it are not known and were "
        "not adopted\n"
    )
    ((holder,),) = rows(backend_url, "SELECT holder FROM fencemigrate_applied_revision")
    assert ledger(backend, backend_url) == [("0003", 0, holder, "adopt", None)]
    assert events(backend, backend_url, "ADOPT") == [
        (holder, None, None, {"version_table": "alembic_version", "revisions": ["0003"], "missing_files": ["0003"]})
    ]
    assert json.loads(cli(project, "state", "--json").check().stdout)["unrecorded"] == NO_UNRECORDED
    check = cli(project, "check", "--db", "--select", "FM407")
    assert check.code == 0, str(check)


@pytest.mark.parametrize("backend", ["postgresql", "mysql", "sqlite"], indirect=True)
def test_concurrent_first_runs_adopt_once(backend: str, backend_url: str, make_project: MakeProject) -> None:
    """Three pods run their first fenced upgrade at once: one ADOPT event, each revision adopted once."""
    project = migrated_by_plain_alembic(make_project, backend_url)

    pods = [start(project, "upgrade", "head", "--token", "5", "--holder", f"pod-{n}", "--json") for n in range(3)]
    finished = [pod.communicate(timeout=120) for pod in pods]

    assert [pod.returncode for pod in pods] == [0, 0, 0], finished
    adopting = [json.loads(stdout)["adopted"] for stdout, _ in finished]
    assert sorted(adopting, key=lambda found: found is None) == [ADOPTED_JSON, None, None]
    (adopter,) = [f"pod-{n}" for n, found in enumerate(adopting) if found is not None]
    assert events(backend, backend_url, "ADOPT") == [(adopter, None, None, ADOPTED_JSON)]
    assert ledger(backend, backend_url)[:3] == adopted(project, adopter, "0001", "0002", "0003")
    assert_nothing_unrecorded(project)


def test_a_run_after_adoption_takes_no_adoption_lock(
    make_project: MakeProject, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the ledger has rows, a run never waits for the adoption lock: another session holds it
    (it is the install lock) in an open transaction, and the next upgrade, whose lock waits time out
    after 2 s, applies 0004. It waited for that session before (and without a bound)."""
    project = migrated_by_plain_alembic(make_project, pg_url)
    cli(project, "install").check()  # adopts
    monkeypatch.setenv("PGOPTIONS", "-c lock_timeout=2000")
    with psycopg.connect(libpq_url(pg_url)) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(hashtext('fencemigrate:install'))")
        result = cli(project, "upgrade", "0004", "--token", "6", "--holder", "pod-2")
        holder.rollback()
    result.check()
    assert [row[0] for row in ledger("postgresql", pg_url)] == ["0001", "0002", "0003", "0004"]


def test_opting_out_and_removing_fencemigrate_as_documented(
    backend: str, backend_url: str, make_project: MakeProject
) -> None:
    """docs/adopting.md's way back: opt out of the guard (not needed on PostgreSQL), drop the fence
    schema; plain ``alembic`` writes the version table again."""
    project = migrated_by_plain_alembic(make_project, backend_url)
    cli(project, "install").check()
    refused = project.run_alembic("stamp", "0004")
    assert refused.code != 0 and REFUSED in refused.stderr, str(refused)

    if backend != "postgresql":
        cli(project, "install", "--allow-tokenless-writes").check()
    engine = sa.create_engine(backend_url, poolclass=sa.NullPool)
    try:
        with engine.begin() as connection:
            if backend == "postgresql":
                connection.execute(sa.text("DROP SCHEMA fencemigrate CASCADE"))
            else:
                for name in sa.inspect(connection).get_table_names():
                    if name.startswith("fencemigrate_"):
                        connection.execute(sa.text(f"DROP TABLE {name}"))
    finally:
        engine.dispose()

    project.run_alembic("upgrade", "head").check()
    assert rows(backend_url, "SELECT version_num FROM alembic_version") == [("0005",)]
    assert json.loads(cli(project, "state", "--json").check().stdout)["fence_schema_version"] is None
