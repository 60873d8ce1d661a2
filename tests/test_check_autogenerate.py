"""``check --db`` runs Alembic's own ``check`` as rule FM408 (model-drift): env.py's
``target_metadata`` compared with the database by autogenerate, each difference a finding.

Real projects (``alembic init`` generic, and ``fencemigrate init``'s env.py) whose models live in
``models.py``, on PostgreSQL, SQLite and MariaDB. Each behaviour has plain ``alembic check`` beside
it as the control, and the lint alone (``--no-db``, or ``--ignore FM408``) missing the difference.
Checking writes nothing: the table lists are compared before and after.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, inspect
from support.model_projects import MODELS, apply, model_project, tables
from support.project import MakeProject, Project, sqlite_url

from fencemigrate.config import template_dir

FIX = (
    "write the revision that makes the database match the models (`alembic revision --autogenerate`, "
    "then review it), or change the models to match the database"
)
EMAIL = "add_column users.email: column users.email (VARCHAR(255)) is in the models but not in the database"
NO_METADATA = "model comparison: env.py has no target_metadata"
NONE_DETECTED = "; model comparison: No new upgrade operations detected"  # alembic check's words
DETECTED = "; model comparison: New upgrade operations detected (FM408)"

# A different schema in every way autogenerate looks: a table and its index the models do not
# have, a column missing, a column too many, a column of another type and nullability.
DRIFTED_MODELS = """\
import sqlalchemy as sa

metadata = sa.MetaData()
sa.Table(
    "users", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(100), nullable=False),
    sa.Column("email", sa.String(255)),
)
"""

SKIP_EMAIL = '''

def include_object(object, name, type_, reflected, compare_to):
    """email is added by hand, outside the migrations."""
    return not (type_ == "column" and name == "email")
'''

DROP_EMAIL = '''

def process_revision_directives(context, revision, directives):
    """email is added by hand: take it out of what autogenerate would do."""
    for upgrade_ops in directives[0].upgrade_ops_list:
        for table_ops in upgrade_ops.ops:
            if hasattr(table_ops, "ops"):  # not a whole table (SQLite's fence tables, to drop)
                table_ops.ops = [op for op in table_ops.ops if getattr(op, "column", None) is None
                                 or op.column.name != "email"]
'''


# One operation of the list `alembic check` prints: ('add_column', None, 'users', Column('email', ...),
# ('modify_type', None, 'users', 'name', ...), ('remove_table', Table('legacy', ...).
ALEMBIC_OPERATION = re.compile(
    r"\('(?P<op>(?:add|remove|modify)_[a-z_]+)', "
    r"(?:None, '(?P<table>\w+)', (?:'(?P<column>\w+)'|Column\('(?P<added>\w+)')|\w+\((?:'(?P<name>\w+)')?)"
)


@pytest.fixture(params=["postgresql", "sqlite", "mariadb"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh, empty database of each kind."""
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "db.sqlite")
    return str(request.getfixturevalue("pg_url" if request.param == "postgresql" else "mariadb_url"))


