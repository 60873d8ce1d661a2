"""Alembic's authoring commands through fencemigrate: ``revision``, ``merge``, ``branches``, ``edit``,
``ensure_version``, ``list_templates``, ``init -t/--package``.

Each one is run in one copy of a project with plain ``alembic`` and in another with
``fencemigrate``, and the files written are compared (the ``Create Date`` line aside). Where
fencemigrate refuses input Alembic accepts (a revision id that exists, a merge of one revision,
a branch label in use), a control shows what Alembic does with it.
"""

from __future__ import annotations

import json
import re
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from support.db import execute, schema_names, table_names
from support.db import query as pg_query
from support.project import MakeProject, Project, Result, run_command, script_command, sqlite_url
from support.sqlite_rows import query as sqlite_query
from support.sqlite_rows import table_names as sqlite_tables

CREATE_DATE = re.compile(r"^Create Date: .*$", re.MULTILINE)
TEMPLATES = ["async", "generic", "multidb", "pyproject", "pyproject_async"]


# -- helpers -----------------------------------------------------------------------------------


def twins(make_project: MakeProject, tmp_path: Path) -> tuple[Project, Project]:
    """Two projects on SQLite files of their own: one for plain alembic, one for fencemigrate."""
    return (
        make_project(url=sqlite_url(tmp_path / "alembic.sqlite"), name="alembic"),
        make_project(url=sqlite_url(tmp_path / "fencemigrate.sqlite"), name="fencemigrate"),
    )


def chain(project: Project) -> Project:
    """r01 <- r02, and a branch r01 <- r02b: two heads."""
    project.add_revision("r01", None, slug="one")
    project.add_revision("r02", "r01", slug="two")
    return project


def written_files(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> text, the Create Date line blanked), caches aside."""
    return {
        str(path.relative_to(root)): CREATE_DATE.sub("Create Date: <date>", path.read_text())
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".sqlite"
    }


def same_files(alembic: Project, fenced: Project, args: Callable[[Project], list[str]]) -> tuple[Result, Result]:
    """Run ``alembic ARGS`` and ``fencemigrate ARGS`` in their projects; assert the same files result."""
    control = alembic.run_alembic(*args(alembic)).check()
    ours = fenced.run_cli(*args(fenced)).check()
    assert written_files(fenced.script_dir) == written_files(alembic.script_dir)
    return control, ours


def editor_script(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An $EDITOR that appends the file it was given to a record file."""
    record = tmp_path / "edited.txt"
    editor = tmp_path / "editor.sh"
    editor.write_text(f'#!/bin/sh\necho "$1" >> {record}\n')
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    return {"EDITOR": str(editor), "VISUAL": None}, record


def version_files(project: Project) -> list[str]:
    return sorted(path.name for path in project.versions.glob("*.py"))


# -- revision ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(lambda p: ["revision", "-m", "x", "--rev-id", "a1"], id="message-rev-id"),
        pytest.param(lambda p: ["revision", "--rev-id", "a2"], id="no-message"),
        pytest.param(lambda p: ["revision", "-m", "side", "--head", "r01", "--splice", "--rev-id", "s1"], id="splice"),
        pytest.param(
            lambda p: ["revision", "-m", "f", "--head", "base", "--branch-label", "feature", "--rev-id", "f1"],
            id="branch-label",
        ),
        pytest.param(
            lambda p: ["revision", "-m", "d", "--depends-on", "r01", "--depends-on", "r02", "--rev-id", "d1"],
            id="depends-on",
        ),
        pytest.param(
            lambda p: ["revision", "-m", "o", "--rev-id", "o1", "--version-path", str(p.script_dir / "other")],
            id="version-path",
        ),
        pytest.param(lambda p: ["revision", "-m", "e", "--rev-id", "e1", "--sql"], id="revision-environment-sql"),
    ],
)
def test_revision_writes_the_file_alembic_writes(
    make_project: MakeProject, tmp_path: Path, args: Callable[[Project], list[str]]
) -> None:
    alembic, fenced = twins(make_project, tmp_path)
    for project in (alembic, fenced):
        chain(project)
        if "--version-path" in args(project):
            (project.script_dir / "other").mkdir()
            project.set_ini_option("version_locations", f"{project.versions} {project.script_dir / 'other'}")
            project.set_ini_option("path_separator", "space")
        if "--sql" in args(project):
            project.set_ini_option("revision_environment", "true")  # env.py runs, offline
    control, ours = same_files(alembic, fenced, args)
    assert ours.stdout == control.stdout.replace(str(alembic.path), str(fenced.path))
    assert not (tmp_path / "fencemigrate.sqlite").exists()  # nothing connected to the database


