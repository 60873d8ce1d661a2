"""The exit statuses the fault harness found wrong (issue 24, defect 9, seed 90817): bad config and
bad names are bad usage (exit 2) with one clear line, and nothing is touched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

import pytest
from support.backend_rows import rows
from support.in_process import run_in_process
from support.project import MakeProject, Project, Result
from support.sqlite_rows import make_sqlite_project

_CLEAN_ENV: dict[str, str | None] = {"FENCEMIGRATE_TOKEN": None, "ALEMBIC_CONFIG": None}


def cli(project: Project, *args: str, env: Mapping[str, str | None] | None = None) -> Result:
    """``fencemigrate *args`` in the project, in this process, without inherited token or config."""
    return run_in_process(project.path, *args, env={**_CLEAN_ENV, **(env or {})})


def one_line(result: Result, code: int) -> str:
    """The one line (not Alembic's log) a refused command printed on stderr, once its exit status is ``code``."""
    result.check(code)
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("INFO  [")]
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


_INI = "[alembic]\nscript_location = migrations\n"
_TOML = '[tool.alembic]\nscript_location = "migrations"\n'


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        ("alembic.ini", b"\xef\xbb\xbf" + _INI.encode(), "starts with a byte order mark (0xef 0xbb 0xbf)"),
        ("pyproject.toml", b"\xef\xbb\xbf" + _TOML.encode(), "starts with a byte order mark (0xef 0xbb 0xbf)"),
        ("alembic.ini", _INI.encode("utf-16-le"), "has the byte 0x00 (UTF-16 text?)"),
        ("pyproject.toml", b'[tool.alembic]\nscript_location = "migrations\n', "is not valid TOML (line 2)"),
    ],
    ids=["ini-utf8-bom", "pyproject-utf8-bom", "ini-utf16-no-bom", "pyproject-not-toml"],
)
def test_a_config_file_alembic_cannot_parse_is_bad_config_naming_it(
    tmp_path: Path, name: str, content: bytes, why: str
) -> None:
    """UTF-8 text with a byte order mark (Notepad's), UTF-16 without one, TOML that does not parse:
    exit 2 in one line naming the file and why, not 'File contains no section headers' without a
    name, a TOMLDecodeError with exit 1, or 'alembic.ini does not exist'; the database is never opened."""
    project = make_sqlite_project(tmp_path)
    if name == "pyproject.toml":
        project.ini.unlink()
    (project.path / name).write_bytes(content)
    for command in (("upgrade", "head", "--token", "1"), ("state",), ("lease", "acquire", "--holder", "A")):
        line = one_line(cli(project, *command), 2)
        assert line.startswith(f"fencemigrate: usage: config file {name!r} {why}"), line
    assert not (tmp_path / "db.sqlite").exists()


def test_a_pyproject_toml_alembic_does_not_read_may_have_a_byte_order_mark(tmp_path: Path) -> None:
    """Beside alembic.ini, a pyproject.toml without [tool.alembic] is not Alembic's: its BOM is no matter."""
    project = make_sqlite_project(tmp_path)
    (project.path / "pyproject.toml").write_bytes(b'\xef\xbb\xbf[project]\nname = "app"\n')
    cli(project, "heads").check(0)


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


