"""The exit statuses the fault harness found wrong (issue 24, defect 9, seed 90817): bad config and
bad names are bad usage (exit 2) with one clear line, and nothing is touched.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from sqlite_rows import make_sqlite_project
from support.in_process import run_in_process
from support.project import Project, Result

_CLEAN_ENV: dict[str, str | None] = {"FENCEMIGRATE_TOKEN": None, "ALEMBIC_CONFIG": None}


def cli(project: Project, *args: str, env: Mapping[str, str | None] | None = None) -> Result:
    """``fencemigrate *args`` in the project, in this process, without inherited token or config."""
    return run_in_process(project.path, *args, env={**_CLEAN_ENV, **(env or {})})


def one_line(result: Result, code: int) -> str:
    """The one line a refused command printed on stderr, once its exit status is ``code``."""
    result.check(code)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result
    return lines[0]


# -- (iii) a config file that is not text -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("alembic.ini", bytes(range(256))),
        ("alembic.ini", b"[alembic]\nscript_location = migrations\n\xff\xfe\n"),
        ("pyproject.toml", b'[tool.alembic]\nscript_location = "migrations"\n# \xc0\n'),
    ],
    ids=["binary-ini", "latin-byte-in-ini", "bad-byte-in-pyproject"],
)
def test_a_config_file_that_is_not_utf8_is_bad_config(tmp_path: Path, name: str, content: bytes) -> None:
    """A binary (or not UTF-8) alembic.ini or pyproject.toml: exit 2 naming the file and the byte,
    not a UnicodeDecodeError with exit 1; the database is never opened."""
    project = make_sqlite_project(tmp_path)
    if name == "pyproject.toml":
        project.ini.unlink()
    (project.path / name).write_bytes(content)
    byte = content[next(i for i, b in enumerate(content) if b >= 0x80) :][:1].hex()
    for command in (("upgrade", "head", "--token", "1"), ("state",), ("lease", "acquire", "--holder", "A")):
        line = one_line(cli(project, *command), 2)
        assert line == (
            f"fencemigrate: usage: config file {name!r} is not UTF-8 text (it has the byte 0x{byte}): "
            "Alembic reads it as UTF-8; is it the right file?"
        )
    assert not (tmp_path / "db.sqlite").exists()


# -- (iv) names that print as other names -------------------------------------------------------

_MISLEADING = {
    "right-to-left-override": ("db/\u202emigrations", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    "left-to-right-isolate": ("db/\u2066migrations", "U+2066 LEFT-TO-RIGHT ISOLATE"),
    "zero-width-space": ("db/migr\u200bations", "U+200B ZERO WIDTH SPACE"),
    "byte-order-mark": ("\ufeffdb/migrations", "U+FEFF ZERO WIDTH NO-BREAK SPACE"),
}
_CONTROLS = {
    "nul": "db/\x00migrations",
    "escape": "db/\x1b[2Kmigrations",
    "delete": "db/migrations\x7f",
    "c1-next-line": "db/\x85migrations",
    "line-separator": "db/\u2028migrations",
}


def _expected(name: str) -> str:
    """The refusal of ``name``."""
    for value, described in _MISLEADING.values():
        if value == name:
            return (
                f"resource name must not contain invisible formatting characters (it has {described}): "
                "they make a name print as another"
            )
    return "resource name must not contain control characters"


@pytest.mark.parametrize(
    "name", [value for value, _ in _MISLEADING.values()] + list(_CONTROLS.values()), ids=[*_MISLEADING, *_CONTROLS]
)
def test_a_resource_name_with_formatting_or_control_characters_is_refused_wherever_it_enters(
    tmp_path: Path, name: str
) -> None:
    """--resource (a fenced write, a grant, a read, the MCP server), and fencemigrate_resource in
    alembic.ini: exit 2 with one line that names the character, before the database is opened.
    Plain names outside ASCII stay allowed (the control)."""
    project = make_sqlite_project(tmp_path)
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    expected = f"fencemigrate: usage: {_expected(name)}"
    for command in (
        ("upgrade", "head", "--token", "1", "--resource", name),
        ("lease", "acquire", "--holder", "A", "--resource", name),
        ("lease", "status", "--resource", name),
        ("mcp", "--print-rules", "--resource", name),
    ):
        assert one_line(cli(project, *command), 2) == expected, command
    if len(name.splitlines()) == 1:  # a line break in alembic.ini would split the line: configparser's refusal
        project.set_ini_option("fencemigrate_resource", name)
        for command in (("upgrade", "head", "--token", "1"), ("lease", "acquire", "--holder", "A")):
            assert one_line(cli(project, *command), 2) == expected, command
    assert not (tmp_path / "db.sqlite").exists()
    # The control: a name with letters outside ASCII, and no hidden character, writes.
    project.set_ini_option("fencemigrate_resource", "db/migrações")
    cli(project, "upgrade", "head", "--token", "1").check(0)
