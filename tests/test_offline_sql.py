"""Offline (``--sql``) scripts carry the fence: a claim before each revision's DDL.

The scripts are run with the real ``psql -v ON_ERROR_STOP=1``: under the highest token
they apply and write the ledger; under a stale token psql stops at the first claim with
FENCED and the database is left exactly as it was. Control: the plain
``alembic upgrade --sql`` script of the same revisions applies the stale write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.db import alembic_versions, libpq_url, query, schema_names, table_names
from support.fence_rows import FENCE_TABLES, fence_token
from support.offline_sql import (
    HOLDER,
    RESOURCE,
    add_chain,
    claim_line,
    ledger,
    psql_binary,
    run_psql,
    sha256_of,
)
from support.project import Project, Result, run_command

from fencemigrate.dialects import dialect_for

PG_VERSION = dialect_for("postgresql").schema_version()


def snapshot(url: str) -> dict[str, Any]:
    """Schemas, tables, version rows, ledger and fence token."""
    return {
        "schemas": schema_names(url),
        "tables": table_names(url),
        "versions": alembic_versions(url),
        "ledger": ledger(url),
        "fence": fence_token(url),
    }


GUARD_LINE = "SELECT fencemigrate.guard_version_table('alembic_version', to_regclass('alembic_version'));"
"""The first step puts the guard on the version table (plain alembic cannot write it afterwards)."""


def record_line(revision: str, token: int, path: Path) -> str:
    """The first line of the ledger statement as it appears in the script: the call, with the sha256
    and the text of the revision file (dollar-quoted, so the statement goes on over the file's lines)."""
    first_line = path.read_text(encoding="utf-8").splitlines()[0]
    return (
        f"SELECT fencemigrate.record_apply('alembic_version', '{revision}', '{RESOURCE}', {token}, "
        f"'{HOLDER}', 'upgrade', '{sha256_of(path)}', $fencemigrate_source${first_line}"
    )


def offline(project: Project, revision: str, token: int) -> Result:
    """``fencemigrate upgrade REV --sql --token N --holder offline-agent``, expected to succeed."""
    return project.run_cli("upgrade", revision, "--sql", "--token", str(token), "--holder", HOLDER).check(0)


def script_events(script: str) -> list[str]:
    """The script's statements that matter for ordering: transaction control, fence calls, DDL, versions."""
    prefixes = (
        "BEGIN",
        "COMMIT",
        "SELECT fencemigrate.",
        "CREATE TABLE",
        "CREATE INDEX",
        "ALTER TABLE",
        "INSERT INTO alembic_version",
        "UPDATE alembic_version",
    )
    return [line for line in script.splitlines() if line.startswith(prefixes)]


# -- the script -------------------------------------------------------------------------------


def test_script_claims_before_each_revisions_ddl(project: Project, pg_url: str) -> None:
    """The script's first statement after BEGIN is a claim, ahead of Alembic's version table; each
    revision's claim comes after the previous revision and before its own first DDL; it is claimed
    again right before its ledger call, which precedes the version-table write; all in one
    BEGIN/COMMIT."""
    files = add_chain(project)
    result = offline(project, "head", 21)
    events = script_events(result.stdout)
    assert events == [
        "BEGIN;",
        claim_line(21),
        "CREATE TABLE IF NOT EXISTS alembic_version (",
        claim_line(21),
        GUARD_LINE,
        "CREATE TABLE t1 (id int);",
        "CREATE INDEX ix_t1_id ON t1 (id);",
        claim_line(21),
        record_line("a1", 21, files["a1"]),
        "INSERT INTO alembic_version (version_num) VALUES ('a1') RETURNING alembic_version.version_num;",
        claim_line(21),
        "CREATE TABLE t2 (id int);",
        "ALTER TABLE t1 ADD COLUMN name text;",
        claim_line(21),
        record_line("b2", 21, files["b2"]),
        "UPDATE alembic_version SET version_num='b2' WHERE alembic_version.version_num = 'a1';",
        "COMMIT;",
    ]
    # Writing the script touches nothing.
    assert snapshot(pg_url) == {"schemas": ["public"], "tables": [], "versions": None, "ledger": [], "fence": None}


def test_script_stdout_is_only_sql_summary_on_stderr(project: Project) -> None:
    """With --sql the summary goes to stderr; stdout holds only the script."""
    add_chain(project)
    result = offline(project, "head", 3)
    summary = [
        f"upgrade written as SQL: resource {RESOURCE}, token 3, holder {HOLDER}",
        "  a1 written as SQL, to be applied under token 3",
        "  b2 written as SQL, to be applied under token 3",
        "  heads after the script: b2",
    ]
    err_lines = result.stderr.splitlines()
    start = err_lines.index(summary[0])
    assert err_lines[start : start + len(summary)] == summary
    for line in summary:
        assert line not in result.stdout.splitlines()
    assert "INFO" not in result.stdout
    out_lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert out_lines[0] == "BEGIN;" and out_lines[-1] == "COMMIT;"


# -- running the script with psql -------------------------------------------------------------


def test_install_sql_through_psql_installs_the_fence_schema(project: Project, pg_url: str, tmp_path: Path) -> None:
    """``fencemigrate install --sql`` piped to psql installs the schema, guard triggers included."""
    script = project.run_cli("install", "--sql").check(0).stdout
    assert "fencemigrate" not in schema_names(pg_url)
    psql = [psql_binary(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", "-", libpq_url(pg_url)]
    run_command(psql, tmp_path, input=script).check(0)  # fencemigrate install --sql | psql

    assert "fencemigrate" in schema_names(pg_url)
    assert query(pg_url, "SELECT fencemigrate.schema_version()") == [(PG_VERSION,)]
    assert table_names(pg_url, "fencemigrate") == FENCE_TABLES
    triggers = query(
        pg_url,
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'fencemigrate.agent_fence'::regclass "
        "AND NOT tgisinternal ORDER BY 1",
    )
    assert triggers == [("agent_fence_monotonic",), ("agent_fence_no_truncate",), ("agent_fence_no_unissued_token",)]
    # A fenced run then uses it as is.
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    result = project.run_cli("upgrade", "head", "--token", "1").check(0)
    assert "  installed the fence schema" not in result.stdout.splitlines()


def test_fresh_token_script_applies_through_psql(project: Project, pg_url: str, tmp_path: Path) -> None:
    """Under the highest token the psql-run script applies both revisions and writes the ledger,
    on a database whose (empty) version table ``install`` already created."""
    files = add_chain(project)
    install = project.run_cli("install").check(0)
    assert install.stdout.strip() == "installed"
    assert alembic_versions(pg_url) == []  # the table exists, empty: the script must not CREATE it again
    script = offline(project, "head", 5).stdout

    run_psql(pg_url, script, tmp_path).check(0)
    assert table_names(pg_url) == ["alembic_version", "t1", "t2"]
    assert alembic_versions(pg_url) == ["b2"]
    assert ledger(pg_url) == [
        ("a1", 5, HOLDER, "upgrade", sha256_of(files["a1"])),
        ("b2", 5, HOLDER, "upgrade", sha256_of(files["b2"])),
    ]
    assert fence_token(pg_url) == 5


def test_script_without_fence_schema_fails_closed(project: Project, pg_url: str, tmp_path: Path) -> None:
    """Without the fence schema the script stops at the first claim: nothing is applied."""
    add_chain(project)
    script = offline(project, "head", 5).stdout
    result = run_psql(pg_url, script, tmp_path)
    assert result.code != 0, result
    assert "fencemigrate.claim" in result.stderr
    assert snapshot(pg_url) == {"schemas": ["public"], "tables": [], "versions": None, "ledger": [], "fence": None}


def test_stale_token_script_is_fenced_by_psql(project: Project, pg_url: str, tmp_path: Path) -> None:
    """After token 10 wrote, a token-9 script fails in psql with FENCED and changes nothing.

    Control: the plain ``alembic upgrade a1:head --sql`` script applies the same stale write.
    """
    add_chain(project)
    project.run_cli("upgrade", "a1", "--token", "10").check(0)
    before = snapshot(pg_url)
    assert before["ledger"][0][:2] == ("a1", 10) and before["fence"] == 10

    script = offline(project, "a1:head", 9).stdout
    assert claim_line(9) in script.splitlines()
    result = run_psql(pg_url, script, tmp_path)
    assert result.code != 0, result
    assert (
        "ERROR:  FENCED: token 10 has since written to db/migrations (resource db/migrations, your token 9)."
        in result.stderr
    ), result
    assert "This is NOT a transient error" in result.stderr
    assert snapshot(pg_url) == before

    # Control: plain alembic's offline script of the same range applies it.
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    plain = project.run_alembic("upgrade", "a1:head", "--sql").check(0)
    assert "fencemigrate" not in plain.stdout
    run_psql(pg_url, plain.stdout, tmp_path, name="plain.sql").check(0)
    assert table_names(pg_url) == ["alembic_version", "t1", "t2"]
    assert alembic_versions(pg_url) == ["b2"]
    assert fence_token(pg_url) == 10


@pytest.mark.parametrize("token", [1, 2**62])
def test_script_token_is_rendered_literally(project: Project, token: int) -> None:
    """The token is written as an integer literal, from 1 up to the largest token."""
    add_chain(project)
    script = offline(project, "head", token).stdout
    # The script opens with a claim; each of the two revisions claims before its DDL and again
    # before its ledger row.
    assert script.splitlines().count(claim_line(token)) == 5


def test_transaction_per_migration_script_claims_after_each_begin(
    project: Project, pg_url: str, tmp_path: Path
) -> None:
    """transaction_per_migration=True: the script opens with a claim, and every revision's own BEGIN
    is followed by its claim before its DDL."""
    project.set_env_option("transaction_per_migration", True)
    files = add_chain(project)
    script = offline(project, "head", 4).stdout
    assert script_events(script) == [
        claim_line(4),
        "BEGIN;",
        "CREATE TABLE IF NOT EXISTS alembic_version (",
        claim_line(4),
        GUARD_LINE,
        "CREATE TABLE t1 (id int);",
        "CREATE INDEX ix_t1_id ON t1 (id);",
        claim_line(4),
        record_line("a1", 4, files["a1"]),
        "INSERT INTO alembic_version (version_num) VALUES ('a1') RETURNING alembic_version.version_num;",
        "COMMIT;",
        "BEGIN;",
        claim_line(4),
        "CREATE TABLE t2 (id int);",
        "ALTER TABLE t1 ADD COLUMN name text;",
        claim_line(4),
        record_line("b2", 4, files["b2"]),
        "UPDATE alembic_version SET version_num='b2' WHERE alembic_version.version_num = 'a1';",
        "COMMIT;",
    ]
    project.run_cli("install").check(0)
    run_psql(pg_url, script, tmp_path).check(0)
    assert alembic_versions(pg_url) == ["b2"]
    assert [row[:2] for row in ledger(pg_url)] == [("a1", 4), ("b2", 4)]


_AUTOCOMMIT_REVISION = """
op.execute("CREATE TABLE t3 (id int)")
with op.get_context().autocommit_block():
    op.execute("CREATE INDEX CONCURRENTLY ix_t3_id ON t3 (id)")
op.execute("CREATE TABLE t4 (id int)")
"""


def test_autocommit_block_script_claims_inside_and_after_the_block(
    project: Project, pg_url: str, tmp_path: Path
) -> None:
    """Offline autocommit block: claim before the revision, claim inside the block before the
    CONCURRENTLY statement, re-claim after it in the new transaction; psql applies it; a stale
    token stops at the first claim (the block never runs)."""
    files = add_chain(project)
    files["c3"] = project.add_revision("c3", "b2", (), slug="concurrently", extra_upgrade_code=_AUTOCOMMIT_REVISION)
    project.run_cli("upgrade", "b2", "--token", "6").check(0)

    script = offline(project, "b2:head", 6)
    assert script_events(script.stdout) == [
        "BEGIN;",
        claim_line(6),
        claim_line(6),
        GUARD_LINE,
        "CREATE TABLE t3 (id int);",
        "COMMIT;",
        claim_line(6),
        "CREATE INDEX CONCURRENTLY ix_t3_id ON t3 (id);",
        "BEGIN;",
        "CREATE TABLE t4 (id int);",
        claim_line(6),
        record_line("c3", 6, files["c3"]),
        "UPDATE alembic_version SET version_num='c3' WHERE alembic_version.version_num = 'b2';",
        "COMMIT;",
    ]
    assert "    WARNING: this revision ran outside a single transaction" in script.stderr

    # Stale: token 5 < 6 is FENCED at the very first claim.
    stale = offline(project, "b2:head", 5).stdout
    before = snapshot(pg_url)
    failed = run_psql(pg_url, stale, tmp_path, name="stale.sql")
    assert failed.code != 0 and "FENCED: token 6 has since written" in failed.stderr, failed
    assert snapshot(pg_url) == before

    run_psql(pg_url, script.stdout, tmp_path).check(0)
    assert table_names(pg_url) == ["alembic_version", "t1", "t2", "t3", "t4"]
    assert query(pg_url, "SELECT indexname FROM pg_indexes WHERE indexname = 'ix_t3_id'") == [("ix_t3_id",)]
    assert alembic_versions(pg_url) == ["c3"]
    assert [row[:2] for row in ledger(pg_url)] == [("a1", 6), ("b2", 6), ("c3", 6)]


def test_commit_midway_script_is_reclaimed_before_the_ledger_and_version_rows(
    project: Project, pg_url: str, tmp_path: Path
) -> None:
    """A revision that runs COMMIT midway: in the script, the fence must be claimed again before
    the ledger and version rows are written (as online runs do), so a newer token that wrote after
    the COMMIT stops the script. The newer token is simulated by the revision's own post-COMMIT
    statement raising the fence to 99, which in psql commits on its own exactly like another session.
    The step must also be reported non-atomic, as it is online.
    """
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.run_cli("upgrade", "a1", "--token", "5").check(0)
    project.add_revision(
        "b2",
        "a1",
        [
            "CREATE TABLE before_commit (id int)",
            "COMMIT",
            "UPDATE fencemigrate.agent_fence SET token = 99 WHERE resource = 'db/migrations'",
            "CREATE TABLE after_commit (id int)",
        ],
        slug="commit",
    )
    script = offline(project, "a1:head", 6)

    result = run_psql(pg_url, script.stdout, tmp_path)
    assert result.code != 0 and "FENCED: token 99 has since written" in result.stderr, (
        f"the post-COMMIT part of b2 ran without a fresh claim:\n{result}\n--- script ---\n{script.stdout}"
    )
    assert alembic_versions(pg_url) == ["a1"]
    assert [row[:2] for row in ledger(pg_url)] == [("a1", 5)]
    assert "    WARNING: this revision ran outside a single transaction" in script.stderr
