"""The heads the revision files declare, read without importing them (runtime/revisions.py).

Data cases: directories of revision files, each with the heads the text reading must give, or None
when it must not be sure. Every case is checked against Alembic itself (its revision map, built by
importing the files): a set of heads, when given, is exactly Alembic's; None is given wherever the
text alone could mislead, including cases where Alembic's answer differs from what the text says.

Then end to end on SQLite: `fencemigrate upgrade head` on a database already at head imports no
revision module (plain alembic does: the control); one behind head imports them and applies.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from support.sqlite_rows import alembic_versions, make_sqlite_project, user_tables

from fencemigrate.runtime.revisions import declared_heads, has_revision_files

# As `alembic revision` writes it with the generic template (alembic 1.16+).
GENERIC = '''\
"""{slug}

Revision ID: {rev}
Revises: {down_text}
Create Date: 2026-12-01 12:00:00.000000

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision: str = {rev!r}
down_revision: Union[str, Sequence[str], None] = {down!r}
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    """Upgrade schema."""
    pass


def downgrade() -> None:
    """Downgrade schema."""
    pass
'''


def generic(rev: str, down: str | tuple[str, ...] | None, slug: str = "change") -> str:
    return GENERIC.format(rev=rev, down=down, down_text=down, slug=slug)


def plain(body: str) -> str:
    return textwrap.dedent(body).lstrip()


@dataclass
class Case:
    name: str
    files: dict[str, str]
    expected: frozenset[str] | None
    sourceless: bool = False
    alembic_heads: frozenset[str] | None = field(default=None)  # Alembic's, where it differs or fails


CHAIN = {"a1_one.py": generic("a1", None), "b2_two.py": generic("b2", "a1"), "c3_three.py": generic("c3", "b2")}

CASES = [
    Case("a chain as alembic revision writes it", CHAIN, frozenset({"c3"})),
    Case(
        "two branches from one base",
        {
            "a1_base.py": generic("a1", None),
            "b2_left.py": generic("b2", "a1"),
            "c3_right.py": generic("c3", "a1"),
        },
        frozenset({"b2", "c3"}),
    ),
    Case(
        "a merge revision whose down_revision spans lines",
        {
            **CHAIN,
            "d4_side.py": generic("d4", "a1"),
            "e5_merge.py": plain('''
            """merge"""
            revision = "e5"
            down_revision = (
                "c3",  # the main line
                "d4",
            )
            branch_labels = None
            depends_on = None
        '''),
        },
        frozenset({"e5"}),
    ),
    Case(
        "__init__.py, editor lock files and other files are not revisions",
        {
            **CHAIN,
            "__init__.py": "",
            ".#c3_three.py": "revision = 'lock'\n",
            "README": "revision = 'x'\n",
            "notes.txt": "down_revision = 'y'\n",
        },
        frozenset({"c3"}),
    ),
    Case(
        "comments mentioning the names",
        {
            **CHAIN,
            "d4_commented.py": plain('''
            """d4"""
            # revision = "not this one"
            revision = "d4"  # the id
            down_revision = "c3"
            # down_revision was b2 before the rebase
        '''),
        },
        frozenset({"d4"}),
    ),
    Case(
        "a revision computed at import time",
        {
            **CHAIN,
            "d4_computed.py": 'revision = "d" + "4"\ndown_revision = "c3"\n',
        },
        None,
        alembic_heads=frozenset({"d4"}),
    ),
    Case(
        "a second binding in a block",
        {
            **CHAIN,
            "d4_branchy.py": plain("""
            import os
            revision = "d4"
            down_revision = "c3"
            if os.environ.get("NEVER_SET_IN_TESTS"):
                down_revision = "b2"
        """),
        },
        None,
        alembic_heads=frozenset({"d4"}),
    ),
    Case(
        "a name set through globals()",
        {
            **CHAIN,
            "d4_globals.py": 'revision = "d4"\ndown_revision = "a1"\nglobals()["down_revision"] = "c3"\n',
        },
        None,
        alembic_heads=frozenset({"d4"}),
    ),
    Case(
        "the name used in code",
        {
            **CHAIN,
            "d4_used.py": 'revision = "d4"\ndown_revision = "c3"\nprint(down_revision)\n',
        },
        None,
        alembic_heads=frozenset({"d4"}),
    ),
    Case(
        "depends_on another revision",
        {
            **CHAIN,
            "d4_depends.py": 'revision = "d4"\ndown_revision = None\ndepends_on = "b2"\n',
        },
        None,
        alembic_heads=frozenset({"c3", "d4"}),
    ),
    Case(
        "an id used twice", {**CHAIN, "c3_copy.py": generic("c3", "b2", "copy")}, None, alembic_heads=frozenset({"c3"})
    ),
    Case("a down revision that no file declares", {**CHAIN, "d4_orphan.py": generic("d4", "zz")}, None),
    Case(
        "a cycle",
        {
            "a1_one.py": generic("a1", None),
            "b2_two.py": generic("b2", ("a1", "c3")),
            "c3_three.py": generic("c3", "b2"),
            "d4_head.py": generic("d4", "c3"),
        },
        None,
        alembic_heads=frozenset({"d4"}),
    ),
    Case(
        "an empty down_revision, which Alembic reads as a revision id",
        {
            **CHAIN,
            "d4_empty.py": 'revision = "d4"\ndown_revision = ""\n',
        },
        None,
    ),
    Case("a file without a down_revision", {**CHAIN, "d4_nodown.py": 'revision = "d4"\n'}, None),
    Case("a file without a revision id", {**CHAIN, "d4_legacy.py": 'down_revision = "c3"\n'}, None),
    Case("sourceless set in alembic.ini", CHAIN, None, sourceless=True, alembic_heads=frozenset({"c3"})),
    Case("no revision files yet", {"__init__.py": "", "README": "revision = 'x'\n"}, None, alembic_heads=frozenset()),
]


def script_directory(path: Path, case: Case) -> ScriptDirectory:
    versions = path / "versions"
    versions.mkdir(parents=True)
    for name, text in case.files.items():
        (versions / name).write_text(text)
    return ScriptDirectory(str(path), sourceless=case.sourceless)


def alembic_heads(path: Path, case: Case) -> frozenset[str] | None:
    """Alembic's own answer, from a ScriptDirectory of its own (it imports every file); None when it fails."""
    try:
        return frozenset(ScriptDirectory(str(path), sourceless=case.sourceless).get_heads())
    except (CommandError, RevisionError, KeyError, AttributeError):
        return None


@pytest.mark.filterwarnings("ignore::UserWarning")  # Alembic warns of duplicate ids and unknown down revisions
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_declared_heads(tmp_path: Path, case: Case) -> None:
    script = script_directory(tmp_path, case)
    assert declared_heads(script) == case.expected
    listed = [name for name in case.files if name.endswith(".py") and not name.startswith(("__init__", ".#"))]
    assert has_revision_files(script) == (None if case.sourceless else bool(listed))
    if case.expected is not None:
        assert alembic_heads(tmp_path, case) == case.expected  # the text says what Alembic finds
    else:
        assert alembic_heads(tmp_path, case) == case.alembic_heads


# -- end to end -----------------------------------------------------------------------------------


def test_upgrade_at_head_imports_no_revision_module(tmp_path: Path) -> None:
    """At head, `fencemigrate upgrade head` reads the revision files without importing them, finds
    nothing to do and exits 0. Control: plain `alembic upgrade head` imports every one. Behind head,
    the run imports them and applies what is missing."""
    project = make_sqlite_project(tmp_path)
    db = Path(project.url.removeprefix("sqlite:///"))
    imported = tmp_path / "imported"
    first = project.add_revision("r01", None, "CREATE TABLE t01 (id int)", "DROP TABLE t01", slug="t01")
    first.write_text(first.read_text() + f"\nimport pathlib\npathlib.Path({str(imported)!r}).touch()\n")
    project.add_revision("r02", "r01", "CREATE TABLE t02 (id int)", "DROP TABLE t02", slug="t02")
    project.add_revision("r03", "r02", "CREATE TABLE t03 (id int)", "DROP TABLE t03", slug="t03")
    project.run_cli("upgrade", "head", "--holder", "deploy-1").check(0)
    assert imported.exists() and alembic_versions(db) == ["r03"]

    imported.unlink()
    again = project.run_cli("upgrade", "head", "--holder", "deploy-2").check(0)
    assert again.stdout.splitlines()[-2:] == ["  nothing to do", "  heads now: r03"]
    assert not imported.exists()

    project.run_alembic("upgrade", "head").check(0)  # the control
    assert imported.exists()

    imported.unlink()
    project.add_revision("r04", "r03", "CREATE TABLE t04 (id int)", "DROP TABLE t04", slug="t04")
    project.run_cli("upgrade", "head", "--holder", "deploy-3").check(0)
    assert imported.exists()
    assert alembic_versions(db) == ["r04"] and user_tables(db) == ["t01", "t02", "t03", "t04"]
