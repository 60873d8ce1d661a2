"""``fencemigrate init``: a fence-aware Alembic environment that fences plain ``alembic`` too.

With it, plain ``alembic upgrade`` refuses to migrate without ``-x fence_token=N``;
with a token the run is fenced exactly like ``fencemigrate upgrade``. Controls: the
plain generic ``alembic init`` environment lets the same tokenless or stale write through.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.db import alembic_versions, query, schema_names, table_names
from support.fence_rows import add_claim_log, assert_fenced
from support.in_process import run_in_process
from support.project import MakeProject, Project, Result, run_command, script_command

from fencemigrate.config import template_dir

RESOURCE = "db/migrations"
TOKEN_REQUIRED = (
    "fencemigrate: usage: refusing to migrate without a fencing token: run `fencemigrate upgrade REV --token N`, "
    "or pass `-x fence_token=N` to alembic"
)


# -- helpers ---------------------------------------------------------------------------------


def ledger(url: str) -> list[tuple[str, int, str, str]]:
    """(revision, applied_token, holder, method) of every ledger row, by revision."""
    if "fencemigrate" not in schema_names(url):
        return []
    rows = query(
        url, "SELECT revision, applied_token, holder, method FROM fencemigrate.applied_revision ORDER BY revision"
    )
    return [(str(r[0]), int(r[1]), str(r[2]), str(r[3])) for r in rows]


def fences(url: str) -> dict[str, int]:
    """resource -> fence token ({} without the schema)."""
    if "fencemigrate" not in schema_names(url):
        return {}
    return {str(r[0]): int(r[1]) for r in query(url, "SELECT resource, token FROM fencemigrate.agent_fence")}


def snapshot(url: str) -> dict[str, Any]:
    """Schemas, tables, version rows, ledger and fences."""
    return {
        "schemas": schema_names(url),
        "tables": table_names(url),
        "versions": alembic_versions(url),
        "ledger": ledger(url),
        "fences": fences(url),
    }


EMPTY: dict[str, Any] = {"schemas": ["public"], "tables": [], "versions": None, "ledger": [], "fences": {}}


def init(directory: Path, target: str = "migrations") -> Result:
    """Run ``fencemigrate init TARGET`` in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return run_command(script_command("fencemigrate") + ["init", target], directory)


@pytest.fixture
def fenced_project(tmp_path: Path, pg_url: str) -> Project:
    """A project written by ``fencemigrate init migrations``, pointed at this test's database."""
    init(tmp_path / "fenced").check(0)
    project = Project(path=tmp_path / "fenced", url=pg_url, template="fencemigrate")
    project.set_url(pg_url)
    return project


def control_project(make_project: MakeProject, fenced: Project) -> Project:
    """A plain generic ``alembic init`` project on the same database with the same revision files."""
    control = make_project(name="control")
    for path in fenced.versions.glob("*.py"):
        shutil.copy(path, control.versions / path.name)
    control.remove_pycache()
    return control


# -- init --------------------------------------------------------------------------------------


def test_init_writes_a_fence_aware_environment(tmp_path: Path) -> None:
    """init in an empty directory writes alembic.ini, env.py, script.py.mako and versions/."""
    result = init(tmp_path / "new").check(0)
    root = tmp_path / "new"
    assert (root / "alembic.ini").is_file()
    assert (root / "migrations" / "env.py").is_file()
    assert (root / "migrations" / "script.py.mako").is_file()
    assert (root / "migrations" / "versions").is_dir()
    assert list((root / "migrations" / "versions").iterdir()) == []
    assert (root / "migrations" / "env.py").read_text() == (template_dir() / "env.py").read_text()
    assert "fencemigrate.alembic_env.run_migrations(context)" in (root / "migrations" / "env.py").read_text()
    assert "script_location = %(here)s/migrations" in (root / "alembic.ini").read_text()
    assert result.stdout.splitlines()[-1] == (
        "fence-aware Alembic environment written to migrations; it migrates a SQLite file beside "
        "alembic.ini until you change sqlalchemy.url there"
    )


def test_init_into_non_empty_directory_is_refused(tmp_path: Path) -> None:
    """init into a non-empty directory exits 2, writes nothing and leaves the directory alone."""
    root = tmp_path / "busy"
    (root / "migrations").mkdir(parents=True)
    (root / "migrations" / "keep.txt").write_text("mine")
    result = init(root).check(2)
    assert result.stderr.strip() == "fencemigrate: usage: directory 'migrations' exists and is not empty"
    assert sorted(p.name for p in (root / "migrations").iterdir()) == ["keep.txt"]
    assert (root / "migrations" / "keep.txt").read_text() == "mine"
    assert not (root / "alembic.ini").exists()


