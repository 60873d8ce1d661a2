"""Bare ``fencemigrate check`` does what ``alembic check`` does, and the lint on top: under
``alias alembic=fencemigrate`` a CI gate that plain Alembic fails stays red.

Plain ``alembic check`` (the control) runs beside ``fencemigrate check`` on the same project and
database, on PostgreSQL and SQLite: up to date with the models (both pass), the models ahead of the
database (both fail), the database behind the revision files (both fail), each in Alembic's words.
A project whose env.py reaches no database fails the gate too; ``--no-db`` is the lint alone. Both
commands run as processes: the exit status a CI job sees is what is under test (Alembic's
``CommandError`` is 255, fencemigrate's failed check 1).

The project's env.py leaves fencemigrate's tables out (``include_name``) as a project that keeps
plain ``alembic check`` must: on SQLite they sit beside the application's, and plain Alembic would
want them dropped (fencemigrate leaves them out on its own).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.model_projects import apply, model_project
from support.project import MakeProject, Project, sqlite_url

# The operation plain `alembic check` prints for the column the database lacks (its repr of the Column).
ALEMBIC_EMAIL = "New upgrade operations detected: [('add_column', None, 'users', Column('email', String(length=255)"
EMAIL = "add_column users.email: column users.email (VARCHAR(255)) is in the models but not in the database"
NOT_UP_TO_DATE = "Target database is not up to date."
NO_DB = "--no-db: neither the database nor the models compared (FM408, what alembic check does)"
NO_DB_HINT = (
    "; check compares the database and the models, as `alembic check` does, so it fails without them: "
    "to lint the revision files alone, give --no-db"
)
MODELS_LINE = "from models import metadata as target_metadata"
SKIP_FENCE_TABLES = '''

def include_name(name, type_, parent_names):
    """fencemigrate's own tables (SQLite keeps them beside the application's) are not the models'."""
    return not (type_ == "table" and name.startswith("fencemigrate_"))
