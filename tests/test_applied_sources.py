"""The ledger keeps the text of every revision file it records, and `show REV --applied` gives it back.

Each ledger row written by a fenced run (one transaction, a transaction per revision, pre-check
mode), ``stamp`` and ``resolve`` carries its file's text, written with the row. ``fencemigrate show
REV --applied`` prints it byte for byte (run here as a subprocess, its stdout read as bytes), with
who applied it on stderr; ``check --db``'s drift finding (FM402) diffs it against the file on disk.
Rows recorded without it (``source`` NULL) show "source not recorded".
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from contextlib import chdir
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.runtime.migration import MigrationContext
from support.db import libpq_url
from support.offline_sql import psql_binary
from support.old_schema import install_schema, old_ledger_row
from support.project import MakeProject, Project, sqlite_url, subprocess_env

from fencemigrate import api, load_config
from fencemigrate.fence.ledger import read_applied_texts

NON_ASCII = "# Café, naïve, 日本語, emoji 🦀, a quote ' and \" and a backslash \\ and $$ and :name\r\n"
"""A tail for a revision file: non-ASCII text, characters SQL quoting must survive, a CRLF."""


def _large_tail() -> str:
    """About 100 kB of comment lines, varied enough not to compress to nothing."""
    return "".join(f"# line {n:05d}: {'abcdefghij' * (n % 7 + 1)} {n * 7919 % 100003}\n" for n in range(1700))


def _append(project: Project, path: Path, tail: str) -> bytes:
    """Append ``tail`` (UTF-8) to a revision file; its new bytes."""
    path.write_bytes(path.read_bytes() + tail.encode("utf-8"))
    project.remove_pycache()
    return path.read_bytes()


def show_applied(project: Project, revision: str, *options: str) -> subprocess.CompletedProcess[bytes]:
    """``fencemigrate show REV --applied``, stdout (as written, byte for byte) and stderr as bytes."""
    shown = project.run_cli("show", revision, "--applied", *options)
    assert shown.stdout_bytes is not None
    return subprocess.CompletedProcess(shown.args, shown.code, shown.stdout_bytes, shown.stderr.encode())


def _header(shown: subprocess.CompletedProcess[bytes]) -> str:
    """What ``show --applied`` says on stderr, without env.py's log lines."""
    return "".join(line for line in shown.stderr.decode().splitlines(keepends=True) if not line.startswith("INFO "))


def applied_json(project: Project, revision: str) -> dict[str, Any]:
    shown = show_applied(project, revision, "--json")
    assert shown.returncode == 0, shown
    return dict(json.loads(shown.stdout))


def _rows(url: str, sql: str) -> list[Any]:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as connection:
            return list(connection.execute(sa.text(sql)))
    finally:
        engine.dispose()