@pytest.mark.parametrize(
    ("location", "hint"),
    [
        pytest.param("%(here)s/migrations", "", id="same-directory"),
        pytest.param("%(here)s/old", " (point script_location at migrations to run this environment)", id="elsewhere"),
    ],
)
def test_init_says_it_kept_an_existing_alembic_ini(tmp_path: Path, location: str, hint: str) -> None:
    """An alembic.ini already there is kept byte for byte (as alembic init does), and init says so,
    with the sqlalchemy.url it still has (password hidden) and its script_location, instead of the
    "it migrates a SQLite file beside alembic.ini" line that is no longer true."""
    ini = tmp_path / "alembic.ini"
    text = (
        f"[alembic]\nscript_location = {location}\nsqlalchemy.url = postgresql+psycopg://bob:s3cretpw@db.example/app\n"
    )
    ini.write_text(text)

    result = run_in_process(tmp_path, "init", "migrations").check()
    assert ini.read_text() == text
    assert (tmp_path / "migrations" / "env.py").is_file()
    assert "s3cretpw" not in result.output
    assert result.stdout.splitlines()[-2:] == [
        f"{ini} already existed and was kept as it was: it still has sqlalchemy.url "
        f"postgresql+psycopg://bob:***@db.example/app and script_location {location}{hint}",
        "fence-aware Alembic environment written to migrations",
    ]

    shutil.rmtree(tmp_path / "migrations")
    payload = json.loads(run_in_process(tmp_path, "-q", "init", "migrations", "--json").check().stdout)
    assert payload["config_kept"] == {
        "sqlalchemy_url": "postgresql+psycopg://bob:***@db.example/app",
        "script_location": location,
        "runs_directory": not hint,
    }


def test_init_json_says_no_config_was_kept(tmp_path: Path) -> None:
    """A new alembic.ini: ``config_kept`` is null."""
    payload = json.loads(run_in_process(tmp_path, "-q", "init", "migrations", "--json").check().stdout)
    assert payload["config_kept"] is None


# -- plain alembic with the fence-aware env ----------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(("upgrade", "head"), id="upgrade"),
        pytest.param(("upgrade", "head", "--sql"), id="upgrade-sql"),
        pytest.param(("stamp", "head"), id="stamp"),
    ],
)
def test_plain_alembic_without_token_refuses(
    fenced_project: Project, make_project: MakeProject, pg_url: str, command: tuple[str, ...]
) -> None:
    """No token: plain alembic exits non-zero, says a token is required, and applies NOTHING.

    Control: the generic env applies the same revision without a token."""
    fenced_project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    result = fenced_project.run_alembic(*command)
    assert result.code == 2, result
    assert TOKEN_REQUIRED in result.stderr.splitlines(), result
    assert "CREATE TABLE t1" not in result.stdout
    assert snapshot(pg_url) == EMPTY

    control = control_project(make_project, fenced_project)
    control.run_alembic(*command).check(0)
    if "--sql" not in command:
        assert alembic_versions(pg_url) == ["a1"]


def test_plain_alembic_downgrade_without_token_refuses(fenced_project: Project, pg_url: str) -> None:
    """No token: a plain alembic downgrade is refused too and nothing is rolled back."""
    fenced_project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    fenced_project.run_alembic("-x", "fence_token=3", "upgrade", "head").check(0)
    before = snapshot(pg_url)
    result = fenced_project.run_alembic("downgrade", "base")
    assert result.code == 2, result
    assert TOKEN_REQUIRED in result.stderr.splitlines(), result
    assert snapshot(pg_url) == before