def test_revision_json_names_the_file(make_project: MakeProject, tmp_path: Path) -> None:
    project = chain(make_project(url=sqlite_url(tmp_path / "db.sqlite")))
    result = project.run_cli("revision", "-m", "add thing", "--rev-id", "a1", "--depends-on", "r01", "--json").check()
    path = project.versions / "a1_add_thing.py"
    assert json.loads(result.stdout) == {
        "status": "ok",
        "revisions": [
            {
                "id": "a1",
                "path": str(path.resolve()),
                "message": "add thing",
                "down_revisions": ["r02"],
                "branch_labels": [],
                "depends_on": ["r01"],
            }
        ],
    }
    assert result.stderr == f"Generating {path} ...  done\n"  # Alembic's line, off stdout


def test_revision_autogenerate_writes_alembics_operations(make_project: MakeProject, pg_url: str) -> None:
    """env.py reads the database as alembic's does; the same operations come out; nothing is written to it."""
    execute(pg_url, "CREATE TABLE account (id integer PRIMARY KEY, name text)")
    alembic, fenced = make_project(name="alembic"), make_project(name="fencemigrate")
    for project in (alembic, fenced):
        with_models(project)
    fenced.run_cli("revision", "--autogenerate", "-m", "auto", "--rev-id", "g1").check()
    assert table_names(pg_url) == ["account"]  # not even an empty alembic_version
    assert schema_names(pg_url) == ["public"]
    alembic.run_alembic("revision", "--autogenerate", "-m", "auto", "--rev-id", "g1").check()
    assert table_names(pg_url) == ["account", "alembic_version"]  # alembic's leaves its version table
    assert written_files(fenced.versions) == written_files(alembic.versions)
    text = (fenced.versions / "g1_auto.py").read_text()
    assert "op.add_column('account', sa.Column('email', sa.String(length=200), nullable=True))" in text
    assert "op.drop_column('account', 'name')" in text


def with_models(project: Project) -> None:
    """env.py's target_metadata: account(id, email), against a database with account(id, name)."""
    project.edit_env(
        "target_metadata = None",
        "import sqlalchemy as sa\n"
        "target_metadata = sa.MetaData()\n"
        'sa.Table("account", target_metadata, sa.Column("id", sa.Integer, primary_key=True),\n'
        '         sa.Column("email", sa.String(200)))',
    )


def test_revision_autogenerate_with_the_fence_aware_env(tmp_path: Path) -> None:
    """A fencemigrate init env.py refuses to migrate without a token, but autogenerate reads only:
    it works with fencemigrate and with plain alembic, without -x fence_token."""
    database = tmp_path / "db.sqlite"
    sqlite_query(database, "CREATE TABLE account (id integer PRIMARY KEY, name text)")
    projects = []
    for name in ("alembic", "fencemigrate"):
        (tmp_path / name).mkdir()
        run_command(script_command("fencemigrate") + ["init", "migrations"], tmp_path / name).check()
        project = Project(path=tmp_path / name, url=sqlite_url(database), template="fencemigrate")
        project.set_url(project.url)
        with_models(project)
        projects.append(project)
    alembic, fenced = projects
    fenced.run_cli("revision", "--autogenerate", "-m", "auto", "--rev-id", "g1").check()
    assert sqlite_tables(database) == ["account"]
    alembic.run_alembic("revision", "--autogenerate", "-m", "auto", "--rev-id", "g1").check()
    assert written_files(fenced.versions) == written_files(alembic.versions)
    assert "op.add_column('account', sa.Column('email'" in (fenced.versions / "g1_auto.py").read_text()


def test_revision_autogenerate_on_a_database_behind_head_is_an_error(project: Project, pg_url: str) -> None:
    chain(project)
    result = project.run_cli("revision", "--autogenerate", "-m", "x", "--rev-id", "a1")
    assert result.code == 1, result
    assert result.stderr.splitlines()[-1] == "fencemigrate: error: Target database is not up to date."
    assert version_files(project) == ["r01_one.py", "r02_two.py"]
    assert table_names(pg_url) == []