# -- (ii) a relative revision past the graph --------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "refusal"),
    [
        (("upgrade", "+9"), "Relative revision +9 didn't produce 9 migrations"),
        (
            ("upgrade", "a1+5"),
            "relative revision 'a1+5' goes past the end of the revision graph: there are not 5 revisions above a1",
        ),
        (("downgrade", "-5"), "Relative revision -5 didn't produce 5 migrations"),
    ],
    ids=["upgrade+9", "upgrade-a1+5", "downgrade-5"],
)
def test_a_relative_revision_past_the_graph_takes_no_lease(
    make_project: MakeProject, backend: str, backend_url: str, command: tuple[str, ...], refusal: str
) -> None:
    """At a1, with X's lease live: exit 2 (not busy, exit 4), and once X has released, exit 2 with no
    grant: the target is resolved before any grant, install or lock; nothing is touched."""
    project = make_project(url=backend_url)
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.add_revision("a2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    token = json.loads(cli(project, "lease", "acquire", "--holder", "X", "--json").check(0).stdout)["lease"]["token"]
    cli(project, "upgrade", "a1", "--token", str(token), "--holder", "X").check(0)
    before = rows(backend, backend_url)
    assert one_line(cli(project, *command, "--holder", "B"), 2) == f"fencemigrate: usage: {refusal}"
    assert rows(backend, backend_url) == before
    cli(project, "lease", "release", "--holder", "X", "--token", str(token)).check(0)
    before = rows(backend, backend_url)
    assert one_line(cli(project, *command, "--holder", "B"), 2) == f"fencemigrate: usage: {refusal}"
    assert rows(backend, backend_url) == before


# -- (i) a checkout that lacks a revision the database has ------------------------------------------

MOVED_ON = re.compile(
    r"FENCED: db/migrations has moved on past your revision files\.\n"
    r"Revision a2 \(applied by A under token 1 at \d{4}-\d\d-\d\d[T ][0-9:.]+(Z|\+00:00)?\) is applied to the "
    r"database, and your checkout has no file for it: a newer holder applied it\. Nothing was run\.\n"
    r"This is NOT a transient error\. Do not retry, rebase, renumber, or re-apply\.\n"
)


def test_a_checkout_without_the_database_s_revision_is_told_the_database_moved_on(
    make_project: MakeProject, backend: str, backend_url: str
) -> None:
    """A applied a2; B's checkout has only a1. B's run (its own lease, or --token) exits 3 with the
    re-plan text naming a2 and who applied it (holder, token, when: the ledger's), not exit 2 "Can't
    locate revision"; B's own lease is never granted, and nothing but the FENCED event is written.
    The control: plain alembic in B's checkout says only that it cannot locate a2."""
    agent_a = make_project(url=backend_url, name="agent-a")
    agent_b = make_project(url=backend_url, name="agent-b")
    for project in (agent_a, agent_b):
        project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    agent_a.add_revision("a2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    cli(agent_a, "upgrade", "head", "--holder", "A").check(0)
    before = rows(backend, backend_url)
    for command in (
        ("upgrade", "head", "--holder", "B"),
        ("upgrade", "head", "--token", "1", "--holder", "B"),
        ("downgrade", "a1", "--token", "1", "--holder", "B"),
    ):
        result = cli(agent_b, *command).check(3)
        assert MOVED_ON.match(_without_log(result.stderr)), result
        assert "Next step: fetch the revision files the database has (`git pull`)" in result.stderr
        after = rows(backend, backend_url)
        assert {**after, "fence_event": []} == {**before, "fence_event": []}
        assert [row[3] for row in after["fence_event"][len(before["fence_event"]) :]] == ["FENCED"]
        before = after
    payload = json.loads(cli(agent_b, "upgrade", "head", "--token", "1", "--holder", "B", "--json").check(3).stdout)
    assert payload["status"] == "fenced"
    assert [(e["revision"], e["holder"], e["token"]) for e in payload["applied"]] == [("a2", "A", 1)]
    # The control: plain alembic cannot tell the agent what happened.
    plain = agent_b.run_alembic("upgrade", "head")
    assert plain.code != 0 and "Can't locate revision identified by 'a2'" in plain.stderr
    assert "applied by" not in plain.stderr


def _without_log(stderr: str) -> str:
    """``stderr`` without Alembic's log lines."""
    return "".join(line for line in stderr.splitlines(keepends=True) if not line.startswith("INFO  ["))


def test_the_mcp_server_tells_an_agent_the_database_moved_on_as_fenced() -> None:
    """An agent whose checkout lacks the database's revision gets FENCED (its token dropped), with the
    next step of fetching the files, not a USAGE error."""
    from fencemigrate.agent_server.results import error_result
    from fencemigrate.errors import AppliedBy, DatabaseAhead

    moved_on = DatabaseAhead("db/migrations", 1, (AppliedBy("a2", "A", 2, "2026-12-06T20:27:42.275Z"),))
    result = error_result(moved_on)
    assert result.structured_content is not None
    assert (result.structured_content["error"], result.structured_content["server_token_dropped"]) == ("FENCED", True)
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.splitlines()[:2] == [
        "FENCED: db/migrations has moved on past your revision files.",
        "Revision a2 (applied by A under token 2 at 2026-12-06T20:27:42.275Z) is applied to the database, and your "
        "checkout has no file for it: a newer holder applied it. Nothing was run.",
    ]
    assert "fetch the revision files the database has (`git pull`), run `fencemigrate state`" in text
    assert result.structured_content is not None and result.structured_content["applied"][0]["holder"] == "A"