def versions(url: str) -> list[str] | None:
    """The rows of alembic_version (None: no version table)."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            if not inspect(connection).has_table("alembic_version"):
                return None
            return sorted(row[0] for row in connection.exec_driver_sql("SELECT version_num FROM alembic_version"))
    finally:
        engine.dispose()


def alembic_check(project: Project, code: int) -> list[str]:
    """Plain ``alembic check`` (the control): the operations it detected, sorted, as ``op subject``."""
    result = project.run_alembic("check").check(code)
    found = []
    for match in ALEMBIC_OPERATION.finditer(result.stdout):
        column = match["column"] or match["added"]
        subject = f"{match['table']}.{column}" if column else match["name"]
        found.append(match["op"] if subject is None else f"{match['op']} {subject}")
    return sorted(found)


def application(operations: list[str]) -> list[str]:
    """The operations on the application's tables: on SQLite and MySQL, plain ``alembic check`` also
    reports the fence tables beside them (FM408 leaves them out)."""
    return [operation for operation in operations if " fencemigrate_" not in operation]


def check_json(project: Project, *args: str, code: int) -> dict[str, Any]:
    payload = json.loads(project.run_cli("check", "--db", "--json", *args).check(code).stdout)
    assert isinstance(payload, dict)
    return payload


def messages(payload: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    return [(item["rule"], item["file"], item["message"]) for item in payload["findings"]]


def test_a_column_the_database_lacks_is_found_as_alembic_check_finds_it(make_project: MakeProject, url: str) -> None:
    project = model_project(make_project, url)
    apply(project)
    before = (tables(url), versions(url))

    # The control: Alembic's own check names the difference and fails (and on SQLite and MariaDB
    # also wants the fence tables dropped).
    control = alembic_check(project, 255)
    assert application(control) == ["add_column users.email"]
    assert (control != application(control)) == (not url.startswith("postgresql"))

    result = project.run_cli("check", "--db").check(1)
    assert result.stdout.splitlines() == [
        "LOCATION    RULE   SEVERITY  MESSAGE",
        f"(database)  FM408  error     {EMAIL}",
        f"                             fix: {FIX}",
        "",
        f"1 error, 0 warnings in 1 revision file, database checked{DETECTED}",
    ]
    payload = check_json(project, code=1)
    assert payload == {
        "status": "failed",
        "errors": 1,
        "warnings": 0,
        "revision_files": 1,
        "database_checked": True,
        "findings": [
            {
                "rule": "FM408",
                "name": "model-drift",
                "severity": "error",
                "file": None,
                "line": None,
                "revision": None,
                "message": EMAIL,
                "fix": FIX,
            },
        ],
        "suppressed": [],
        "notes": [DETECTED.removeprefix("; ")],
    }
    github = project.run_cli("check", "--db", "--format", "github").check(1)
    assert github.stdout.splitlines() == [
        f"::error title=FM408 model-drift::{EMAIL}%0Afix: {FIX}",
        f"1 error, 0 warnings in 1 revision file, database checked{DETECTED}",
    ]

    # The lint alone misses it: with --no-db, or with the rule left out.
    assert project.run_cli("check", "--no-db").check(0).stdout == (
        "no problems found in 1 revision file; "
        "--no-db: neither the database nor the models compared (FM408, what alembic check does)\n"
    )
    for ignore in ("FM408", "model-drift"):
        assert project.run_cli("check", "--db", "--ignore", ignore).check(0).stdout == (
            "no problems found in 1 revision file, database checked\n"
        )
    selected = project.run_cli("check", "--no-db", "--select", "FM408").check(2)
    assert selected.stderr == "fencemigrate: usage: --select FM408 needs the database, which --no-db leaves out\n"
    assert (tables(url), versions(url)) == before

    # Migrated: both checks pass.
    project.add_revision(
        "0002",
        "0001",
        "ALTER TABLE users ADD COLUMN email VARCHAR(255)",
        "ALTER TABLE users DROP COLUMN email",
        slug="email",
    )
    apply(project)
    assert application(alembic_check(project, 0 if url.startswith("postgresql") else 255)) == []
    assert project.run_cli("check", "--db").check(0).stdout == (
        f"no problems found in 2 revision files, database checked{NONE_DETECTED}\n"
    )
    assert check_json(project, "--select", "FM408", code=0)["findings"] == []


def test_each_difference_is_one_finding(make_project: MakeProject, url: str) -> None:
    project = model_project(make_project, url, DRIFTED_MODELS)
    project.add_revision(
        "0001",
        None,
        [
            "CREATE TABLE users (id INTEGER NOT NULL PRIMARY KEY, name VARCHAR(50), nickname VARCHAR(40))",
            "CREATE TABLE legacy (id INTEGER NOT NULL PRIMARY KEY, code VARCHAR(10))",
            "CREATE INDEX ix_legacy_code ON legacy (code)",
        ],
        ["DROP TABLE legacy", "DROP TABLE users"],
        slug="users",
    )
    apply(project)
    assert application(alembic_check(project, 255)) == [
        "add_column users.email",
        "modify_nullable users.name",
        "modify_type users.name",
        "remove_column users.nickname",
        "remove_index ix_legacy_code",
        "remove_table legacy",
    ]

    payload = check_json(project, code=1)
    assert messages(payload) == [
        ("FM408", None, "remove_table legacy: table legacy is in the database but not in the models"),
        (
            "FM408",
            None,
            "remove_index ix_legacy_code: index ix_legacy_code on legacy (code) is in the database "
            "but not in the models",
        ),
        ("FM408", None, EMAIL),
        ("FM408", None, "modify_type users.name: VARCHAR(50) in the database, VARCHAR(100) in the models"),
        ("FM408", None, "modify_nullable users.name: NULL allowed in the database, NOT NULL in the models"),
        (
            "FM408",
            None,
            "remove_column users.nickname: column users.nickname (VARCHAR(40)) is in the database "
            "but not in the models",
        ),
    ]
    assert payload["errors"] == 6


@pytest.mark.parametrize(
    ("option", "code"), [("include_object", SKIP_EMAIL), ("process_revision_directives", DROP_EMAIL)]
)
def test_env_py_hooks_are_honoured(make_project: MakeProject, url: str, option: str, code: str) -> None:
    """The near miss: the column the database lacks is one env.py says to leave alone."""
    project = model_project(make_project, url)
    models = "from models import metadata as target_metadata"
    project.edit_env(models, models + code)
    project.set_env_option(option, option, raw=True)
    apply(project)
    assert application(alembic_check(project, 0 if url.startswith("postgresql") else 255)) == []
    assert project.run_cli("check", "--db").check(0).stdout == (
        f"no problems found in 1 revision file, database checked{NONE_DETECTED}\n"
    )


def test_without_target_metadata_the_summary_says_so(make_project: MakeProject, url: str) -> None:
    """Alembic's default env.py: plain ``alembic check`` refuses; FM408 finds nothing and says why."""
    project = make_project(url=url)
    project.add_revision("0001", None, "CREATE TABLE users (id INTEGER NOT NULL PRIMARY KEY)", "DROP TABLE users")
    apply(project)
    control = project.run_alembic("check").check(255)
    assert "Can't proceed with --autogenerate option; environment script" in control.stderr

    summary = f"no problems found in 1 revision file, database checked; {NO_METADATA}"
    assert project.run_cli("check", "--db").check(0).stdout == summary + "\n"
    assert project.run_cli("check", "--db", "--format", "github").check(0).stdout == summary + "\n"
    payload = check_json(project, code=0)
    assert (payload["findings"], payload["notes"]) == ([], [NO_METADATA])
    # Left out, the rule says nothing.
    assert project.run_cli("check", "--db", "--ignore", "FM408").check(0).stdout == (
        "no problems found in 1 revision file, database checked\n"
    )


