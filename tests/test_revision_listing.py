"""``current``, ``heads``, ``history`` and ``show`` with Alembic's options print what ``alembic``
prints, and with ``--json`` one JSON object built from the same revision files and database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.project import MakeProject, Project, sqlite_url


@pytest.fixture
def project(tmp_path: Path, make_project: MakeProject) -> Project:
    """a1 -> a2 -> a3 (branch "main"; a3 depends on b1) and b1 (branch "other"), the database at a2."""
    project = make_project(url=sqlite_url(tmp_path / "db.sqlite"))
    project.add_revision("a1", None, "CREATE TABLE a1 (id int)", slug="a1", branch_labels="main")
    project.add_revision("a2", "a1", "CREATE TABLE a2 (id int)", slug="a2")
    project.add_revision("a3", "a2", "CREATE TABLE a3 (id int)", slug="a3", depends_on="b1")
    project.add_revision("b1", None, "CREATE TABLE b1 (id int)", slug="b1", branch_labels="other")
    project.run_cli("upgrade", "a2", "--token", "5").check()
    return project


def test_text_is_alembics(project: Project) -> None:
    """The text of each command and option is Alembic's own, printed by Alembic."""
    for args in (
        ["current"],
        ["heads", "--resolve-dependencies"],
        ["heads", "-v"],
        ["history", "-i"],
        ["history", "--rev-range=-1:", "--indicate-current"],
        ["show", "current"],
    ):
        fenced = project.run_cli(*args).check()
        assert fenced.stdout == project.run_alembic(*args).check().stdout, args
        assert fenced.stdout, args  # something was listed


def test_current_check_heads_fails_as_alembic(project: Project) -> None:
    """Not on every head: Alembic's error, exit 1 (Alembic's 255); the database unchanged."""
    control = project.run_alembic("current", "--check-heads")
    assert control.code == 255 and "FAILED: Database is not on all head revisions" in control.stdout, control

    result = project.run_cli("current", "-c").check(1)
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == "fencemigrate: error: Database is not on all head revisions"

    as_json = json.loads(project.run_cli("current", "--check-heads", "--json").check(1).stdout)
    assert as_json == {"status": "error", "message": "Database is not on all head revisions"}
    assert json.loads(project.run_cli("current", "--json").check().stdout)["database_heads"] == ["a2"]


def _revision(project: Project, rev: str, down: list[str], **facts: Any) -> dict[str, Any]:
    return {
        "revision": rev,
        "down_revisions": down,
        "branch_labels": [],
        "depends_on": [],
        "is_head": False,
        "is_branch_point": False,
        "is_merge_point": False,
        "doc": rev,
        "path": str(project.versions / f"{rev}_{rev}.py"),
        **facts,
    }


def test_json(project: Project) -> None:
    """One object per command: the revisions under "current", "heads" or "revisions"."""
    a2 = _revision(project, "a2", ["a1"], branch_labels=["main"])
    a3 = _revision(project, "a3", ["a2"], branch_labels=["main"], depends_on=["b1"], is_head=True)
    b1 = _revision(project, "b1", [], branch_labels=["other"], is_head=True)

    def listed(*args: str) -> Any:
        result = project.run_cli(*args, "--json").check()
        assert "\n" not in result.stdout.rstrip("\n")
        return json.loads(result.stdout)

    assert listed("current") == {"status": "ok", "current": [a2], "database_heads": ["a2"]}
    assert listed("heads") == {"status": "ok", "heads": [a3, b1]}
    assert listed("heads", "--resolve-dependencies") == {"status": "ok", "heads": [a3]}
    history = listed("history", "-i")
    assert history["status"] == "ok" and history["database_heads"] == ["a2"]
    assert {item["revision"]: item["is_current"] for item in history["revisions"]} == {
        "a1": False,
        "a2": True,
        "a3": False,
        "b1": False,
    }
    assert listed("history", "-r", "a2:") == {"status": "ok", "revisions": [a3, a2]}
    assert listed("show", "a3") == {"status": "ok", "revisions": [a3]}
    assert listed("show", "current") == {"status": "ok", "revisions": [a2], "database_heads": ["a2"]}
