"""``upgrade A:B --sql`` on SQLite: a script for the sqlite3 shell, fenced when it runs.

Written without ``--token``, the script takes its own grant from the database's built-in lease
service when a DBA runs it (``sqlite3 -bail db.sqlite < script``): a new token, above the lease's
counter and the fence, to ``<holder> (offline script)``; it refuses unless the version table holds
exactly the heads it was written from, claims the fence with that token before each revision's DDL
and before its ledger and version rows, and releases the lease after its last version write. The
checks are TEMP triggers of the script's own session; a refusal fails its statement, and the
script's own ``.bail on`` stops the shell there (with or without ``-bail``), which rolls back the
transaction it leaves open. Every test runs the real ``sqlite3`` shell on a real database file.

Control: plain ``alembic upgrade A:B --sql`` writes a script that applies blindly over moved heads.
"""

from __future__ import annotations

import sqlite3
import subprocess
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from support.offline_sql import add_chain
from support.project import Project, Result
from support.sqlite_rows import alembic_versions, make_sqlite_project, query, table_names, user_tables

from fencemigrate.dialects import dialect_for

SQLITE_VERSION = dialect_for("sqlite").schema_version()

RESOURCE = "db/migrations"
SCRIPT_HOLDER = "dba (offline script)"
SCRIPT_TOKEN = "(SELECT s.token FROM temp.fencemigrate_script_lease s)"


def database(project: Project) -> Path:
    """The project's SQLite file (``make_sqlite_project``'s ``db.sqlite``)."""
    return project.path.parent / "db.sqlite"


def script(project: Project, *args: str, command: str = "upgrade") -> str:
    """``fencemigrate COMMAND ARGS --sql --holder dba`` (no token): the script, exit 0."""
    return project.run_cli(command, *args, "--sql", "--holder", "dba").check(0).stdout


def run_sqlite3(db: Path, text: str, *flags: str) -> Result:
    """The real sqlite3 shell, reading the script on its standard input (``sqlite3 FLAGS DB < script``)."""
    args = ("sqlite3", *flags, str(db))
    done = subprocess.run(args, input=text, capture_output=True, text=True, timeout=120, check=False)
    return Result(args, done.returncode, done.stdout, done.stderr)


def dump(db: Path) -> list[str]:
    """Every statement that rebuilds the database file: its schema and every row."""
    if not db.exists():
        return []
    with closing(sqlite3.connect(db)) as connection:
        return list(connection.iterdump())


def ledger(db: Path) -> list[tuple[Any, ...]]:
    """(revision, applied_token, holder, method) of every ledger row, by revision."""
    return query(
        db, "SELECT revision, applied_token, holder, method FROM fencemigrate_applied_revision ORDER BY revision"
    )


def lease_row(db: Path) -> tuple[Any, ...]:
    """(holder, token) of the built-in lease service's lease."""
    (row,) = query(db, "SELECT holder, token FROM fencemigrate_lease WHERE resource = ?", (RESOURCE,))
    return row


def fence(db: Path) -> tuple[Any, ...]:
    """(token, token_source) of the resource's fence row."""
    (row,) = query(db, "SELECT token, token_source FROM fencemigrate_agent_fence WHERE resource = ?", (RESOURCE,))
    return row


def events(db: Path) -> list[tuple[Any, ...]]:
    """(kind, holder, token, revision) of every event, oldest first."""
    return query(db, "SELECT kind, holder, token, revision FROM fencemigrate_fence_event ORDER BY id")


def at_a1(tmp_path: Path) -> Project:
    """A project with :func:`add_chain`'s a1 and b2, a1 applied by a run that took its own lease
    (token 1, released): the fence and the lease's counter at 1."""
    project = make_sqlite_project(tmp_path)
    add_chain(project)
    project.run_cli("upgrade", "a1", "--holder", "agent").check(0)
    db = database(project)
    assert alembic_versions(db) == ["a1"] and fence(db) == (1, "lease service") and lease_row(db) == (None, 1)
    return project


