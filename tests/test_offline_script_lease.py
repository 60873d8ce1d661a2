"""``upgrade A:B --sql`` without ``--token``: the script takes its own lease when it runs.

Alembic writes ``upgrade A:B --sql`` with no database at hand (exit 0), and DBAs rely on it. The
fenced script written without a token takes a grant from the database's own lease service when a DBA
runs it with ``psql -v ON_ERROR_STOP=1`` (a new token, above every token before, to a holder named
``<holder> (offline script)``), refuses unless the version table holds exactly the heads the script
was written from (the ``A`` of ``A:B``; none from base), claims the fence with that token before
each revision's DDL, writes the ledger under it and releases the lease, all in the script's
transaction. Every test runs the real psql against a real PostgreSQL database.

Control: plain ``alembic upgrade A:B --sql`` writes a script that applies blindly over moved heads.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from support.db import alembic_versions, libpq_url, query, schema_names, table_names
from support.fence_rows import fence_token
from support.offline_sql import add_chain, claim_line, ledger, run_psql, sha256_of
from support.project import Project, Result

from fencemigrate.dialects import dialect_for

PG_VERSION = dialect_for("postgresql").schema_version()

RESOURCE = "db/migrations"
SCRIPT_HOLDER = "dba (offline script)"
SCRIPT_TOKEN = "(SELECT s.token FROM pg_temp.fencemigrate_script_lease s)"


def script(project: Project, *args: str) -> Result:
    """``fencemigrate upgrade ARGS --sql --holder dba`` (no token), expected to succeed."""
    return project.run_cli("upgrade", *args, "--sql", "--holder", "dba").check(0)


def lease_row(url: str) -> tuple[Any, ...] | None:
    """(holder, token) of the built-in lease service's lease, or None before any."""
    if "fencemigrate" not in schema_names(url):
        return None
    rows = query(url, "SELECT holder, token FROM fencemigrate.lease WHERE resource = %s", (RESOURCE,))
    return rows[0] if rows else None


def events(url: str) -> list[tuple[str, str | None, int | None, str | None]]:
    """(kind, holder, token, revision) of every fence event of the resource, oldest first."""
    if "fencemigrate" not in schema_names(url):
        return []
    rows = query(
        url,
        "SELECT kind, holder, token, revision FROM fencemigrate.fence_event WHERE resource = %s ORDER BY id",
        (RESOURCE,),
    )
    return [(str(r[0]), r[1], r[2], r[3]) for r in rows]


def everything(url: str) -> dict[str, Any]:
    """Schemas, tables, version rows, ledger, fence token, lease and events."""
    return {
        "schemas": schema_names(url),
        "tables": table_names(url),
        "versions": alembic_versions(url),
        "ledger": ledger(url),
        "fence": fence_token(url),
        "lease": lease_row(url),
        "events": events(url),
    }


def at_a1(project: Project, pg_url: str) -> None:
    """a1 applied by a run that took its own lease (token 1): the lease is free, the fence at 1."""
    add_chain(project)
    project.run_cli("upgrade", "a1").check(0)
    assert alembic_versions(pg_url) == ["a1"] and fence_token(pg_url) == 1 and lease_row(pg_url) == (None, 1)


# -- writing the script -----------------------------------------------------------------------


