"""Projects whose env.py compares ``models.py`` with the database (``check --db``'s FM408 and
autogenerate), shared by ``test_check_autogenerate`` and ``test_autogenerate_fence``."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import create_engine, inspect

from support.project import MakeProject, Project

MODELS = """\
import sqlalchemy as sa

metadata = sa.MetaData()
sa.Table(
    "users", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("name", sa.String(50), nullable=False),
    sa.Column("email", sa.String(255)),
)
"""


def model_project(
    make_project: MakeProject, url: str, models: str = MODELS, template: str | Path = "generic"
) -> Project:
    """A project whose env.py compares ``models.py`` (beside alembic.ini) with the database, and
    whose revision 0001 creates users without the email column."""
    project = make_project(template=template, url=url)
    (project.path / "models.py").write_text(models)
    project.edit_env("target_metadata = None", "from models import metadata as target_metadata")
    project.add_revision(
        "0001",
        None,
        "CREATE TABLE users (id INTEGER NOT NULL PRIMARY KEY, name VARCHAR(50) NOT NULL)",
        "DROP TABLE users",
        slug="users",
    )
    return project


def apply(project: Project) -> None:
    project.run_cli("upgrade", "head", "--token", "7", "--holder", "agent-A").check(0)


def tables(url: str) -> list[str]:
    """Every table of the database, schema-qualified on PostgreSQL (the fence schema is its own)."""
    engine = create_engine(url)
    try:
        inspector = inspect(engine)
        if engine.dialect.name != "postgresql":
            return sorted(inspector.get_table_names())
        schemas = [name for name in inspector.get_schema_names() if name != "information_schema"]
        return sorted(f"{schema}.{table}" for schema in schemas for table in inspector.get_table_names(schema))
    finally:
        engine.dispose()