# -- merge and branches ----------------------------------------------------------------------------


def two_heads(project: Project) -> Project:
    chain(project)
    project.add_revision("r02b", "r01", slug="other")
    return project


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["merge", "heads", "-m", "merge them", "--rev-id", "m1"], id="heads"),
        pytest.param(["merge", "r02", "r02b", "--branch-label", "merged", "--rev-id", "m2"], id="named"),
        pytest.param(["merge", "r01", "r02b", "--splice", "--rev-id", "m3"], id="splice"),
    ],
)
def test_merge_writes_the_file_alembic_writes(make_project: MakeProject, tmp_path: Path, args: list[str]) -> None:
    alembic, fenced = (two_heads(project) for project in twins(make_project, tmp_path))
    same_files(alembic, fenced, lambda project: args)


def test_merge_json(make_project: MakeProject, tmp_path: Path) -> None:
    project = two_heads(make_project(url=sqlite_url(tmp_path / "db.sqlite")))
    result = project.run_cli("merge", "heads", "-m", "join", "--rev-id", "m1", "--json").check()
    assert json.loads(result.stdout) == {
        "status": "ok",
        "revision": {
            "id": "m1",
            "path": str((project.versions / "m1_join.py").resolve()),
            "message": "join",
            "down_revisions": ["r02", "r02b"],
            "branch_labels": [],
            "depends_on": [],
        },
    }


@pytest.mark.parametrize("verbose", [[], ["-v"]], ids=["plain", "verbose"])
def test_branches_prints_what_alembic_prints(make_project: MakeProject, tmp_path: Path, verbose: list[str]) -> None:
    project = two_heads(make_project(url=sqlite_url(tmp_path / "db.sqlite")))
    project.add_revision("r03", "r02", slug="three")
    same_order = {"PYTHONHASHSEED": "0"}  # Alembic lists a revision's children in its set's order
    control = project.run_alembic("branches", *verbose, env=same_order).check()
    assert "r01" in control.stdout
    # A process: the hash seed is fixed when the interpreter starts.
    assert project.run_cli_process("branches", *verbose, env=same_order).check().stdout == control.stdout
    payload = json.loads(project.run_cli("branches", "--json").check().stdout)
    assert payload == {"status": "ok", "branch_points": [{"revision": "r01", "children": ["r02", "r02b"]}]}


# -- edit ------------------------------------------------------------------------------------------


def test_edit_opens_the_revision_file_in_editor(make_project: MakeProject, tmp_path: Path) -> None:
    project = chain(make_project(url=sqlite_url(tmp_path / "db.sqlite")))
    env, record = editor_script(tmp_path)
    project.run_alembic("edit", "r01", env=env).check()
    assert project.run_cli("edit", "r01", env=env).check().stdout == ""
    path = str(project.versions / "r01_one.py")
    assert record.read_text().splitlines() == [path, path]
    result = project.run_cli("edit", "r02", "--json", env=env).check()
    assert json.loads(result.stdout) == {"status": "ok", "edited": [str(project.versions / "r02_two.py")]}


def test_edit_current_opens_the_databases_revision(make_project: MakeProject, tmp_path: Path) -> None:
    project = chain(make_project(url=sqlite_url(tmp_path / "db.sqlite")))
    env, record = editor_script(tmp_path)
    missing = project.run_cli("edit", "current", env=env)  # a read: it never creates the database
    assert missing.code == 1 and "no SQLite database at" in missing.stderr, missing
    assert not (tmp_path / "db.sqlite").exists()
    sqlite3.connect(tmp_path / "db.sqlite").close()  # an empty database
    result = project.run_cli("edit", "current", env=env)
    assert result.code == 2, result
    assert result.stderr.splitlines()[-1] == "fencemigrate: usage: No current revisions"
    assert not record.exists()
    project.run_alembic("upgrade", "r01").check()
    project.run_cli("edit", "current", env=env).check()
    assert record.read_text().splitlines() == [str(project.versions / "r01_one.py")]


def test_edit_without_an_editor_is_an_error(make_project: MakeProject, tmp_path: Path) -> None:
    project = chain(make_project(url=sqlite_url(tmp_path / "db.sqlite")))
    result = project.run_cli(
        "edit", "r01", env={"EDITOR": str(tmp_path / "no-such-editor"), "VISUAL": None, "PATH": str(tmp_path)}
    )
    assert result.code == 1, result
    assert result.stderr.startswith("fencemigrate: error: Error executing editor (")