'''
EMAIL_REVISION = ("ALTER TABLE users ADD COLUMN email VARCHAR(255)", "ALTER TABLE users DROP COLUMN email")


@pytest.fixture(params=["postgresql", "sqlite"])
def project(request: pytest.FixtureRequest, make_project: MakeProject, tmp_path: Path) -> Project:
    """A project of ``models.py`` (users with an email) and revision 0001 (users without it), on an
    empty database of each kind; env.py leaves fencemigrate's tables out."""
    url = sqlite_url(tmp_path / "db.sqlite") if request.param == "sqlite" else str(request.getfixturevalue("pg_url"))
    project = model_project(make_project, url)
    project.edit_env(MODELS_LINE, MODELS_LINE + SKIP_FENCE_TABLES)
    project.set_env_option("include_name", "include_name", raw=True)
    return project


def test_up_to_date_both_pass(project: Project) -> None:
    project.add_revision("0002", "0001", *EMAIL_REVISION, slug="email")
    apply(project)
    control = project.run_alembic("check").check(0)
    assert "No new upgrade operations detected." in control.output

    result = project.run_cli("check").check(0)
    assert result.stdout == (
        "no problems found in 2 revision files, database checked; "
        "model comparison: No new upgrade operations detected\n"
    )


def test_models_ahead_of_the_database_both_fail(project: Project) -> None:
    apply(project)
    control = project.run_alembic("check").check(255)
    assert f"FAILED: {ALEMBIC_EMAIL}" in control.output

    result = project.run_cli("check").check(1)
    lines = result.stdout.splitlines()
    assert lines[1] == f"(database)  FM408  error     {EMAIL}"
    assert lines[-1] == (
        "1 error, 0 warnings in 1 revision file, database checked; "
        "model comparison: New upgrade operations detected (FM408)"
    )
    # The lint alone, asked for, does not see it.
    assert project.run_cli("check", "--no-db").check(0).stdout == f"no problems found in 1 revision file; {NO_DB}\n"


def test_database_behind_the_revision_files_both_fail(project: Project) -> None:
    apply(project)
    project.add_revision("0002", "0001", *EMAIL_REVISION, slug="email")
    control = project.run_alembic("check").check(255)
    assert f"FAILED: {NOT_UP_TO_DATE}" in control.output

    result = project.run_cli("check").check(1)
    lines = result.stdout.splitlines()
    assert lines[1].split()[:3] == ["migrations/versions/0002_email.py:9", "FM401", "error"]
    assert lines[-1] == (
        "1 error, 0 warnings in 2 revision files, database checked; "
        "model comparison: not run: Target database is not up to date"
    )
    payload = json.loads(project.run_cli("check", "--json").check(1).stdout)
    assert payload["notes"] == ["model comparison: not run: Target database is not up to date"]


def test_no_database_fails_the_gate_and_no_db_lints_alone(project: Project) -> None:
    """The URL ``alembic init`` leaves in alembic.ini: plain ``alembic check`` fails (a traceback,
    1), and so does ``fencemigrate check``, saying how to lint without a database."""
    project.set_url("driver://user:pass@localhost/dbname")
    control = project.run_alembic("check")
    assert control.code != 0 and "Can't load plugin: sqlalchemy.dialects:driver" in control.output

    # The placeholder URL is bad config (exit 2), as for every command that connects.
    result = project.run_cli("check").check(2)
    message = "bad database URL: SQLAlchemy cannot load the dialect or driver of driver:// (is its driver installed?)"
    assert (result.stdout, result.stderr) == ("", f"fencemigrate: usage: {message}\n")
    assert json.loads(project.run_cli("check", "--json").check(2).stdout) == {"status": "usage", "message": message}
    assert project.run_cli("check", "--db").check(2).stderr == f"fencemigrate: usage: {message}\n"

    assert project.run_cli("check", "--no-db").check(0).stdout == f"no problems found in 1 revision file; {NO_DB}\n"


def test_a_concurrent_index_in_an_autocommit_block_passes_the_gate(make_project: MakeProject, pg_url: str) -> None:
    """PostgreSQL's documented ``CREATE INDEX CONCURRENTLY`` in ``autocommit_block()``, applied for
    real: plain ``alembic check`` passes, and ``fencemigrate check`` warns about each block (it
    commits separately) without failing."""
    models = "import sqlalchemy as sa\n\nmetadata = sa.MetaData()\n" + (
        'users = sa.Table("users", metadata, sa.Column("id", sa.Integer, primary_key=True), '
        'sa.Column("name", sa.String(50), nullable=False), sa.Column("email", sa.String(255)))\n'
        'sa.Index("ix_users_email", users.c.email)\n'
    )
    project = model_project(make_project, pg_url, models)
    revision = project.add_revision(
        "0002",
        "0001",
        EMAIL_REVISION[0],
        slug="email",
        extra_upgrade_code="""\
with op.get_context().autocommit_block():
    op.execute("CREATE INDEX CONCURRENTLY ix_users_email ON users (email)")
""",
        extra_downgrade_code="""\
with op.get_context().autocommit_block():
    op.execute("DROP INDEX CONCURRENTLY ix_users_email")
op.execute("ALTER TABLE users DROP COLUMN email")
""",
    )
    apply(project)
    project.run_alembic("check").check(0)

    result = project.run_cli("check").check(0)
    blocks = [n for n, line in enumerate(revision.read_text().splitlines(), 1) if "autocommit_block()" in line]
    rows = [line.split()[:3] for line in result.stdout.splitlines() if line.startswith("migrations/")]
    assert rows == [[f"migrations/versions/0002_email.py:{line}", "FM201", "warning"] for line in blocks]
    assert len(blocks) == 2
    assert result.stdout.splitlines()[-1] == (
        "0 errors, 2 warnings in 2 revision files, database checked; "
        "model comparison: No new upgrade operations detected"
    )