@pytest.fixture(params=["postgresql", "postgresql-tpm", "postgresql-precheck", "mariadb", "sqlite"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """An empty database, and how its runs go: one transaction, a transaction per revision, pre-check."""
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "db.sqlite"), "transaction"
    if request.param == "mariadb":
        return str(request.getfixturevalue("mariadb_url")), "precheck"
    return str(request.getfixturevalue("pg_url")), request.param.removeprefix("postgresql").strip("-") or "transaction"


def test_upgrade_and_stamp_record_the_exact_text_of_each_file(
    make_project: MakeProject, database: tuple[str, str]
) -> None:
    """Non-ASCII text, quotes, backslashes and CRLF, and a 100 kB file come back byte for byte, with
    the token, holder and time of the run that applied (or stamped) them."""
    url, how = database
    project = make_project(url=url)
    mode = ["--mode", "precheck"] if how == "precheck" and url.startswith("postgresql") else []
    if how == "tpm":
        project.set_env_option("transaction_per_migration", True)
    project.add_chain(3)
    files = {revision: next(project.versions.glob(f"{revision}_*.py")) for revision in ("r01", "r02", "r03")}
    expected = {
        "r01": _append(project, files["r01"], NON_ASCII),
        "r02": _append(project, files["r02"], _large_tail()),
        "r03": _append(project, files["r03"], NON_ASCII),
    }
    assert len(expected["r02"]) > 100_000

    project.run_cli("upgrade", "r02", "--token", "5", "--holder", "agent-A", *mode).check()
    project.run_cli("stamp", "r03", "--token", "6", "--holder", "agent-S", *mode).check()

    for revision, token, holder, method in (
        ("r01", 5, "agent-A", "upgrade"),
        ("r02", 5, "agent-A", "upgrade"),
        ("r03", 6, "agent-S", "stamp"),
    ):
        shown = show_applied(project, revision)
        assert shown.returncode == 0, shown
        assert shown.stdout == expected[revision]
        how_written = "stamped" if method == "stamp" else "applied"
        assert _header(shown).startswith(f"{revision} {how_written} under token {token} by {holder} at ")
        payload = applied_json(project, revision)
        assert payload["source"].encode("utf-8") == expected[revision]
        assert (payload["token"], payload["holder"], payload["method"], payload["state"]) == (
            token,
            holder,
            method,
            "applied",
        )
        assert payload["source_recorded"] is True


def test_resolve_keeps_the_text_of_the_revision_it_settles(make_project: MakeProject, mariadb_url: str) -> None:
    """Pre-check mode writes the text with the 'applying' mark; ``resolve --as applied`` settles that row,
    and adopting a revision whose tokenless version write was refused records its file too."""
    project = make_project(url=mariadb_url)
    project.add_revision("0001", None, ["CREATE TABLE one (id int)"], ["DROP TABLE one"])
    failing = project.add_revision("0002", "0001", ["CREATE TABLE up (id int)", "SELECT * FROM missing"])
    failing_text = _append(project, failing, NON_ASCII)
    project.run_cli("upgrade", "head", "--token", "5", "--holder", "agent-A").check(1)
    assert show_applied(project, "0002").stdout == failing_text  # the mark carries it already
    project.run_cli("resolve", "0002", "--token", "6", "--as", "applied", "--holder", "ops").check()
    resolved = show_applied(project, "0002")
    assert (resolved.returncode, resolved.stdout) == (0, failing_text)

    adopted = project.add_revision("0003", "0002", ["CREATE TABLE three (id int)"], ["DROP TABLE three"])
    adopted_text = _append(project, adopted, NON_ASCII)
    refused = project.run_alembic("upgrade", "head")  # the control: plain alembic's DDL commits on MariaDB
    assert "fencemigrate refused a version-table write without a fencing token" in refused.stderr, refused
    assert show_applied(project, "0003").returncode == 1  # refused: no ledger row, nothing to show
    project.run_cli("resolve", "0003", "--token", "7", "--as", "applied", "--holder", "ops").check()
    shown = show_applied(project, "0003")
    assert (shown.returncode, shown.stdout) == (0, adopted_text)
    assert _header(shown).startswith("0003 applied under token 7 by ops at ")


B_BODY = ["ALTER TABLE invoices ADD COLUMN currency char(3) NOT NULL DEFAULT 'EUR'"]
A_BODY = ["ALTER TABLE invoices ADD COLUMN currency varchar(8)"]


@pytest.mark.parametrize("backend", ["postgresql", "sqlite", "mysql"], indirect=True)
def test_show_applied_gives_a_stale_agent_the_file_b_applied(make_project: MakeProject, backend_url: str) -> None:
    """The incident: A applied its 0042, B rolled it back and applied its own 0042. A's working copy
    still has A's file, and plain ``show`` reads that file; ``show 0042 --applied`` gives A B's file,
    byte for byte, with B's token; ``check --db`` diffs the two; A restores B's file and the drift is gone."""
    agent_a = make_project(url=backend_url, name="agent-a")
    agent_b = make_project(url=backend_url, name="agent-b")
    for project in (agent_a, agent_b):
        project.add_revision("0041", None, ["CREATE TABLE invoices (id int)"], ["DROP TABLE invoices"], slug="base")
    a_file = agent_a.add_revision("0042", "0041", A_BODY, ["ALTER TABLE invoices DROP COLUMN currency"], slug="cur")
    agent_a.run_cli("upgrade", "head", "--token", "33", "--holder", "agent-A").check()

    agent_b.add_revision("0042", "0041", A_BODY, ["ALTER TABLE invoices DROP COLUMN currency"], slug="cur")
    agent_b.run_cli("downgrade", "0041", "--token", "34", "--holder", "agent-B").check()
    b_file = agent_b.add_revision("0042", "0041", B_BODY, ["ALTER TABLE invoices DROP COLUMN currency"], slug="cur")
    b_text = _append(agent_b, b_file, "# B's version: currency is char(3), never NULL — ça va\n")
    agent_b.run_cli("upgrade", "head", "--token", "34", "--holder", "agent-B").check()

    # The control: what A reads without --applied is its own stale file.
    plain = agent_a.run_cli("show", "0042").check()
    assert str(a_file) in plain.stdout or a_file.name in plain.stdout
    assert a_file.read_bytes() != b_text

    shown = show_applied(agent_a, "0042")
    assert (shown.returncode, shown.stdout) == (0, b_text)
    assert _header(shown).startswith("0042 applied under token 34 by agent-B at ")

    drift = agent_a.run_cli("check", "--db", "--select", "FM402", "--json").check(1)
    (finding,) = json.loads(drift.stdout)["findings"]
    assert finding["rule"] == "FM402"
    assert finding["diff"].startswith("--- applied/")
    assert (
        "-    op.execute(\"ALTER TABLE invoices ADD COLUMN currency char(3) NOT NULL DEFAULT 'EUR'\")"
        in finding["diff"]
    )
    assert "+    op.execute('ALTER TABLE invoices ADD COLUMN currency varchar(8)')" in finding["diff"]
    assert "-# B's version: currency is char(3), never NULL — ça va" in finding["diff"]
    assert "show 0042 --applied >" in finding["fix"]
    text = agent_a.run_cli("check", "--db", "--select", "FM402").check(1)
    assert "+++ on disk/" in text.stdout and "-# B's version" in text.stdout

    a_file.write_bytes(shown.stdout)  # `fencemigrate show 0042 --applied > 0042_cur.py`
    agent_a.remove_pycache()
    agent_a.run_cli("check", "--db", "--select", "FM402").check(0)


def test_show_applied_refuses_a_revision_the_ledger_does_not_have(make_project: MakeProject, pg_url: str) -> None:
    """Not applied: a clear error and exit 1, nothing written, no lease taken."""
    project = make_project(url=pg_url)
    project.add_chain(2)
    project.run_cli("upgrade", "r01", "--token", "5").check()
    before = _rows(pg_url, "SELECT count(*) FROM fencemigrate.fence_event")
    shown = show_applied(project, "r02")
    assert shown.returncode == 1
    assert shown.stdout == b""
    assert "r02 is not applied: the ledger of version table alembic_version has no row for it" in shown.stderr.decode()
    as_json = show_applied(project, "nosuch", "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["status"] == "error"
    assert _rows(pg_url, "SELECT count(*) FROM fencemigrate.fence_event") == before  # no GRANT, nothing
    assert _rows(pg_url, "SELECT count(*) FROM fencemigrate.lease") == [(0,)]
    prefix = show_applied(project, "r0")  # ambiguous: names no one revision
    assert prefix.returncode == 1


@pytest.mark.parametrize("backend", ["postgresql", "sqlite", "mysql"], indirect=True)
def test_a_ledger_row_without_its_text_keeps_working(make_project: MakeProject, backend_url: str) -> None:
    """A ledger row recorded without its text (source NULL): the next run records the text of what it
    applies; the row shows "source not recorded" (exit 0, with its token and holder), and check --db
    reports its drift with the hash message, no diff."""
    url = backend_url
    project = make_project(url=url)
    project.add_chain(2)
    project.run_alembic("upgrade", "r01").check()
    version = install_schema(url)
    r01 = next(project.versions.glob("r01_*.py"))
    old_ledger_row(url, "r01", hashlib.sha256(r01.read_bytes()).hexdigest())  # recorded without its text

    project.run_cli("upgrade", "head", "--token", "5", "--holder", "agent-A").check()
    state = json.loads(project.run_cli("state", "--json").check().stdout)
    assert state["fence_schema_version"] == version

    old = show_applied(project, "r01")
    assert (old.returncode, old.stdout) == (0, b"")
    assert _header(old).splitlines()[1:] == [
        "source not recorded: the row was written before the fence schema kept the text of revision files "
        "(or the file was not UTF-8 text)",
    ]
    assert _header(old).startswith("r01 applied under token 3 by old-agent at ")
    payload = applied_json(project, "r01")
    assert (payload["source"], payload["source_recorded"], payload["token"]) == (None, False, 3)
    r02 = next(project.versions.glob("r02_*.py"))
    assert show_applied(project, "r02").stdout == r02.read_bytes()

    for path in (r01, r02):
        _append(project, path, "# changed after it was applied\n")
    report = json.loads(project.run_cli("check", "--db", "--select", "FM402", "--json").check(1).stdout)
    by_revision = {finding["revision"]: finding for finding in report["findings"]}
    assert "diff" not in by_revision["r01"]  # no text recorded: the hashes only
    assert "r01 changed after it was applied: its sha256 is now" in by_revision["r01"]["message"]
    assert by_revision["r02"]["diff"].endswith("+# changed after it was applied\n")


def _read_texts(url: str, revisions: list[str]) -> dict[str, str | None]:
    """``read_applied_texts`` of ``revisions``, in process."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return read_applied_texts(MigrationContext.configure(connection), "fencemigrate", revisions)
    finally:
        engine.dispose()


@pytest.mark.parametrize("backend", ["postgresql", "sqlite", "mysql"], indirect=True)
def test_ledger_rows_without_texts_are_reported_by_their_hashes(make_project: MakeProject, backend_url: str) -> None:
    """Four ledger rows recorded without their texts: ``check --db`` finds each changed file's drift
    by its hash (no diff) and ``show --applied`` says "source not recorded"; reading the texts of
    five revisions finds none."""
    url = backend_url
    project = make_project(url=url)
    project.add_chain(4)
    project.run_alembic("upgrade", "head").check()
    version = install_schema(url)
    files = {revision: next(project.versions.glob(f"{revision}_*.py")) for revision in ("r01", "r02", "r03", "r04")}
    for revision, path in files.items():
        old_ledger_row(url, revision, hashlib.sha256(path.read_bytes()).hexdigest())
        _append(project, path, "# changed after it was applied\n")

    report = json.loads(project.run_cli("check", "--db", "--select", "FM402", "--json").check(1).stdout)
    assert sorted(finding["revision"] for finding in report["findings"]) == sorted(files)
    for finding in report["findings"]:
        assert "diff" not in finding
        assert f"{finding['revision']} changed after it was applied: its sha256 is now" in finding["message"]
    shown = show_applied(project, "r03")
    assert (shown.returncode, shown.stdout) == (0, b"")
    assert "source not recorded: the row was written before the fence schema kept" in _header(shown)
    assert json.loads(project.run_cli("state", "--json").check().stdout)["fence_schema_version"] == version

    assert _read_texts(url, ["r02"]) == {"r02": None}
    five = _read_texts(url, ["r01", "r02", "r03", "r04", "r99"])
    assert five == {"r01": None, "r02": None, "r03": None, "r04": None}  # r99: no ledger row


def test_an_offline_script_carries_the_text_quoted_for_psql(make_project: MakeProject, pg_url: str) -> None:
    """``upgrade --sql``: the text is written dollar-quoted, so psql applies it exactly, whatever
    quotes, backslashes, dollar signs or psql variables (``:name``) it holds."""

    project = make_project(url=pg_url)
    project.run_cli("install").check()
    project.add_chain(1)
    path = next(project.versions.glob("r01_*.py"))
    expected = _append(project, path, NON_ASCII + "# $fencemigrate_source$ in the text too\n")
    sql = project.run_cli("upgrade", "head", "--sql", "--token", "5", "--holder", "offline").check()
    written = sql.stdout_bytes  # bytes: a text-mode capture would turn the file's CRLF into LF
    assert written is not None
    assert b"$fencemigrate_source_1$" in written
    (project.path / "upgrade.sql").write_bytes(written)
    psql = [psql_binary(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "upgrade.sql", libpq_url(pg_url)]
    subprocess.run(psql, cwd=project.path, env=subprocess_env(), capture_output=True, timeout=120, check=True)
    shown = show_applied(project, "r01")
    assert (shown.returncode, shown.stdout) == (0, expected)


def test_the_api_returns_what_the_cli_prints(make_project: MakeProject, tmp_path: Path) -> None:
    """``show(config, rev, applied=True)`` returns the row and text that ``show REV --applied --json`` prints."""
    project = make_project(url=sqlite_url(tmp_path / "db.sqlite"))
    project.add_chain(1)
    expected = _append(project, next(project.versions.glob("r01_*.py")), NON_ASCII)
    project.run_cli("upgrade", "head", "--token", "5", "--holder", "agent-A").check()
    with chdir(project.path):
        found = api.show(load_config(["alembic.ini"]), "r01", applied=True)
    assert found.source is not None and found.source.encode("utf-8") == expected
    assert found.as_json() == applied_json(project, "r01")