# -- bad input: a clear message, exit 2, nothing written ------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["edit", "nosuch"], "Can't locate revision identified by 'nosuch'"),
        (["revision", "-m", "x", "--head", "nosuch"], "Can't locate revision identified by 'nosuch'"),
        (
            ["revision", "-m", "x", "--head", "r01"],
            "Revision r01 is not a head revision; please specify --splice to create a new branch from this revision",
        ),
        (["revision", "-m", "x", "--depends-on", "nosuch"], "Can't locate revision identified by 'nosuch'"),
        (["revision", "-m", "x", "--rev-id", "a@b"], "Character(s) '@' not allowed in revision identifier 'a@b'"),
        (["revision", "--autogenerate", "--sql"], "Using --sql with --autogenerate does not make any sense"),
        (
            ["revision", "--sql"],
            "Using --sql with the revision command when revision_environment is not configured does not make any sense",
        ),
        (
            ["revision", "-m", "x", "--version-path", "/nowhere"],
            "Path /nowhere is not represented in current version locations",
        ),
        (["merge", "r01", "nosuch"], "Can't locate revision identified by 'nosuch'"),
        (["merge", "heads"], "merge needs two or more revisions; 'heads' names only r02: nothing to merge"),
        (
            ["init", "-t", "nosuch", "other"],
            "no template 'nosuch': choose one of fencemigrate, async, generic, multidb, pyproject, pyproject_async "
            "(see `fencemigrate list_templates`)",
        ),
        (["init", "migrations"], "directory 'migrations' exists and is not empty"),
    ],
)
def test_bad_input_is_refused_and_writes_nothing(
    make_project: MakeProject, tmp_path: Path, args: list[str], message: str
) -> None:
    project = chain(make_project(url=sqlite_url(tmp_path / "db.sqlite")))
    env, record = editor_script(tmp_path)
    before = written_files(project.path)
    result = project.run_cli(*args, env=env)
    assert (result.code, result.stdout, result.stderr) == (2, "", f"fencemigrate: usage: {message}\n")
    assert written_files(project.path) == before
    assert not record.exists() and not (project.path / "other").exists()
    as_json = project.run_cli(*args, "--json", env=env)
    assert (as_json.code, json.loads(as_json.stdout)) == (2, {"status": "usage", "message": message})
    assert written_files(project.path) == before


def test_an_existing_rev_id_is_refused(make_project: MakeProject, tmp_path: Path) -> None:
    """Control: alembic writes a second file with the same id, and the graph has a duplicate."""
    project = chain(make_project(url=sqlite_url(tmp_path / "db.sqlite")))
    result = project.run_cli("revision", "-m", "again", "--rev-id", "r01")
    assert (result.code, result.stderr) == (
        2,
        (
            f"fencemigrate: usage: revision id 'r01' already exists ({project.versions / 'r01_one.py'}); "
            "choose another --rev-id\n"
        ),
    )
    assert version_files(project) == ["r01_one.py", "r02_two.py"]
    project.run_alembic("revision", "-m", "again", "--rev-id", "r01").check()
    assert version_files(project) == ["r01_again.py", "r01_one.py", "r02_two.py"]


def test_a_merge_of_one_revision_is_refused(make_project: MakeProject, tmp_path: Path) -> None:
    """Control: alembic writes an ordinary revision on top of it and calls it a merge."""
    project = chain(make_project(url=sqlite_url(tmp_path / "db.sqlite")))
    result = project.run_cli("merge", "r02", "-m", "m", "--rev-id", "m1")
    assert (result.code, result.stderr) == (
        2,
        "fencemigrate: usage: merge needs two or more revisions; 'r02' names only r02: nothing to merge\n",
    )
    assert version_files(project) == ["r01_one.py", "r02_two.py"]
    project.run_alembic("merge", "r02", "-m", "m", "--rev-id", "m1").check()
    assert version_files(project) == ["m1_m.py", "r01_one.py", "r02_two.py"]


