"""``revision --autogenerate`` leaves the fence's own tables out (issue 14): on SQLite and MariaDB
they live, prefixed, beside the application's, and plain Alembic writes ``op.drop_table`` for each."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.model_projects import apply, model_project, tables
from support.project import MakeProject, Project, sqlite_url

from fencemigrate.config import template_dir

OPERATION = re.compile(r"^    (op\.\w+\([^\n]*)$", re.MULTILINE)
FENCE_NAME = re.compile(r"'fencemigrate_|schema='fencemigrate'")  # a fence table, or the fence schema


@pytest.fixture(params=["sqlite", "mariadb"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database of each kind that keeps the fence tables beside the application's."""
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "db.sqlite")
    return str(request.getfixturevalue("mariadb_url"))


def revision_text(project: Project, rev_id: str) -> str:
    (path,) = project.versions.glob(f"{rev_id}_*.py")
    return path.read_text()


def upgrade_operations(project: Project, rev_id: str) -> list[str]:
    """The ``op.`` calls of the generated revision's upgrade(), one line each as written."""
    text = revision_text(project, rev_id)
    upgrade = text[text.index("def upgrade()") : text.index("def downgrade()")]
    return OPERATION.findall(upgrade)


@pytest.mark.parametrize("template", ["generic", template_dir()], ids=["generic", "fencemigrate-init"])
def test_autogenerate_writes_the_models_change_and_leaves_the_fence_tables_alone(
    make_project: MakeProject, url: str, template: str | Path
) -> None:
    project = model_project(make_project, url, template=template)
    apply(project)
    before = tables(url)
    assert any(name.startswith("fencemigrate_") for name in before)

    # The control: plain Alembic also wants the fence tables dropped.
    project.run_alembic("revision", "--autogenerate", "-m", "email", "--rev-id", "c0002").check(0)
    control = upgrade_operations(project, "c0002")
    assert any(line.startswith("op.drop_table('fencemigrate_") for line in control)
    for path in project.versions.glob("c0002_*.py"):
        path.unlink()

    project.run_cli("revision", "--autogenerate", "-m", "email", "--rev-id", "0002").check(0)
    written = upgrade_operations(project, "0002")
    assert written == [line for line in control if "fencemigrate_" not in line]
    assert written == ["op.add_column('users', sa.Column('email', sa.String(length=255), nullable=True))"]
    assert not FENCE_NAME.search(revision_text(project, "0002"))
    assert tables(url) == before


def test_autogenerate_with_include_schemas_leaves_the_fence_schema_alone(
    make_project: MakeProject, pg_url: str
) -> None:
    """On PostgreSQL the fence tables have their own schema, which env.py's ``include_schemas=True``
    makes Alembic compare too."""
    project = model_project(make_project, pg_url)
    project.edit_env("target_metadata=target_metadata", "target_metadata=target_metadata, include_schemas=True")
    apply(project)
    before = tables(pg_url)

    project.run_alembic("revision", "--autogenerate", "-m", "email", "--rev-id", "c0002").check(0)
    control = upgrade_operations(project, "c0002")
    assert any(line.startswith("op.drop_table('lease', schema='fencemigrate')") for line in control)
    for path in project.versions.glob("c0002_*.py"):
        path.unlink()

    project.run_cli("revision", "--autogenerate", "-m", "email", "--rev-id", "0002").check(0)
    written = upgrade_operations(project, "0002")
    assert written == [line for line in control if "schema='fencemigrate'" not in line]
    assert written == ["op.add_column('users', sa.Column('email', sa.String(length=255), nullable=True))"]
    assert not FENCE_NAME.search(revision_text(project, "0002"))
    assert tables(pg_url) == before