def test_a_database_not_at_head_is_not_compared(make_project: MakeProject, url: str) -> None:
    """As ``alembic check`` refuses ("Target database is not up to date"), FM408 compares nothing:
    the pending revision (FM401) is the finding."""
    project = model_project(make_project, url)
    apply(project)
    project.add_revision(
        "0002",
        "0001",
        "ALTER TABLE users ADD COLUMN email VARCHAR(255)",
        "ALTER TABLE users DROP COLUMN email",
        slug="email",
    )
    control = project.run_alembic("check").check(255)
    assert "Target database is not up to date." in control.stderr
    payload = check_json(project, code=1)
    assert messages(payload) == [
        ("FM401", "migrations/versions/0002_email.py", "0002 is not applied to the database (database at 0001)"),
    ]
    assert payload["notes"] == ["model comparison: not run: Target database is not up to date"]


def test_fencemigrate_init_env_py_allows_the_read_only_comparison(make_project: MakeProject, url: str) -> None:
    """The env.py of ``fencemigrate init``, which refuses to migrate without a token, compares the
    models too: a check runs no migration step."""
    project = model_project(make_project, url, template=template_dir())
    apply(project)
    before = (tables(url), versions(url))
    result = project.run_cli("check", "--db", "--format", "github").check(1)
    assert result.stdout.splitlines() == [
        f"::error title=FM408 model-drift::{EMAIL}%0Afix: {FIX}",
        f"1 error, 0 warnings in 1 revision file, database checked{DETECTED}",
    ]
    assert (tables(url), versions(url)) == before