def test_script_without_token_is_written_and_touches_nothing(project: Project, pg_url: str) -> None:
    """Exit 0 as Alembic's, the grant ahead of every claim, claims and ledger calls reading the token
    the script is granted, the release after the last version write; the database is untouched and
    the summary (stderr) says the token is granted when the script runs."""
    at_a1(project, pg_url)
    before = everything(pg_url)
    result = script(project, "a1:head")
    lines = result.stdout.splitlines()

    grant_call = next(i for i, line in enumerate(lines) if line.startswith("SELECT pg_temp.fencemigrate_script_grant("))
    assert lines[grant_call] + lines[grant_call + 1].strip() == (
        f"SELECT pg_temp.fencemigrate_script_grant('{RESOURCE}', '{SCRIPT_HOLDER}', CAST(60000 AS bigint), "
        "CAST(600000 AS bigint),'alembic_version', CAST('{\"a1\"}' AS text[]), "
        f"'{PG_VERSION}') AS granted_token;"
    )
    token_claim = f"SELECT fencemigrate.claim('{RESOURCE}', {SCRIPT_TOKEN});"
    claims = [i for i, line in enumerate(lines) if line == token_claim]
    assert len(claims) == 3 and grant_call < claims[0]
    assert lines.index("CREATE TABLE t2 (id int);") > claims[1]
    assert not any(line.startswith("SELECT fencemigrate.claim('db/migrations', 0") for line in lines)
    record = next(line for line in lines if line.startswith("SELECT fencemigrate.record_apply("))
    assert record.startswith(
        f"SELECT fencemigrate.record_apply('alembic_version', 'b2', '{RESOURCE}', {SCRIPT_TOKEN}, '{SCRIPT_HOLDER}', "
    )
    version_write = lines.index("UPDATE alembic_version SET version_num='b2' WHERE alembic_version.version_num = 'a1';")
    release = lines.index("WITH released AS (")
    assert version_write < release < lines.index("COMMIT;")
    assert lines.count("BEGIN;") == 1

    assert [line for line in result.stderr.splitlines() if not line.startswith("INFO")] == [
        f"upgrade written as SQL: resource {RESOURCE}, token granted when the script runs, holder {SCRIPT_HOLDER}",
        "  the script takes its own lease from the database's lease service when it runs (TTL 1m, waiting at "
        "most 10m) and refuses unless the heads are a1",
        "  b2 written as SQL, to be applied under the token the script is granted",
        "  heads after the script: b2",
    ]
    assert everything(pg_url) == before


def test_script_json_summary_has_no_token(project: Project) -> None:
    """--json: the token is null, at the top and in each step (granted when the script runs)."""
    add_chain(project)
    result = project.run_cli("upgrade", "head", "--sql", "--json").check(0)
    summary = json.loads(result.stderr.strip().splitlines()[-1])
    assert summary["token"] is None and summary["offline"] is True
    assert [(step["revisions"], step["token"]) for step in summary["steps"]] == [(["a1"], None), (["b2"], None)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--preempt"], "--preempt cannot be used with --sql: a script cannot cancel another session's migration"),
        (
            ["--lease-url", "redis://127.0.0.1:1/0"],
            "an offline script without --token takes its lease from the database's own lease service, not from Redis",
        ),
    ],
)
def test_what_a_script_cannot_do_is_bad_usage(project: Project, pg_url: str, options: list[str], message: str) -> None:
    """A script cannot preempt, nor take a Redis grant: exit 2, nothing written."""
    add_chain(project)
    result = project.run_cli("upgrade", "head", "--sql", *options)
    assert result.code == 2, result
    assert message in result.stderr and result.stdout == ""
    assert schema_names(pg_url) == ["public"]


# -- running it with psql ---------------------------------------------------------------------


def test_script_applies_under_its_own_grant(project: Project, pg_url: str, tmp_path: Path) -> None:
    """The script is granted token 2 (above the fence and the lease's counter), applies b2 under it,
    writes the ledger and releases the lease; GRANT, APPLY and RELEASE name the script's holder. A
    fenced run afterwards is granted token 3."""
    at_a1(project, pg_url)
    files = add_chain_files(project)
    text = script(project, "a1:head").stdout

    run_psql(pg_url, text, tmp_path).check(0)
    assert table_names(pg_url) == ["alembic_version", "t1", "t2"]
    assert alembic_versions(pg_url) == ["b2"]
    assert ledger(pg_url)[1] == ("b2", 2, SCRIPT_HOLDER, "upgrade", sha256_of(files["b2"]))
    assert fence_token(pg_url) == 2
    assert lease_row(pg_url) == (None, 2)
    assert events(pg_url)[3:] == [
        ("GRANT", SCRIPT_HOLDER, 2, None),
        ("APPLY", SCRIPT_HOLDER, 2, "b2"),
        ("RELEASE", SCRIPT_HOLDER, 2, None),
    ]
    state = project.run_cli("state").check(0).stdout
    assert f"  b2  applied_token=2  holder={SCRIPT_HOLDER}  upgrade at " in state

    project.add_revision("c3", "b2", "CREATE TABLE t3 (id int)", "DROP TABLE t3", slug="t3")
    project.run_cli("upgrade", "head").check(0)
    assert ledger(pg_url)[2][:2] == ("c3", 3)