def test_a_branch_label_in_use_is_refused_and_no_file_is_left(make_project: MakeProject, tmp_path: Path) -> None:
    """Alembic checks the label after writing the file: control, its file stays behind."""
    project = make_project(url=sqlite_url(tmp_path / "db.sqlite"))
    project.add_revision("r01", None, slug="one", branch_labels="feature")
    result = project.run_cli("revision", "-m", "x", "--head", "base", "--branch-label", "feature", "--rev-id", "x1")
    assert result.code == 2, result
    assert result.stderr.startswith(
        "fencemigrate: usage: Branch name 'feature' in revision x1 already used by revision r01"
    )
    assert version_files(project) == ["r01_one.py"]
    control = project.run_alembic(
        "revision", "-m", "x", "--head", "base", "--branch-label", "feature", "--rev-id", "x1"
    )
    assert control.code != 0
    assert version_files(project) == ["r01_one.py", "x1_x.py"]


# -- init and list_templates ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [["-t", "generic"], ["-t", "generic", "--package"], ["-t", "async"], ["-t", "pyproject"], ["-t", "multidb"]],
    ids=lambda options: "-".join(option.strip("-") for option in options),
)
def test_init_with_an_alembic_template_writes_what_alembic_writes(tmp_path: Path, options: list[str]) -> None:
    for name, command in (("alembic", "alembic"), ("fencemigrate", "fencemigrate")):
        (tmp_path / name).mkdir()
        run_command(script_command(command) + ["init", *options, "migrations"], tmp_path / name).check()
    assert written_files(tmp_path / "fencemigrate") == written_files(tmp_path / "alembic")
    assert written_files(tmp_path / "alembic")


def test_init_package_with_the_fence_aware_template(tmp_path: Path) -> None:
    result = run_command(
        script_command("fencemigrate") + ["init", "--package", "migrations", "--json"], tmp_path
    ).check()
    assert json.loads(result.stdout) == {
        "status": "ok",
        "directory": "migrations",
        "template": "fencemigrate",
        "fence_aware": True,
        "package": True,
        "config_file": str(tmp_path / "alembic.ini"),
        "config_kept": None,
    }
    assert (tmp_path / "migrations" / "__init__.py").read_text() == ""
    assert (tmp_path / "migrations" / "versions" / "__init__.py").read_text() == ""
    assert "fencemigrate.alembic_env.run_migrations(context)" in (tmp_path / "migrations" / "env.py").read_text()
    assert "Creating directory" in result.stderr  # Alembic's own lines, off stdout


def test_init_with_an_alembic_template_says_it_is_not_fence_aware(tmp_path: Path) -> None:
    result = run_command(script_command("fencemigrate") + ["init", "-t", "generic", "migrations"], tmp_path).check()
    assert result.stdout.splitlines()[-1] == (
        "Alembic environment (template generic) written to migrations; edit sqlalchemy.url in alembic.ini; "
        "its env.py is not fence-aware: plain alembic runs it without a token"
    )


def test_list_templates_lists_alembics_and_the_fence_aware_one(tmp_path: Path) -> None:
    control = run_command(script_command("alembic") + ["list_templates"], tmp_path).check()
    alembic_lines = [line for line in control.stdout.splitlines() if " - " in line]
    assert sorted(line.split(" - ")[0] for line in alembic_lines) == TEMPLATES
    ours = run_command(script_command("fencemigrate") + ["list_templates"], tmp_path).check()
    lines = ours.stdout.splitlines()
    assert lines[:3] == [
        "Available templates:",
        "",
        "fencemigrate - Fence-aware Alembic environment, written by `fencemigrate init`. (fence-aware; the default)",
    ]
    assert lines[3 : 3 + len(alembic_lines)] == sorted(alembic_lines)
    assert lines[-1] == "  fencemigrate init --template generic ./scripts"
    payload = json.loads(run_command(script_command("fencemigrate") + ["list_templates", "--json"], tmp_path).stdout)
    assert [(t["name"], t["fence_aware"], t["default"]) for t in payload["templates"]] == [
        ("fencemigrate", True, True),
        *((name, False, False) for name in TEMPLATES),
    ]
    quiet = run_command(script_command("fencemigrate") + ["-q", "list_templates"], tmp_path).check()
    assert (
        quiet.stdout == run_command(script_command("alembic") + ["-q", "list_templates"], tmp_path).check().stdout == ""
    )


# -- ensure_version ------------------------------------------------------------------------------------