def error_line(result: Result) -> str:
    """The shell's one error line (``Runtime error near line N: MESSAGE (19)``), without its line number."""
    (line,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert line.startswith("Runtime error near line "), result
    return line.split(": ", 1)[1]


# -- writing the script -----------------------------------------------------------------------


def test_script_is_written_for_the_sqlite3_shell(tmp_path: Path) -> None:
    """Exit 0, the database untouched; the shell's .bail on and .timeout (--wait) ahead of every
    statement, every transaction BEGIN IMMEDIATE; the grant at the start of the transaction, a claim
    reading the granted token before the DDL and again before the ledger and version rows, the
    version write let through and closed again, the release after the last version write."""
    project = at_a1(tmp_path)
    db = database(project)
    before = dump(db)
    result = project.run_cli("upgrade", "a1:head", "--sql", "--holder", "dba", "--wait", "7s").check(0)
    lines = result.stdout.splitlines()

    assert lines[0].startswith("-- fencemigrate: when it runs, this script takes its own lease of resource")
    assert lines[1:4] == [".bail on", ".timeout 7000", "BEGIN IMMEDIATE;"]
    grant = lines.index(
        f"INSERT INTO temp.fencemigrate_script_grant (resource, holder, ttl_ms, heads) VALUES ('{RESOURCE}', "
        f"'{SCRIPT_HOLDER}', 60000, 'a1');"
    )
    claims = [i for i, line in enumerate(lines) if line == f"VALUES ('{RESOURCE}', {SCRIPT_TOKEN}, 0);"]
    version_claims = [i for i, line in enumerate(lines) if line == f"VALUES ('{RESOURCE}', {SCRIPT_TOKEN}, 1);"]
    create_t2 = lines.index("CREATE TABLE t2 (id int);")
    version_write = lines.index("UPDATE alembic_version SET version_num='b2' WHERE alembic_version.version_num = 'a1';")
    assert grant < claims[0] < create_t2 < version_claims[0] < version_write
    assert lines[version_write + 2] == 'DELETE FROM "fencemigrate_version_write_claim";'
    assert version_write < lines.index('INSERT INTO "fencemigrate_fence_event" (resource, kind, holder, token)')
    assert (
        [line for line in lines if line][-1] == "COMMIT;"
        and lines.count("BEGIN IMMEDIATE;") == 1
        and "BEGIN;" not in lines
    )

    assert [line for line in result.stderr.splitlines() if not line.startswith("INFO")] == [
        f"upgrade written as SQL: resource {RESOURCE}, token granted when the script runs, holder {SCRIPT_HOLDER}",
        "  the script takes its own lease from the database's lease service when it runs (TTL 1m, waiting at "
        "most 7s) and refuses unless the heads are a1",
        "  b2 written as SQL, to be applied under the token the script is granted",
        "  heads after the script: b2",
    ]
    assert dump(db) == before


# -- running it with sqlite3 ------------------------------------------------------------------


def test_script_applies_under_its_own_grant(tmp_path: Path) -> None:
    """The script is granted token 2, applies b2 under it, writes the ledger and releases the lease;
    GRANT, APPLY and RELEASE name the script's holder. A fenced run afterwards is granted token 3."""
    project = at_a1(tmp_path)
    db = database(project)
    run_sqlite3(db, script(project, "a1:head"), "-bail").check(0)

    assert user_tables(db) == ["t1", "t2"]
    assert alembic_versions(db) == ["b2"]
    assert ledger(db) == [("a1", 1, "agent", "upgrade"), ("b2", 2, SCRIPT_HOLDER, "upgrade")]
    assert fence(db) == (2, "lease service") and lease_row(db) == (None, 2)
    assert events(db)[3:] == [
        ("GRANT", SCRIPT_HOLDER, 2, None),
        ("APPLY", SCRIPT_HOLDER, 2, "b2"),
        ("RELEASE", SCRIPT_HOLDER, 2, None),
    ]
    assert query(db, "SELECT count(*) FROM fencemigrate_version_write_claim") == [(0,)]
    timeline = project.run_cli("timeline", "--json").check(0).stdout
    assert timeline.count(f'"holder": "{SCRIPT_HOLDER}"') == 3, timeline

    project.add_revision("c3", "b2", "CREATE TABLE t3 (id int)", "DROP TABLE t3", slug="t3")
    project.run_cli("upgrade", "head").check(0)
    assert ledger(db)[2][:2] == ("c3", 3)


def test_script_from_base_applies_on_a_fenced_database(tmp_path: Path) -> None:
    """``upgrade head --sql`` (Alembic's offline script starts from base) on a database with the fence
    schema and nothing else: granted token 1, both revisions applied under it."""
    project = make_sqlite_project(tmp_path)
    add_chain(project)
    project.run_cli("install").check(0)
    db = database(project)
    text = script(project, "head")
    assert "VALUES ('db/migrations', 'dba (offline script)', 60000, '');" in text

    run_sqlite3(db, text, "-bail").check(0)
    assert alembic_versions(db) == ["b2"]
    assert ledger(db) == [("a1", 1, SCRIPT_HOLDER, "upgrade"), ("b2", 1, SCRIPT_HOLDER, "upgrade")]
    assert fence(db) == (1, "lease service") and lease_row(db) == (None, 1)


@pytest.mark.parametrize("flags", [("-bail",), ()], ids=["bail", "no-bail"])
def test_script_refuses_when_the_heads_moved(tmp_path: Path, flags: tuple[str, ...]) -> None:
    """Written from b2; before it runs, another writer rolls b2 back. The script refuses (FENCED) and
    the database file is exactly as it was, also when the shell is run without -bail (the script's
    own .bail on stops it; the shell rolls back the transaction it leaves open).

    Control: plain Alembic's ``upgrade b2:head --sql`` script runs over the moved heads: it creates
    c3's table on a database at a1, and its version-row UPDATE matches nothing.
    """
    project = make_sqlite_project(tmp_path)
    add_chain(project)
    project.add_revision("c3", "b2", "CREATE TABLE t3 (id int)", "DROP TABLE t3", slug="t3")
    project.run_cli("upgrade", "b2").check(0)
    text = script(project, "b2:head")
    project.run_cli("downgrade", "a1").check(0)  # the heads move after the script was written
    db = database(project)
    before = dump(db)

    result = run_sqlite3(db, text, *flags)
    assert result.code != 0, result
    assert error_line(result) == (
        "FENCED: the heads are not b2, the ones this script was written from (resource db/migrations). This is "
        "NOT a transient error: do not retry, rebase, renumber or re-apply; re-read the state (fencemigrate state) "
        "and re-plan. Nothing was applied (19)"
    )
    assert dump(db) == before

    # Control: plain alembic's script of the same range applies c3 blindly over a1.
    project.allow_tokenless_writes()
    plain = project.run_alembic("upgrade", "b2:head", "--sql").check(0).stdout
    run_sqlite3(db, plain, *flags).check(0)
    assert "t3" in table_names(db)
    assert alembic_versions(db) == ["a1"]  # its UPDATE ... WHERE version_num = 'b2' matched nothing


def test_script_refuses_while_another_holder_has_the_lease(tmp_path: Path) -> None:
    """A live lease of another holder: busy at once (SQL on SQLite cannot wait for it), nothing
    written; the lease stays the other holder's."""
    project = at_a1(tmp_path)
    project.run_cli("lease", "acquire", "--holder", "agent-7", "--ttl", "5m").check(0)
    db = database(project)
    text = script(project, "a1:head")
    before = dump(db)

    result = run_sqlite3(db, text, "-bail")
    assert result.code != 0, result
    assert error_line(result) == (
        "lease on db/migrations is busy: another holder's lease is live (fencemigrate lease status shows it); this "
        "is transient, try again later (a script on SQLite does not wait for a live lease); nothing was applied (19)"
    )
    assert dump(db) == before and lease_row(db) == ("agent-7", 2)


def test_script_is_granted_after_an_expired_lease(tmp_path: Path) -> None:
    """An expired lease of another holder: the script is granted the next token, logs its EXPIRE as a
    grant does, and applies."""
    project = at_a1(tmp_path)
    project.run_cli("lease", "acquire", "--holder", "agent-7", "--ttl", "1s").check(0)
    db = database(project)
    text = script(project, "a1:head")
    time.sleep(1.2)

    run_sqlite3(db, text, "-bail").check(0)
    assert alembic_versions(db) == ["b2"] and ledger(db)[1] == ("b2", 3, SCRIPT_HOLDER, "upgrade")
    assert [event[:3] for event in events(db)[-5:]] == [
        ("GRANT", "agent-7", 2),
        ("EXPIRE", "agent-7", 2),
        ("GRANT", SCRIPT_HOLDER, 3),
        ("APPLY", SCRIPT_HOLDER, 3),
        ("RELEASE", SCRIPT_HOLDER, 3),
    ]


def test_script_waits_for_a_migration_in_flight(tmp_path: Path) -> None:
    """Another connection holds SQLite's write lock (a migration in flight): the script's BEGIN
    IMMEDIATE waits for it at most --wait (.timeout), then fails busy and writes nothing."""
    project = at_a1(tmp_path)
    db = database(project)
    text = project.run_cli("upgrade", "a1:head", "--sql", "--holder", "dba", "--wait", "1s").check(0).stdout
    before = dump(db)
    with closing(sqlite3.connect(db, isolation_level=None)) as writer:
        writer.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        result = run_sqlite3(db, text)
        writer.execute("ROLLBACK")
    assert result.code != 0 and time.monotonic() - started >= 1, result
    assert "database is locked" in result.stderr, result
    assert dump(db) == before


def test_two_copies_of_a_script_apply_once(tmp_path: Path) -> None:
    """The same script run twice at once: one copy applies b2; the other waits for SQLite's write
    lock (BEGIN IMMEDIATE, .timeout), then finds the heads moved and refuses. The ledger has b2 once."""
    project = at_a1(tmp_path)
    db = database(project)
    text = script(project, "a1:head")
    shells = [
        subprocess.Popen(
            ["sqlite3", str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    results = [shell.communicate(text, timeout=120) for shell in shells]
    assert sorted(shell.returncode == 0 for shell in shells) == [False, True], results
    (refused,) = [err for shell, (_, err) in zip(shells, results, strict=True) if shell.returncode != 0]
    assert "FENCED: the heads are not a1, the ones this script was written from" in refused
    assert alembic_versions(db) == ["b2"]
    assert ledger(db) == [("a1", 1, "agent", "upgrade"), ("b2", 2, SCRIPT_HOLDER, "upgrade")]
    assert lease_row(db) == (None, 2)


def test_script_without_fence_schema_says_so(tmp_path: Path) -> None:
    """No fence schema in the database: the script stops at its grant with a message that says what
    to do, and the database is left as it was (no table at all)."""
    project = make_sqlite_project(tmp_path)
    add_chain(project)
    db = database(project)
    text = script(project, "head")
    sqlite3.connect(db).close()  # an empty database file

    result = run_sqlite3(db, text)
    assert result.code != 0, result
    assert error_line(result) == (
        "fencemigrate: the fence schema is not installed in this database: install it (fencemigrate install, or "
        "fencemigrate install --sql | sqlite3 -bail DB) and run the script again; nothing was applied (19)"
    )
    assert dump(db) == ["BEGIN TRANSACTION;", "COMMIT;"]


def test_script_refuses_an_older_fence_schema(tmp_path: Path) -> None:
    """A fence schema older than this fencemigrate installs: refused, nothing written."""
    project = at_a1(tmp_path)
    db = database(project)
    text = script(project, "a1:head")
    query(db, "UPDATE fencemigrate_schema_version SET version = '0.7'")
    before = dump(db)

    result = run_sqlite3(db, text, "-bail")
    assert result.code != 0, result
    assert error_line(result).startswith(
        f"fencemigrate: the fence schema here is older than this script needs ({SQLITE_VERSION})"
    )
    assert dump(db) == before


def test_script_refuses_a_resource_leased_from_redis(tmp_path: Path, redis_url: str) -> None:
    """A resource whose tokens come from Redis: the script cannot take its lease from the database's
    service; refused, nothing written."""
    project = make_sqlite_project(tmp_path)
    add_chain(project)
    project.run_cli("upgrade", "a1", "--lease-url", redis_url).check(0)
    db = database(project)
    assert fence(db)[1] == "redis"
    text = script(project, "a1:head")
    before = dump(db)

    result = run_sqlite3(db, text, "-bail")
    assert result.code != 0, result
    assert error_line(result) == (
        "fencemigrate: the tokens of db/migrations come from Redis: a script takes its lease from the database's "
        "lease service only; write it with --token N from a Redis grant; nothing was applied (19)"
    )
    assert dump(db) == before


def test_script_superseded_midway_stops_at_its_next_claim(tmp_path: Path) -> None:
    """transaction_per_migration=True, the script's lease 1s: b2 commits under the script's token;
    its lease expires and another holder is granted token 3 before c3's transaction. c3's claim
    refuses (FENCED), with or without -bail nothing of c3 is committed, and the ledger keeps b2 under
    token 2. (In one transaction no grant can come in between: the script holds SQLite's write lock.)"""
    project = at_a1(tmp_path)
    project.set_env_option("transaction_per_migration", True)
    project.add_revision("c3", "b2", "CREATE TABLE t3 (id int)", "DROP TABLE t3", slug="t3")
    db = database(project)
    text = project.run_cli("upgrade", "a1:head", "--sql", "--holder", "dba", "--ttl", "1s").check(0).stdout
    first_commit = text.index("COMMIT;") + len("COMMIT;\n")
    assert text.count("BEGIN IMMEDIATE;") == 2

    shell = subprocess.Popen(
        ["sqlite3", str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert shell.stdin is not None
    shell.stdin.write(text[:first_commit])
    shell.stdin.flush()
    deadline = time.monotonic() + 30
    while alembic_versions(db) != ["b2"]:
        assert time.monotonic() < deadline, "the script's first transaction did not commit"
        time.sleep(0.05)
    time.sleep(1.1)  # the script's lease expires
    project.run_cli("lease", "acquire", "--holder", "agent-9", "--ttl", "5m").check(0)
    before = dump(db)
    out, err = shell.communicate(text[first_commit:], timeout=60)

    assert shell.returncode != 0, (out, err)
    assert "FENCED: a newer token has written to db/migrations since this script's token was issued" in err
    assert dump(db) == before
    assert alembic_versions(db) == ["b2"] and "t3" not in table_names(db)
    assert ledger(db)[1] == ("b2", 2, SCRIPT_HOLDER, "upgrade")
    assert lease_row(db) == ("agent-9", 3) and fence(db) == (3, "lease service")


def test_stale_token_script_is_fenced_after_the_script(tmp_path: Path) -> None:
    """``--sql --token N`` works on SQLite too: the script's grant fences every older token, so a
    --token 1 script written before it is FENCED, nothing written."""
    project = at_a1(tmp_path)
    db = database(project)
    stale = project.run_cli("upgrade", "a1:head", "--sql", "--token", "1").check(0).stdout
    assert f"VALUES ('{RESOURCE}', 1, 0);" in stale.splitlines()
    run_sqlite3(db, script(project, "a1:head"), "-bail").check(0)
    project.run_cli("downgrade", "a1").check(0)  # token 3 rolls b2 back
    before = dump(db)

    result = run_sqlite3(db, stale)
    assert result.code != 0, result
    assert error_line(result).startswith("FENCED: a newer token has written to db/migrations since this script's")
    assert dump(db) == before


def test_token_script_applies_under_its_token(tmp_path: Path) -> None:
    """``--sql --token N`` on a resource whose tokens are external (the harness's own): applied under
    N, the fence at N, no lease taken."""
    project = make_sqlite_project(tmp_path)
    add_chain(project)
    db = database(project)
    project.run_cli("upgrade", "a1", "--token", "4").check(0)
    text = project.run_cli("upgrade", "a1:head", "--sql", "--token", "5", "--holder", "ci").check(0).stdout
    assert "fencemigrate_script_grant" not in text

    run_sqlite3(db, text).check(0)
    assert alembic_versions(db) == ["b2"] and ledger(db)[1] == ("b2", 5, "ci", "upgrade")
    assert fence(db) == (5, "external")


def test_downgrade_and_stamp_scripts_take_their_own_lease(tmp_path: Path) -> None:
    """``downgrade b2:a1 --sql`` and ``stamp a1:b2 --sql`` without a token: each script is granted
    the next token, writes under it (ROLLBACK, STAMP) and releases its lease."""
    project = make_sqlite_project(tmp_path)
    add_chain(project)
    project.run_cli("upgrade", "head", "--holder", "agent").check(0)
    db = database(project)
    run_sqlite3(db, script(project, "b2:a1", command="downgrade"), "-bail").check(0)
    assert alembic_versions(db) == ["a1"] and user_tables(db) == ["t1"]
    assert ledger(db) == [("a1", 1, "agent", "upgrade")]

    run_sqlite3(db, script(project, "a1:b2", command="stamp"), "-bail").check(0)
    assert alembic_versions(db) == ["b2"]
    assert ledger(db)[1] == ("b2", 3, SCRIPT_HOLDER, "stamp")
    assert [event[:3] for event in events(db)[4:]] == [
        ("GRANT", SCRIPT_HOLDER, 2),
        ("ROLLBACK", SCRIPT_HOLDER, 2),
        ("RELEASE", SCRIPT_HOLDER, 2),
        ("GRANT", SCRIPT_HOLDER, 3),
        ("STAMP", SCRIPT_HOLDER, 3),
        ("RELEASE", SCRIPT_HOLDER, 3),
    ]
    assert lease_row(db) == (None, 3)


def test_downgrade_script_refuses_another_applied_text(tmp_path: Path) -> None:
    """The database applied b2 from another text than the file the downgrade script holds: the
    script stops before rolling anything back."""
    project = make_sqlite_project(tmp_path)
    files = add_chain(project)
    project.run_cli("upgrade", "head").check(0)
    db = database(project)
    files["b2"].write_text(files["b2"].read_text() + "\n# edited after it was applied\n")
    text = script(project, "b2:a1", command="downgrade")
    before = dump(db)

    result = run_sqlite3(db, text)
    assert result.code != 0, result
    assert error_line(result).startswith(
        "fencemigrate: a revision this script rolls back was applied from another text than the file it rolls it "
        "back with: nothing was rolled back."
    )
    assert dump(db) == before