def add_chain_files(project: Project) -> dict[str, Path]:
    """The files of :func:`add_chain`'s revisions (already added)."""
    return {path.name.split("_")[0]: path for path in project.versions.glob("*.py")}


def test_script_from_base_applies_on_an_empty_database(project: Project, pg_url: str, tmp_path: Path) -> None:
    """``upgrade head --sql`` (no start: Alembic's offline script starts from base) on a database with
    the fence schema and nothing else: the script is granted token 1 and applies both revisions."""
    add_chain(project)
    project.run_cli("install").check(0)
    text = script(project, "head").stdout
    assert "CAST('{}' AS text[])" in text

    run_psql(pg_url, text, tmp_path).check(0)
    assert alembic_versions(pg_url) == ["b2"]
    assert [row[:3] for row in ledger(pg_url)] == [("a1", 1, SCRIPT_HOLDER), ("b2", 1, SCRIPT_HOLDER)]
    assert fence_token(pg_url) == 1 and lease_row(pg_url) == (None, 1)


def test_script_refuses_when_the_heads_moved(project: Project, pg_url: str, tmp_path: Path) -> None:
    """Written from b2; before it runs, another writer rolls b2 back. The script refuses (FENCED:
    heads are a1, it was written from b2) and nothing changes: no table, no version row, no ledger
    row, no grant (the fence, the lease's counter and the event log are as they were).

    Control: plain Alembic's ``upgrade b2:head --sql`` script runs over the moved heads: it creates
    c3's table on a database at a1, and its version-row UPDATE (``WHERE version_num = 'b2'``) matches
    nothing, so the database says a1 with c3's table in it.
    """
    add_chain(project)
    project.add_revision("c3", "b2", "CREATE TABLE t3 (id int)", "DROP TABLE t3", slug="t3")
    project.run_cli("upgrade", "b2").check(0)
    text = script(project, "b2:head").stdout
    project.run_cli("downgrade", "a1").check(0)  # the heads move after the script was written
    before = everything(pg_url)
    assert before["versions"] == ["a1"] and before["fence"] == 2

    result = run_psql(pg_url, text, tmp_path)
    assert result.code != 0, result
    assert (
        "ERROR:  FENCED: heads are a1, this script was written from b2 (resource db/migrations). This is NOT a "
        "transient error: do not retry, rebase, renumber or re-apply; re-read the state and re-plan. Nothing was "
        "applied" in result.stderr
    ), result
    assert everything(pg_url) == before

    # Control: plain alembic's script of the same range applies c3 blindly over a1.
    project.allow_tokenless_writes()
    plain = project.run_alembic("upgrade", "b2:head", "--sql").check(0)
    run_psql(pg_url, plain.stdout, tmp_path, name="plain.sql").check(0)
    assert "t3" in table_names(pg_url)
    assert alembic_versions(pg_url) == ["a1"]  # its UPDATE ... WHERE version_num = 'b2' matched nothing


def test_script_refuses_while_another_holder_has_the_lease(project: Project, pg_url: str, tmp_path: Path) -> None:
    """A live lease of another holder: the script (written with --wait 1s) waits that long, then
    fails busy without writing anything; the lease stays the other holder's."""
    at_a1(project, pg_url)
    project.run_cli("lease", "acquire", "--holder", "agent-7", "--ttl", "5m").check(0)
    text = project.run_cli("upgrade", "a1:head", "--sql", "--holder", "dba", "--wait", "1s").check(0).stdout
    before = everything(pg_url)
    assert before["lease"] == ("agent-7", 2)

    started = time.monotonic()
    result = run_psql(pg_url, text, tmp_path)
    assert result.code != 0, result
    assert time.monotonic() - started >= 1
    assert "ERROR:  lease on db/migrations is busy: held by agent-7 (token 2) until " in result.stderr, result
    assert "nothing was applied" in result.stderr
    assert everything(pg_url) == before


