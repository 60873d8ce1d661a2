"""A stale writer whose command the current state makes invalid is FENCED, not told it misused the CLI.

Agent A (token 5) applied 0001..0003; agent B (token 6) then rolled 0002 and 0003 back. A's
``reapply 0002`` and ``downgrade 0002`` name revisions that are no longer applied: under A's
superseded token they are FENCED (exit 3, the agent text: re-read and re-plan), not "bad usage"
(exit 2), which would send an agent to fix its command and try again. Nothing is written either way.
Control: the same commands under B's current token stay usage errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from support.db import alembic_versions
from support.fence_rows import fence_tokens
from support.mysql_rows import fence_tokens as mysql_fence_tokens
from support.mysql_rows import versions as mysql_versions
from support.project import MakeProject, Project, Result
from support.sqlite_rows import alembic_versions as sqlite_versions
from support.sqlite_rows import make_sqlite_project
from support.sqlite_rows import query as sqlite_query

Snapshot = Callable[[], tuple[list[str], dict[str, int]]]


@pytest.fixture(params=["postgresql", "sqlite", "mariadb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Project, Snapshot]:
    """A project on each backend, and a snapshot of its version rows and fence tokens."""
    if request.param == "sqlite":
        project = make_sqlite_project(tmp_path)
        database = tmp_path / "db.sqlite"
        return project, lambda: (
            sqlite_versions(database),
            dict(sqlite_query(database, "SELECT resource, token FROM fencemigrate_agent_fence")),
        )
    make_project: MakeProject = request.getfixturevalue("make_project")
    if request.param == "mariadb":
        url: str = request.getfixturevalue("mysql_url")
        return make_project(url=url), lambda: (mysql_versions(url), mysql_fence_tokens(url))
    project = make_project()
    return project, lambda: (alembic_versions(project.url) or [], fence_tokens(project.url))


def run(project: Project, *args: str, token: int) -> Result:
    return project.run_cli(*args, "--token", str(token), "--holder", f"agent-{token}", "--json")


def b_rolled_back_a(project: Project) -> None:
    """A (5) applies 0001..0003; B (6) downgrades to 0001."""
    for revision, down in (("0001", None), ("0002", "0001"), ("0003", "0002")):
        project.add_revision(revision, down, f"CREATE TABLE t{revision} (id int)", f"DROP TABLE t{revision}")
    run(project, "upgrade", "head", token=5).check(0)
    run(project, "downgrade", "0001", token=6).check(0)


@pytest.mark.parametrize("command", [("reapply", "0002"), ("downgrade", "0002")], ids=["reapply", "downgrade"])
def test_stale_command_invalid_for_the_current_state_is_fenced(
    backend: tuple[Project, Snapshot], command: tuple[str, str]
) -> None:
    project, snapshot = backend
    b_rolled_back_a(project)
    before = snapshot()
    assert before == (["0001"], {"db/migrations": 6})

    stale = run(project, *command, token=5)
    assert stale.code == 3, str(stale)
    payload = json.loads(stale.stdout)
    assert (payload["status"], payload["token"], payload["fence_token"]) == ("fenced", 5, 6)
    assert payload["reason"] == "token 6 has since written to db/migrations"
    assert "Do not retry, rebase, renumber, or re-apply." in payload["message"]
    assert snapshot() == before

    # Control: under the current token the same command is still bad usage, and changes nothing.
    current = run(project, *command, token=6)
    assert current.code == 2, str(current)
    assert json.loads(current.stdout)["status"] == "usage"
    assert snapshot() == before


def test_a_revision_the_files_do_not_have_is_bad_usage_under_any_token(backend: tuple[Project, Snapshot]) -> None:
    """Unlike a target the current state makes invalid, an unknown revision is the command's own
    fault whatever the database holds: refused as usage before connecting, stale token or not."""
    project, snapshot = backend
    b_rolled_back_a(project)
    before = snapshot()
    for token in (5, 6):
        result = run(project, "upgrade", "nosuch", token=token)
        assert result.code == 2, str(result)
        assert json.loads(result.stdout) == {
            "status": "usage",
            "message": "Can't locate revision identified by 'nosuch'",
        }
    assert snapshot() == before