def test_ensure_version_on_an_unfenced_database_is_alembics(project: Project, pg_url: str) -> None:
    result = project.run_cli("ensure_version").check()
    assert result.stdout == "version table alembic_version: created; the database is not fenced (no fence schema)\n"
    assert table_names(pg_url) == ["alembic_version"]
    assert schema_names(pg_url) == ["public"]
    again = project.run_cli("ensure_version", "--json").check()
    assert json.loads(again.stdout) == {
        "status": "ok",
        "version_table": "alembic_version",
        "offline": False,
        "created": False,
        "tokenless_writes": None,
    }


def test_ensure_version_sql_writes_alembics_script(project: Project, pg_url: str) -> None:
    control = project.run_alembic("ensure_version", "--sql").check()
    assert "CREATE TABLE alembic_version" in control.stdout
    assert project.run_cli("ensure_version", "--sql").check().stdout == control.stdout
    ours = project.run_cli("ensure_version", "--sql", "--json").check()
    assert ours.stdout == control.stdout
    assert json.loads(ours.stderr.splitlines()[-1]) == {
        "status": "ok",
        "version_table": "alembic_version",
        "offline": True,
        "created": False,
        "tokenless_writes": None,
    }
    assert table_names(pg_url) == []


def test_ensure_version_guards_a_new_version_table_on_a_fenced_postgresql_database(
    project: Project, pg_url: str
) -> None:
    """Control: plain alembic's ensure_version leaves it unguarded, and a tokenless stamp goes through."""
    project.add_revision("r01", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1")
    project.run_cli("install").check()
    execute(pg_url, "DROP TABLE alembic_version")
    result = project.run_cli("ensure_version").check()
    assert result.stdout == (
        "version table alembic_version: created; guarded (the database refuses writes to it without a fencing token)\n"
    )
    refused = project.run_alembic("stamp", "r01")
    assert refused.code != 0 and "fencemigrate refused this" in refused.stderr, refused
    assert query_versions(pg_url) == []

    execute(pg_url, "DROP TABLE alembic_version")
    project.run_alembic("ensure_version").check()
    project.run_alembic("stamp", "r01").check()
    assert query_versions(pg_url) == ["r01"]


def query_versions(url: str) -> list[str]:
    return [str(row[0]) for row in pg_query(url, "SELECT version_num FROM alembic_version")]


def test_ensure_version_guards_a_new_version_table_on_a_fenced_sqlite_database(
    make_project: MakeProject, tmp_path: Path
) -> None:
    query = sqlite_query
    database = tmp_path / "db.sqlite"
    project = make_project(url=sqlite_url(database))
    project.add_revision("r01", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1")
    project.run_cli("install").check()
    query(database, "DROP TABLE alembic_version")
    result = project.run_cli("ensure_version", "--json").check()
    assert json.loads(result.stdout) == {
        "status": "ok",
        "version_table": "alembic_version",
        "offline": False,
        "created": True,
        "tokenless_writes": "refused",
    }
    refused = project.run_alembic("stamp", "r01")
    assert refused.code != 0 and "fencemigrate refused this" in refused.stderr, refused
    assert query(database, "SELECT version_num FROM alembic_version") == []

    query(database, "DROP TABLE alembic_version")
    project.run_alembic("ensure_version").check()
    project.run_alembic("stamp", "r01").check()
    assert query(database, "SELECT version_num FROM alembic_version") == [("r01",)]


# -- install --json ------------------------------------------------------------------------------------


def test_install_json(project: Project) -> None:
    first = project.run_cli("install", "--json").check()
    assert json.loads(first.stdout) == {
        "status": "ok",
        "offline": False,
        "installed": True,
        "restored": [],
        "tokenless_writes": None,
        "granted": None,
        "adopted": None,
    }
    second = project.run_cli("install", "--allow-tokenless-writes", "--json").check()
    assert json.loads(second.stdout) == {
        "status": "ok",
        "offline": False,
        "installed": False,
        "restored": [],
        "tokenless_writes": "allowed",
        "granted": None,
        "adopted": None,
    }
    script = project.run_cli("install", "--sql", "--json").check()
    assert script.stdout == project.run_cli("install", "--sql").check().stdout
    assert json.loads(script.stderr) == {"status": "ok", "offline": True}
    assert project.run_cli("install").check().stdout == "already installed\n"