def test_a_fresh_database_is_compared_without_writing_to_it(make_project: MakeProject, url: str) -> None:
    """No revision yet, nothing in the database: the models' table is a finding, and the check creates
    neither a version table nor the fence schema. Plain ``alembic check`` creates its version table."""
    project = make_project(url=url)
    (project.path / "models.py").write_text(MODELS)
    project.edit_env("target_metadata = None", "from models import metadata as target_metadata")
    assert tables(url) == []

    payload = check_json(project, code=1)
    assert [(rule, message) for rule, _, message in messages(payload)] == [
        ("FM404", "the fence schema fencemigrate is not installed: no fenced run has written to this database"),
        ("FM408", "add_table users: table users is in the models but not in the database"),
    ]
    assert tables(url) == []

    project.run_alembic("check").check(255)
    assert tables(url) == ["public.alembic_version" if url.startswith("postgresql") else "alembic_version"]


KEYED_MODELS = """\
import sqlalchemy as sa

metadata = sa.MetaData()
sa.Table("orgs", metadata, sa.Column("id", sa.Integer, primary_key=True))
sa.Table(
    "users", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(50), nullable=False, server_default="anonymous"),
    sa.Column("org_id", sa.Integer, sa.ForeignKey("orgs.id", name="fk_users_org")),
    sa.UniqueConstraint("name", name="uq_users_name"),
    comment="people who log in",
)
"""


def test_defaults_constraints_keys_and_other_schemas_on_postgresql(make_project: MakeProject, pg_url: str) -> None:
    """env.py's compare_server_default and include_schemas apply; with include_schemas, the fence
    schema (fencemigrate.*) is still left out, while plain ``alembic check`` wants it dropped."""
    project = model_project(make_project, pg_url, KEYED_MODELS)
    project.add_revision(
        "0001",
        None,
        [
            "CREATE TABLE orgs (id INTEGER NOT NULL PRIMARY KEY)",
            "CREATE TABLE users (id INTEGER NOT NULL PRIMARY KEY, name VARCHAR(50) NOT NULL DEFAULT 'nobody', "
            "org_id INTEGER)",
        ],
        ["DROP TABLE users", "DROP TABLE orgs"],
        slug="users",
    )
    project.set_env_option("compare_server_default", True)
    project.set_env_option("include_schemas", True)
    apply(project)
    control = alembic_check(project, 255)
    assert [operation for operation in control if not operation.startswith("remove_")] == [
        "add_constraint",
        "add_fk",
        "add_table_comment users",
        "modify_default users.name",
    ]
    assert {"remove_table agent_fence", "remove_table lease"} <= set(control)  # fencemigrate.agent_fence, ...

    assert [message for _, _, message in messages(check_json(project, code=1))] == [
        "add_table_comment users: no comment in the database, comment 'people who log in' in the models",
        "add_fk fk_users_org: foreign key fk_users_org on users (org_id) referencing orgs.id is in the models "
        "but not in the database",
        "add_constraint uq_users_name: unique constraint uq_users_name on users (name) is in the models "
        "but not in the database",
        "modify_default users.name: default 'nobody'::character varying in the database, default 'anonymous' "
        "in the models",
    ]


def test_the_async_template_is_compared_too(make_project: MakeProject, pg_url: str) -> None:
    """Alembic's ``async`` env.py runs the migration context in ``run_sync``: FM408 compares there."""
    project = model_project(make_project, pg_url, template="async")
    apply(project)
    assert alembic_check(project, 255) == ["add_column users.email"]
    assert messages(check_json(project, code=1)) == [("FM408", None, EMAIL)]