def test_script_waits_for_a_lease_to_expire_then_applies(project: Project, pg_url: str, tmp_path: Path) -> None:
    """A lease that expires within the script's --wait: the script waits for it, then is granted the
    next token (the expiry logged as EXPIRE, as a grant logs it) and applies."""
    at_a1(project, pg_url)
    project.run_cli("lease", "acquire", "--holder", "agent-7", "--ttl", "2s").check(0)
    text = project.run_cli("upgrade", "a1:head", "--sql", "--holder", "dba", "--wait", "30s").check(0).stdout

    run_psql(pg_url, text, tmp_path).check(0)
    assert alembic_versions(pg_url) == ["b2"]
    assert [row[:3] for row in ledger(pg_url)][1] == ("b2", 3, SCRIPT_HOLDER)
    assert [event[:3] for event in events(pg_url)[-5:]] == [
        ("GRANT", "agent-7", 2),
        ("EXPIRE", "agent-7", 2),
        ("GRANT", SCRIPT_HOLDER, 3),
        ("APPLY", SCRIPT_HOLDER, 3),
        ("RELEASE", SCRIPT_HOLDER, 3),
    ]


def test_script_takes_over_an_implausible_lease(project: Project, pg_url: str, tmp_path: Path) -> None:
    """A lease granted a year ahead of the database's clock (the server's clock stepped back since) is
    implausible and counts as expired, as for a grant the runner takes (the lease_lock statement): the script
    is granted the next token at once, the takeover logged as an EXPIRE that says so. It was busy
    until the lease's far expiry before."""
    at_a1(project, pg_url)
    project.run_cli("lease", "acquire", "--holder", "agent-fast", "--ttl", "5m").check(0)
    with psycopg.connect(libpq_url(pg_url), autocommit=True) as owner:  # as if granted by a clock a year ahead
        owner.execute("ALTER TABLE fencemigrate.lease DISABLE TRIGGER USER")
        owner.execute(
            "UPDATE fencemigrate.lease SET granted_at = clock_timestamp() + interval '1 year', "
            "expires_at = clock_timestamp() + interval '1 year 5 minutes'"
        )
        owner.execute("ALTER TABLE fencemigrate.lease ENABLE TRIGGER USER")
    text = project.run_cli("upgrade", "a1:head", "--sql", "--holder", "dba", "--wait", "1s").check(0).stdout

    run_psql(pg_url, text, tmp_path).check(0)
    assert alembic_versions(pg_url) == ["b2"]
    assert [event[:3] for event in events(pg_url)[-4:]] == [
        ("EXPIRE", "agent-fast", 2),
        ("GRANT", SCRIPT_HOLDER, 3),
        ("APPLY", SCRIPT_HOLDER, 3),
        ("RELEASE", SCRIPT_HOLDER, 3),
    ]
    detail = query(pg_url, "SELECT detail FROM fencemigrate.fence_event WHERE kind = 'EXPIRE' ORDER BY id DESC LIMIT 1")
    assert json.loads(detail[0][0])["implausible"] is True


def test_script_waits_for_a_migration_in_flight(project: Project, pg_url: str, tmp_path: Path) -> None:
    """A transaction holding a claim of the resource (a migration in flight): the script cannot be
    granted while it runs; written with --wait 1s it fails busy and writes nothing."""
    at_a1(project, pg_url)
    text = project.run_cli("upgrade", "a1:head", "--sql", "--holder", "dba", "--wait", "1s").check(0).stdout
    before = everything(pg_url)
    with psycopg.connect(libpq_url(pg_url)) as writer:
        writer.execute("SELECT fencemigrate.claim(%s, 1)", (RESOURCE,))  # open transaction, claim held
        result = run_psql(pg_url, text, tmp_path)
        writer.rollback()
    assert result.code != 0, result
    assert "ERROR:  lease on db/migrations is busy: a migration under an older token is still in flight" in (
        result.stderr
    ), result
    assert everything(pg_url) == before