def test_plain_alembic_with_token_is_fenced(fenced_project: Project, make_project: MakeProject, pg_url: str) -> None:
    """``alembic -x fence_token=34`` applies and writes the ledger; token 33 afterwards is FENCED.

    Control: the generic env applies the same stale revision."""
    fenced_project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    fenced_project.run_alembic("-x", "fence_token=34", "-x", "fence_holder=agent-B", "upgrade", "head").check(0)
    assert table_names(pg_url) == ["alembic_version", "t1"]
    assert alembic_versions(pg_url) == ["a1"]
    assert ledger(pg_url) == [("a1", 34, "agent-B", "upgrade")]
    assert fences(pg_url) == {RESOURCE: 34}

    fenced_project.add_revision("b2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    before = snapshot(pg_url)
    assert_fenced(fenced_project.run_alembic("-x", "fence_token=33", "upgrade", "head"), token=33, fence=34)
    assert snapshot(pg_url) == before

    control = control_project(make_project, fenced_project)
    control.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    control.run_alembic("upgrade", "head").check(0)
    assert table_names(pg_url) == ["alembic_version", "t1", "t2"]
    assert alembic_versions(pg_url) == ["b2"]


def test_plain_alembic_fence_resource_argument(fenced_project: Project, pg_url: str) -> None:
    """``-x fence_resource=NAME`` fences that resource instead of db/migrations."""
    fenced_project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    fenced_project.run_alembic("-x", "fence_token=8", "-x", "fence_resource=db/other", "upgrade", "head").check(0)
    assert fences(pg_url) == {"db/other": 8}
    assert query(pg_url, "SELECT resource FROM fencemigrate.applied_revision") == [("db/other",)]


@pytest.mark.parametrize("token", ["abc", "0", "-1", "9223372036854775808"])
def test_plain_alembic_bad_token_is_refused(fenced_project: Project, pg_url: str, token: str) -> None:
    """A malformed ``-x fence_token`` exits 2 and touches nothing."""
    fenced_project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    result = fenced_project.run_alembic("-x", f"fence_token={token}", "upgrade", "head")
    assert result.code == 2, result
    assert f"fencemigrate: usage: invalid token {token!r}" in result.stderr, result
    assert snapshot(pg_url) == EMPTY


def test_fencemigrate_with_template_env_fences_once(fenced_project: Project, pg_url: str) -> None:
    """``fencemigrate upgrade --token 35`` through the template env: one claim for its transaction and
    one ledger row per revision (no double fencing); read-only ``alembic current`` needs no token."""
    fenced_project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    fenced_project.run_alembic("-x", "fence_token=34", "upgrade", "head").check(0)
    add_claim_log(pg_url)
    fenced_project.add_revision("b2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    fenced_project.add_revision("c3", "b2", "CREATE TABLE t3 (id int)", "DROP TABLE t3", slug="t3")

    result = fenced_project.run_cli("upgrade", "head", "--token", "35", "--holder", "agent-C").check(0)
    assert result.stdout.splitlines() == [
        "upgrade done: resource db/migrations, token 35, holder agent-C",
        "  applied b2 under token 35",
        "  applied c3 under token 35",
        "  heads now: c3",
    ]
    assert table_names(pg_url) == ["alembic_version", "t1", "t2", "t3"]
    assert alembic_versions(pg_url) == ["c3"]
    assert [row[:2] for row in ledger(pg_url)] == [("a1", 34), ("b2", 35), ("c3", 35)]
    # No double fencing: the run's one transaction claims as one fenced run does (with its first
    # step: its wait found the locks free), not once more per wrapper.
    assert query(pg_url, "SELECT count(*), count(DISTINCT xact::text) FROM audit.claim_log") == [(1, 1)]

    current = fenced_project.run_alembic("current").check(0)
    assert "c3 (head)" in current.stdout
    assert snapshot(pg_url)["versions"] == ["c3"]
    # A stale token through fencemigrate with this env is FENCED as well.
    fenced_project.add_revision("d4", "c3", "CREATE TABLE t4 (id int)", "DROP TABLE t4", slug="t4")
    before = snapshot(pg_url)
    assert_fenced(fenced_project.run_cli("upgrade", "head", "--token", "34"), token=34, fence=35)
    assert snapshot(pg_url) == before


def test_plain_alembic_downgrade_with_token_is_fenced(
    fenced_project: Project, make_project: MakeProject, pg_url: str
) -> None:
    """``alembic -x fence_token=N downgrade`` removes ledger rows under the fence; a stale token
    cannot roll back. Control: the generic env rolls back without any token."""
    fenced_project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    fenced_project.add_revision("b2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    fenced_project.run_alembic("-x", "fence_token=20", "upgrade", "head").check(0)
    fenced_project.run_alembic("-x", "fence_token=21", "downgrade", "a1").check(0)
    assert table_names(pg_url) == ["alembic_version", "t1"]
    assert alembic_versions(pg_url) == ["a1"]
    assert [row[:2] for row in ledger(pg_url)] == [("a1", 20)]
    assert fences(pg_url) == {RESOURCE: 21}

    before = snapshot(pg_url)
    assert_fenced(fenced_project.run_alembic("-x", "fence_token=20", "downgrade", "base"), token=20, fence=21)
    assert snapshot(pg_url) == before

    control = control_project(make_project, fenced_project)
    control.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    control.run_alembic("downgrade", "base").check(0)
    assert table_names(pg_url) == ["alembic_version"]


def test_plain_alembic_offline_with_token_writes_claims(fenced_project: Project) -> None:
    """``alembic -x fence_token=N upgrade head --sql`` writes the claim before each revision's DDL."""
    fenced_project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    fenced_project.add_revision("b2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    script = fenced_project.run_alembic("-x", "fence_token=12", "upgrade", "head", "--sql").check(0).stdout
    events = [
        line
        for line in script.splitlines()
        if line.startswith(("SELECT fencemigrate.claim", "CREATE TABLE t", "SELECT fencemigrate.record_apply"))
    ]
    assert [line.split("(")[0] for line in events] == [
        "SELECT fencemigrate.claim",
        "SELECT fencemigrate.claim",
        "CREATE TABLE t1 ",
        "SELECT fencemigrate.claim",
        "SELECT fencemigrate.record_apply",
        "SELECT fencemigrate.claim",
        "CREATE TABLE t2 ",
        "SELECT fencemigrate.claim",
        "SELECT fencemigrate.record_apply",
    ]
    assert events[0] == "SELECT fencemigrate.claim('db/migrations', 12);"