def test_two_copies_of_a_script_apply_once(project: Project, pg_url: str, tmp_path: Path) -> None:
    """The same script run twice at once: one copy applies b2; the other waits for it (the claim lock),
    then finds the heads moved and refuses. The ledger has b2 once."""
    at_a1(project, pg_url)
    text = script(project, "a1:head").stdout
    results: list[Result] = []

    def run(name: str) -> None:
        results.append(run_psql(pg_url, text, tmp_path, name=name))

    threads = [threading.Thread(target=run, args=(f"copy{i}.sql",)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(result.code == 0 for result in results) == [False, True], results
    (refused,) = [result for result in results if result.code != 0]
    assert "FENCED: heads are b2, this script was written from a1" in refused.stderr, refused
    assert alembic_versions(pg_url) == ["b2"]
    assert [row[:2] for row in ledger(pg_url)] == [("a1", 1), ("b2", 2)]
    assert lease_row(pg_url) == (None, 2)


def test_script_without_fence_schema_says_so(project: Project, pg_url: str, tmp_path: Path) -> None:
    """No fence schema in the database: the script stops at its grant with a message that says what
    to do, and the database is left as it was (no fence schema, no table)."""
    add_chain(project)
    text = script(project, "head").stdout
    result = run_psql(pg_url, text, tmp_path)
    assert result.code != 0, result
    assert (
        "ERROR:  fencemigrate: the fence schema (fencemigrate) is not installed in this database: install it "
        "(fencemigrate install, or fencemigrate install --sql | psql) and run the script again; nothing was applied"
        in result.stderr
    ), result
    assert schema_names(pg_url) == ["public"] and table_names(pg_url) == []


def test_stale_token_cannot_write_after_the_script(project: Project, pg_url: str, tmp_path: Path) -> None:
    """The script's grant fences every older token: a --token 1 script written before it is FENCED."""
    at_a1(project, pg_url)
    stale = project.run_cli("upgrade", "a1:head", "--sql", "--token", "1").check(0).stdout
    run_psql(pg_url, script(project, "a1:head").stdout, tmp_path).check(0)
    project.run_cli("downgrade", "a1").check(0)  # token 3 rolls b2 back
    before = everything(pg_url)
    assert claim_line(1) in stale.splitlines()
    result = run_psql(pg_url, stale, tmp_path, name="stale.sql")
    assert result.code != 0 and "FENCED: token 3 has since written" in result.stderr, result
    assert everything(pg_url) == before


def test_transaction_per_migration_script(project: Project, pg_url: str, tmp_path: Path) -> None:
    """transaction_per_migration=True: the grant commits on its own before the first BEGIN, each
    revision's transaction claims with the granted token, the last one releases the lease."""
    project.set_env_option("transaction_per_migration", True)
    add_chain(project)
    project.run_cli("install").check(0)
    text = script(project, "head").stdout
    lines = text.splitlines()
    assert lines.index("BEGIN;") > next(i for i, line in enumerate(lines) if "fencemigrate_script_grant(" in line)
    assert lines.count("BEGIN;") == 2

    run_psql(pg_url, text, tmp_path).check(0)
    assert alembic_versions(pg_url) == ["b2"]
    assert [row[:3] for row in ledger(pg_url)] == [("a1", 1, SCRIPT_HOLDER), ("b2", 1, SCRIPT_HOLDER)]
    assert lease_row(pg_url) == (None, 1)
    assert [event[0] for event in events(pg_url)] == ["GRANT", "APPLY", "APPLY", "RELEASE"]


def test_downgrade_and_stamp_scripts_take_their_own_lease(project: Project, pg_url: str, tmp_path: Path) -> None:
    """``downgrade b2:a1 --sql`` and ``stamp a1:b2 --sql`` without a token: each script is granted
    the next token, writes under it (ROLLBACK, STAMP) and releases its lease."""
    add_chain(project)
    project.run_cli("upgrade", "head").check(0)
    down = project.run_cli("downgrade", "b2:a1", "--sql", "--holder", "dba").check(0).stdout
    run_psql(pg_url, down, tmp_path).check(0)
    assert alembic_versions(pg_url) == ["a1"] and table_names(pg_url) == ["alembic_version", "t1"]
    assert [row[:3] for row in ledger(pg_url)] == [("a1", 1, events(pg_url)[0][1])]

    stamp = project.run_cli("stamp", "a1:b2", "--sql", "--holder", "dba").check(0).stdout
    run_psql(pg_url, stamp, tmp_path, name="stamp.sql").check(0)
    assert alembic_versions(pg_url) == ["b2"]
    assert [row[:3] for row in ledger(pg_url)][1] == ("b2", 3, SCRIPT_HOLDER)
    assert [event[:3] for event in events(pg_url)[4:]] == [
        ("GRANT", SCRIPT_HOLDER, 2),
        ("ROLLBACK", SCRIPT_HOLDER, 2),
        ("RELEASE", SCRIPT_HOLDER, 2),
        ("GRANT", SCRIPT_HOLDER, 3),
        ("STAMP", SCRIPT_HOLDER, 3),
        ("RELEASE", SCRIPT_HOLDER, 3),
    ]
    assert lease_row(pg_url) == (None, 3)
