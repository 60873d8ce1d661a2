"""``upgrade A:B --sql`` on MySQL/MariaDB: a script for the mysql (mariadb) client, fenced when it runs.

The script does in plain SQL what a pre-check run does in the runner: it checks the fence schema,
takes the resource's named lock (and, written without ``--token``, the lease lock and its own grant
from the built-in lease service: a new token to ``<holder> (offline script)``, refused unless the
version table holds exactly the heads it was written from), marks each revision 'applying' /
'rolling_back' before its DDL while the fence holds its token, settles the mark after the version
write, and releases the lease and the named lock at the end. A check that does not pass is raised by
the fence schema's ``script_refusal`` table: the client stops there in batch mode, and under
``--force`` the script ends its own session. Every test runs the real ``mariadb`` client on a real
database of the test server.

Control: plain ``alembic upgrade A:B --sql`` writes a script that applies blindly over moved heads.
"""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any

import pytest
from sqlalchemy import make_url
from support.mysql_rows import events, ledger, snapshot, versions
from support.mysql_server import mysql_rows, mysql_table_names
from support.offline_sql import add_chain
from support.project import MakeProject, Project, Result

from fencemigrate.dialects import dialect_for

MYSQL_VERSION = dialect_for("mysql").schema_version()

RESOURCE = "db/migrations"
SCRIPT_HOLDER = "dba (offline script)"


def script(project: Project, *args: str, command: str = "upgrade") -> str:
    """``fencemigrate COMMAND ARGS --sql --holder dba`` (no token): the script, exit 0."""
    return project.run_cli(command, *args, "--sql", "--holder", "dba").check(0).stdout


def run_client_args(url: str, *flags: str) -> list[str]:
    """``mariadb FLAGS DB`` for the test database ``url``."""
    parsed = make_url(url)
    return [
        "mariadb",
        f"--host={parsed.host}",
        f"--port={parsed.port}",
        f"--user={parsed.username}",
        f"--password={parsed.password}",
        *flags,
        str(parsed.database),
    ]


def run_client(url: str, text: str, *flags: str) -> Result:
    """The real mariadb client in batch mode, reading the script on its standard input
    (``mariadb FLAGS DB < script``)."""
    args = tuple(run_client_args(url, *flags))
    done = subprocess.run(args, input=text, capture_output=True, text=True, timeout=120, check=False)
    return Result(args, done.returncode, done.stdout, done.stderr)


def lease_row(url: str) -> tuple[Any, ...]:
    """(holder, token) of the built-in lease service's lease."""
    (row,) = mysql_rows(url, "SELECT holder, token FROM fencemigrate_lease WHERE resource = %s", (RESOURCE,))
    return row[0], int(row[1])


def fence(url: str) -> tuple[Any, ...]:
    """(token, token_source) of the resource's fence row."""
    (row,) = mysql_rows(
        url, "SELECT token, token_source FROM fencemigrate_agent_fence WHERE resource = %s", (RESOURCE,)
    )
    return int(row[0]), row[1]


def at_a1(make_project: MakeProject, mysql_url: str) -> Project:
    """A project with a1 and b2, a1 applied by a run that took its own lease (token 1, released)."""
    project = make_project(url=mysql_url)
    add_chain(project)
    project.run_cli("upgrade", "a1", "--holder", "agent").check(0)
    assert versions(mysql_url) == ["a1"] and fence(mysql_url) == (1, "lease service")
    assert lease_row(mysql_url) == (None, 1)
    return project


def error_line(result: Result) -> str:
    """The client's one error line (``ERROR 1644 (FM001) at line N: MESSAGE``) without its line
    number (the client prints the failing statement above it)."""
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("ERROR ")]
    code, message = line.split(": ", 1)
    return code.split(" at line ")[0] + ": " + message


def dump(url: str) -> dict[str, Any]:
    """Everything a refused script must leave as it was: :func:`snapshot` (tables, columns, versions,
    fence, ledger, lease), every event and tokenless write, and the triggers."""
    state = snapshot(url)
    for name, sql in (
        ("events", "SELECT * FROM fencemigrate_fence_event ORDER BY id"),
        ("tokenless", "SELECT * FROM fencemigrate_tokenless_write ORDER BY id"),
        ("triggers", "SELECT trigger_name FROM information_schema.triggers WHERE event_object_schema = DATABASE()"),
    ):
        state[name] = mysql_rows(url, sql) if "fencemigrate_fence_event" in mysql_table_names(url) else None
    return state


def locks_free(url: str) -> bool:
    """Neither the resource's named lock nor its lease lock is held by any session."""
    (row,) = mysql_rows(
        url,
        "SELECT IS_FREE_LOCK(CONCAT('fencemigrate:', DATABASE(), '/', %s)) "
        "AND IS_FREE_LOCK(CONCAT('fencemigrate-lease:', DATABASE(), '/', %s))",
        (RESOURCE, RESOURCE),
    )
    return bool(row[0])


# -- writing the script -----------------------------------------------------------------------


def test_script_is_written_for_the_mysql_client(make_project: MakeProject, mysql_url: str) -> None:
    """Exit 0, the database untouched; the schema check, the lease lock and the named lock (both
    waiting --wait), the grant, then for each revision its mark before its DDL and its settling after
    the version write; the release and the named lock's release last."""
    project = at_a1(make_project, mysql_url)
    before = dump(mysql_url)
    result = project.run_cli("upgrade", "a1:head", "--sql", "--holder", "dba", "--wait", "7s").check(0)
    text = result.stdout
    assert dump(mysql_url) == before

    assert text.startswith(
        "-- fencemigrate: when it runs, this script takes its own lease of resource 'db/migrations' from the "
        "database's lease service, as 'dba (offline script)', and is fenced by the token it is granted; it "
        f"refuses to run unless the heads are a1; needs the fence schema {MYSQL_VERSION} or later "
        "(fencemigrate install); run it with the mysql or mariadb client in batch mode (mariadb DB < script), "
        "which stops at the first error; "
        "never with --force"
    )
    order = [
        "FROM `fencemigrate_schema_version` v",
        "GET_LOCK((SELECT IF(CHAR_LENGTH(n.name) <= 64, n.name, CONCAT('fencemigrate-lease:'",
        "'db/migrations') AS name) n), 7) = 1",
        "INSERT INTO `fencemigrate_fence_event` (at, resource, kind, holder, token, detail)\nVALUES",
        "'applying', @fencemigrate_token, 'dba (offline script)'",
        "CREATE TABLE t2 (id int);",
        "UPDATE alembic_version SET version_num='b2' WHERE alembic_version.version_num = 'a1';",
        "   SET state = 'applied'",
        "'RELEASE', l.holder, l.token",
        "DO RELEASE_LOCK((SELECT IF(CHAR_LENGTH(n.name) <= 64, n.name, CONCAT('fencemigrate:'",
    ]
    positions = [text.index(part) for part in order]
    assert positions == sorted(positions)
    assert text.count("INSERT INTO `fencemigrate_script_refusal`") == 6
    assert [line for line in result.stderr.splitlines() if not line.startswith("INFO")] == [
        f"upgrade written as SQL: resource {RESOURCE}, token granted when the script runs, holder {SCRIPT_HOLDER}",
        "  the script takes its own lease from the database's lease service when it runs (TTL 1m, waiting at "
        "most 7s) and refuses unless the heads are a1",
        "  pre-check mode: the script checks the fence before each revision under the resource's named lock, "
        "marks each revision before its DDL and settles it after (an unfinished one stays dirty)",
        "  b2 written as SQL, to be applied under the token the script is granted",
        "  heads after the script: b2",
    ]


# -- running it -----------------------------------------------------------------------------


def test_script_applies_under_its_own_grant(make_project: MakeProject, mysql_url: str) -> None:
    """Granted token 2 (above the lease counter and the fence), b2 applied and recorded under it,
    the lease released, GRANT/APPLY/RELEASE name the script's holder; its locks are free again. A
    fenced run afterwards is granted token 3."""
    project = at_a1(make_project, mysql_url)
    run_client(mysql_url, script(project, "a1:head")).check(0)

    assert versions(mysql_url) == ["b2"] and "t2" in mysql_table_names(mysql_url)
    assert ledger(mysql_url) == {"a1": (1, "agent", "applied"), "b2": (2, SCRIPT_HOLDER, "applied")}
    assert fence(mysql_url) == (2, "lease service") and lease_row(mysql_url) == (None, 2)
    assert events(mysql_url)[-3:] == [
        ("GRANT", SCRIPT_HOLDER, 2, None),
        ("APPLY", SCRIPT_HOLDER, 2, "b2"),
        ("RELEASE", SCRIPT_HOLDER, 2, None),
    ]
    assert locks_free(mysql_url)
    b2_file = next(project.path.rglob("b2_*.py")).read_text()
    assert project.run_cli("show", "b2", "--applied").check(0).stdout == b2_file  # the ledger keeps its text
    timeline = project.run_cli("timeline", "--json").check(0).stdout
    assert timeline.count(f'"holder": "{SCRIPT_HOLDER}"') == 3, timeline

    project.add_revision("c3", "b2", "CREATE TABLE t3 (id int)", "DROP TABLE t3", slug="t3")
    project.run_cli("upgrade", "head").check(0)
    assert ledger(mysql_url)["c3"][0] == 3


def test_script_from_base_applies_on_a_fenced_database(make_project: MakeProject, mysql_url: str) -> None:
    """``upgrade head --sql`` (from base) on a database with the fence schema and nothing else:
    granted token 1, both revisions applied under it; plain alembic is still refused afterwards."""
    project = make_project(url=mysql_url)
    add_chain(project)
    project.run_cli("install").check(0)
    text = script(project, "head")
    assert "CREATE TABLE IF NOT EXISTS alembic_version" in text

    run_client(mysql_url, text).check(0)
    assert versions(mysql_url) == ["b2"]
    assert ledger(mysql_url) == {"a1": (1, SCRIPT_HOLDER, "applied"), "b2": (1, SCRIPT_HOLDER, "applied")}
    assert fence(mysql_url) == (1, "lease service") and lease_row(mysql_url) == (None, 1)
    assert project.run_alembic("downgrade", "a1").code != 0
    assert versions(mysql_url) == ["b2"]


@pytest.mark.parametrize("flags", [(), ("--force",)], ids=["batch", "force"])
def test_script_refuses_when_the_heads_moved(make_project: MakeProject, mysql_url: str, flags: tuple[str, ...]) -> None:
    """Written from b2; before it runs, another writer rolls b2 back. The script refuses (FENCED) and
    the database is exactly as it was, its locks free. With ``--force`` the client runs on (and exits 0),
    but the script has ended its own session: nothing after the refusal reaches the database.

    Control: plain Alembic's ``upgrade b2:head --sql`` script runs over the moved heads: it creates
    c3's table on a database at a1, and its version-row UPDATE matches nothing.
    """
    project = make_project(url=mysql_url)
    add_chain(project)
    project.add_revision("c3", "b2", "CREATE TABLE t3 (id int)", "DROP TABLE t3", slug="t3")
    project.run_cli("upgrade", "b2").check(0)
    text = script(project, "b2:head")
    project.run_cli("downgrade", "a1").check(0)  # the heads move after the script was written
    before = dump(mysql_url)

    result = run_client(mysql_url, text, *flags)
    refusal = (
        "ERROR 1644 (FM001): FENCED: the heads are a1, not b2, the ones this script was written from (resource "
        "db/migrations). This is NOT a transient error: do not retry; re-read the state (fencemigrate state) and "
        "re-plan. Nothing was applied"
    )
    if flags:
        assert result.code == 0, result  # the client's own --force: its exit status says nothing
        errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR ")]
        assert refusal.split(": ", 1)[1] in errors[0] and "Connection was killed" in errors[1], errors
        assert all("Server has gone away" in line or "Lost connection" in line for line in errors[2:]), errors
    else:
        assert result.code == 1 and error_line(result) == refusal, result
    assert dump(mysql_url) == before and locks_free(mysql_url)

    # Control: plain alembic's script of the same range applies c3 blindly over a1.
    project.allow_tokenless_writes()
    plain = project.run_alembic("upgrade", "b2:head", "--sql").check(0).stdout
    run_client(mysql_url, plain).check(0)
    assert "t3" in mysql_table_names(mysql_url)
    assert versions(mysql_url) == ["a1"]  # its UPDATE ... WHERE version_num = 'b2' matched nothing


def test_script_refuses_while_another_holder_has_the_lease(make_project: MakeProject, mysql_url: str) -> None:
    """A live lease of another holder: busy, nothing written; the lease stays the other holder's."""
    project = at_a1(make_project, mysql_url)
    project.run_cli("lease", "acquire", "--holder", "agent-7", "--ttl", "5m").check(0)
    text = script(project, "a1:head")
    before = dump(mysql_url)

    result = run_client(mysql_url, text)
    assert result.code == 1 and error_line(result) == (
        "ERROR 1644 (45000): lease on db/migrations is busy: another holder's lease is live (fencemigrate lease "
        "status shows it); this is transient, try again later; nothing was applied"
    ), result
    assert dump(mysql_url) == before and lease_row(mysql_url) == ("agent-7", 2) and locks_free(mysql_url)


def test_script_is_granted_after_an_expired_lease(make_project: MakeProject, mysql_url: str) -> None:
    """An expired lease of another holder: the script is granted the next token, logs its EXPIRE,
    and applies."""
    project = at_a1(make_project, mysql_url)
    project.run_cli("lease", "acquire", "--holder", "agent-7", "--ttl", "1s").check(0)
    text = script(project, "a1:head")
    time.sleep(1.2)

    run_client(mysql_url, text).check(0)
    assert versions(mysql_url) == ["b2"] and ledger(mysql_url)["b2"] == (3, SCRIPT_HOLDER, "applied")
    assert [event[:3] for event in events(mysql_url)[-5:]] == [
        ("GRANT", "agent-7", 2),
        ("EXPIRE", "agent-7", 2),
        ("GRANT", SCRIPT_HOLDER, 3),
        ("APPLY", SCRIPT_HOLDER, 3),
        ("RELEASE", SCRIPT_HOLDER, 3),
    ]


def test_script_waits_for_the_named_lock_then_is_busy(make_project: MakeProject, mysql_url: str) -> None:
    """Another session holds the resource's named lock (a migration in flight): the script waits for it
    at most --wait, then refuses busy; nothing written, its lease lock released with its session."""
    project = at_a1(make_project, mysql_url)
    text = project.run_cli("upgrade", "a1:head", "--sql", "--holder", "dba", "--wait", "1s").check(0).stdout
    before = dump(mysql_url)
    holder = subprocess.Popen(
        run_client_args(mysql_url), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert holder.stdin is not None
    holder.stdin.write(f"SELECT GET_LOCK(CONCAT('fencemigrate:', DATABASE(), '/', '{RESOURCE}'), 0);\n")
    holder.stdin.flush()
    deadline = time.monotonic() + 30
    while locks_free(mysql_url):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    started = time.monotonic()
    result = run_client(mysql_url, text)
    waited = time.monotonic() - started
    holder.communicate("", timeout=30)

    assert result.code == 1 and waited >= 1, result
    assert error_line(result) == (
        "ERROR 1644 (45000): busy: another fencemigrate run on db/migrations held its named lock for 1 s (--wait): "
        "a migration in flight (fencemigrate state shows it); this is transient, try again later; nothing was applied"
    )
    assert dump(mysql_url) == before and locks_free(mysql_url)


def test_two_copies_of_a_script_apply_once(make_project: MakeProject, mysql_url: str) -> None:
    """The same script run twice at once: one copy applies b2; the other waits for the named lock, then
    finds the heads moved and refuses. The ledger has b2 once."""
    project = at_a1(make_project, mysql_url)
    text = script(project, "a1:head")
    clients = [
        subprocess.Popen(
            run_client_args(mysql_url), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outcomes: list[tuple[str, str]] = [("", "")] * 2

    def run(index: int) -> None:
        outcomes[index] = clients[index].communicate(text, timeout=120)

    threads = [threading.Thread(target=run, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(client.returncode == 0 for client in clients) == [False, True], outcomes
    (refused,) = [err for client, (_, err) in zip(clients, outcomes, strict=True) if client.returncode != 0]
    assert "FENCED: the heads are b2, not a1, the ones this script was written from" in refused
    assert versions(mysql_url) == ["b2"]
    assert ledger(mysql_url) == {"a1": (1, "agent", "applied"), "b2": (2, SCRIPT_HOLDER, "applied")}
    assert lease_row(mysql_url) == (None, 2) and locks_free(mysql_url)


def test_script_without_fence_schema_refuses(make_project: MakeProject, mysql_url: str) -> None:
    """No fence schema: the script stops at its first check (the fence schema's version table does not
    exist), and the database is left as it was: empty. With --force too."""
    project = make_project(url=mysql_url)
    add_chain(project)
    text = script(project, "head")
    for flags in ((), ("--force",)):
        result = run_client(mysql_url, text, *flags)
        assert "fencemigrate_schema_version' doesn't exist" in result.stderr, result
        assert mysql_table_names(mysql_url) == []


def test_script_refuses_an_older_fence_schema(make_project: MakeProject, mysql_url: str) -> None:
    """A fence schema older than this fencemigrate installs: refused, nothing written."""
    project = at_a1(make_project, mysql_url)
    text = script(project, "a1:head")
    mysql_rows(mysql_url, "UPDATE fencemigrate_schema_version SET version = '0.7'")
    before = dump(mysql_url)

    result = run_client(mysql_url, text)
    assert result.code == 1 and error_line(result) == (
        "ERROR 1644 (45000): fencemigrate: the fence schema is not installed in this database, or is older than this "
        f"script needs ({MYSQL_VERSION}): install it (fencemigrate install) and run the script again; "
        "nothing was applied"
    ), result
    assert dump(mysql_url) == before


def test_script_refuses_a_resource_leased_from_redis(make_project: MakeProject, mysql_url: str, redis_url: str) -> None:
    """A resource whose tokens come from Redis: refused, nothing written."""
    project = make_project(url=mysql_url)
    add_chain(project)
    project.run_cli("upgrade", "a1", "--lease-url", redis_url).check(0)
    assert fence(mysql_url)[1] == "redis"
    text = script(project, "a1:head")
    before = dump(mysql_url)

    result = run_client(mysql_url, text)
    assert result.code == 1 and error_line(result) == (
        "ERROR 1644 (45000): fencemigrate: the tokens of db/migrations come from Redis: a script takes its lease "
        "from the database's lease service only; write it with --token N from a Redis grant; nothing was applied"
    ), result
    assert dump(mysql_url) == before


def three_revisions(make_project: MakeProject, mysql_url: str) -> tuple[Project, str]:
    """:func:`at_a1` and c3 (two DDL statements); the script of a1:head with a 1 s lease."""
    project = at_a1(make_project, mysql_url)
    project.add_revision(
        "c3",
        "b2",
        ["CREATE TABLE t3 (id int)", "CREATE TABLE t4 (id int)"],
        ["DROP TABLE t4", "DROP TABLE t3"],
        slug="t3",
    )
    text = project.run_cli("upgrade", "a1:head", "--sql", "--holder", "dba", "--ttl", "1s").check(0).stdout
    return project, text


def feed(url: str, text: str) -> subprocess.Popen[str]:
    """A mariadb client that has been given ``text`` and waits for more."""
    client = subprocess.Popen(
        run_client_args(url), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert client.stdin is not None
    client.stdin.write(text)
    client.stdin.flush()
    return client


def test_script_superseded_between_revisions_stops_at_its_next_claim(make_project: MakeProject, mysql_url: str) -> None:
    """b2 applied under the script's token; its lease expires and the fence is raised by a grant that
    ignores the named lock (written by hand, as the lease guard allows once the lease has expired).
    c3's claim refuses (FENCED): c3 is not marked, none of its DDL runs, b2 stays applied."""
    project, text = three_revisions(make_project, mysql_url)
    c3_starts = text.index("-- Running upgrade b2 -> c3")
    client = feed(mysql_url, text[:c3_starts])
    deadline = time.monotonic() + 30
    while versions(mysql_url) != ["b2"] or ledger(mysql_url)["b2"][2] != "applied":
        assert time.monotonic() < deadline, "the script did not apply b2"
        time.sleep(0.05)
    time.sleep(1.1)  # the script's lease expires
    for sql in (
        "UPDATE fencemigrate_lease SET holder = 'agent-9', token = 3, ttl_ms = 300000, granted_at = UTC_TIMESTAMP(6), "
        "expires_at = UTC_TIMESTAMP(6) + INTERVAL 5 MINUTE WHERE resource = 'db/migrations'",
        "UPDATE fencemigrate_agent_fence SET token = 3 WHERE resource = 'db/migrations'",
    ):
        mysql_rows(mysql_url, sql)
    out, err = client.communicate(text[c3_starts:], timeout=60)

    assert client.returncode == 1, (out, err)
    assert "FENCED: a newer token has written to db/migrations since this script's token (2) was issued; c3 was " in err
    assert versions(mysql_url) == ["b2"] and "t3" not in mysql_table_names(mysql_url)
    assert ledger(mysql_url) == {"a1": (1, "agent", "applied"), "b2": (2, SCRIPT_HOLDER, "applied")}
    assert lease_row(mysql_url) == ("agent-9", 3) and locks_free(mysql_url)


def test_script_killed_midway_leaves_its_revision_dirty(make_project: MakeProject, mysql_url: str) -> None:
    """The script dies inside c3 (after its mark and first DDL statement): a grant with --preempt ends
    its session once its lease has expired. c3 stays marked 'applying' under the script's token, as
    online pre-check mode leaves a revision that died: ``state`` shows it dirty, and fenced runs are
    refused until it is resolved."""
    project, text = three_revisions(make_project, mysql_url)
    second_ddl = text.index("CREATE TABLE t4 (id int);")
    client = feed(mysql_url, text[:second_ddl])
    deadline = time.monotonic() + 30
    while "t3" not in mysql_table_names(mysql_url):
        assert time.monotonic() < deadline, "the script did not start c3"
        time.sleep(0.05)
    time.sleep(1.1)  # the script's lease expires
    project.run_cli("lease", "acquire", "--holder", "agent-9", "--preempt", "--wait", "10s").check(0)
    out, err = client.communicate(text[second_ddl:], timeout=60)

    assert client.returncode == 1, (out, err)
    assert "t4" not in mysql_table_names(mysql_url) and versions(mysql_url) == ["b2"]
    assert ledger(mysql_url)["c3"] == (2, SCRIPT_HOLDER, "applying")
    state = project.run_cli("state").stdout
    assert "c3" in state and "dirty" in state.lower(), state
    assert project.run_cli("upgrade", "head", "--token", "3").code == 5  # DIRTY, under the new grant's token


def test_stale_token_script_is_fenced(make_project: MakeProject, mysql_url: str) -> None:
    """``--sql --token 1`` written before a script's grant (token 2): FENCED at its claim, nothing
    written (its claim raises nothing: the fence is above 1)."""
    project = at_a1(make_project, mysql_url)
    stale = project.run_cli("upgrade", "a1:head", "--sql", "--token", "1").check(0).stdout
    assert stale.startswith("-- fencemigrate: fenced by token 1 on resource 'db/migrations'")
    run_client(mysql_url, script(project, "a1:head")).check(0)
    project.run_cli("downgrade", "a1").check(0)  # token 3 rolls b2 back
    before = dump(mysql_url)

    result = run_client(mysql_url, stale)
    assert result.code == 1 and error_line(result).startswith(
        "ERROR 1644 (FM001): FENCED: a newer token has written to db/migrations since token 1 was issued"
    ), result
    assert dump(mysql_url) == before and locks_free(mysql_url)


def test_token_script_applies_under_its_token(make_project: MakeProject, mysql_url: str) -> None:
    """``--sql --token N`` on a resource whose tokens are external: applied under N, the fence at N,
    no lease taken; the ledger keeps the file's text as it is (a backslash, a quote, a semicolon)."""
    project = make_project(url=mysql_url)
    files = add_chain(project)
    files["b2"].write_text(files["b2"].read_text() + "# a backslash \\ before n: \\n, a quote ' and ;\n")
    project.run_cli("upgrade", "a1", "--token", "4").check(0)
    text = project.run_cli("upgrade", "a1:head", "--sql", "--token", "5", "--holder", "ci").check(0).stdout
    assert "fencemigrate-lease:" not in text

    run_client(mysql_url, text).check(0)
    assert versions(mysql_url) == ["b2"] and ledger(mysql_url)["b2"] == (5, "ci", "applied")
    assert fence(mysql_url) == (5, "external") and locks_free(mysql_url)
    assert project.run_cli("show", "b2", "--applied").check(0).stdout == files["b2"].read_text()  # byte for byte
    assert mysql_rows(mysql_url, "SELECT count(*) FROM fencemigrate_lease") == [(0,)]


def test_downgrade_and_stamp_scripts_take_their_own_lease(make_project: MakeProject, mysql_url: str) -> None:
    """``downgrade b2:a1 --sql`` and ``stamp a1:b2 --sql`` without a token: each script is granted the
    next token, writes under it (ROLLBACK, STAMP, UNSTAMP) and releases its lease."""
    project = make_project(url=mysql_url)
    add_chain(project)
    project.run_cli("upgrade", "head", "--holder", "agent").check(0)
    run_client(mysql_url, script(project, "b2:a1", command="downgrade")).check(0)
    assert versions(mysql_url) == ["a1"] and "t2" not in mysql_table_names(mysql_url)
    assert ledger(mysql_url) == {"a1": (1, "agent", "applied")}

    run_client(mysql_url, script(project, "a1:b2", command="stamp")).check(0)
    assert versions(mysql_url) == ["b2"]
    assert ledger(mysql_url)["b2"] == (3, SCRIPT_HOLDER, "applied")
    assert [event[:3] for event in events(mysql_url)[-6:]] == [
        ("GRANT", SCRIPT_HOLDER, 2),
        ("ROLLBACK", SCRIPT_HOLDER, 2),
        ("RELEASE", SCRIPT_HOLDER, 2),
        ("GRANT", SCRIPT_HOLDER, 3),
        ("STAMP", SCRIPT_HOLDER, 3),
        ("RELEASE", SCRIPT_HOLDER, 3),
    ]
    assert lease_row(mysql_url) == (None, 3) and locks_free(mysql_url)

    # A stamp going down rolls nothing back: UNSTAMP, as an online run logs it.
    run_client(mysql_url, script(project, "b2:a1", command="stamp")).check(0)
    assert versions(mysql_url) == ["a1"] and "b2" not in ledger(mysql_url)
    assert [event[:3] for event in events(mysql_url)[-3:]] == [
        ("GRANT", SCRIPT_HOLDER, 4),
        ("UNSTAMP", SCRIPT_HOLDER, 4),
        ("RELEASE", SCRIPT_HOLDER, 4),
    ]


def test_downgrade_script_refuses_another_applied_text(make_project: MakeProject, mysql_url: str) -> None:
    """The database applied b2 from another text than the file the downgrade script holds: the script
    stops before rolling anything back (nothing marked)."""
    project = make_project(url=mysql_url)
    files = add_chain(project)
    project.run_cli("upgrade", "head").check(0)
    files["b2"].write_text(files["b2"].read_text() + "\n# edited after it was applied\n")
    text = script(project, "b2:a1", command="downgrade")
    before_rows = ledger(mysql_url)

    result = run_client(mysql_url, text)
    assert result.code == 1 and error_line(result).startswith(
        "ERROR 1644 (45000): fencemigrate: a revision this script rolls back was applied from another text than the "
        "file it rolls it back with: nothing was rolled back."
    ), result
    assert versions(mysql_url) == ["b2"] and "t2" in mysql_table_names(mysql_url)
    assert ledger(mysql_url) == before_rows and locks_free(mysql_url)


def test_the_script_objects_lend_no_privilege(make_project: MakeProject, mysql_url: str) -> None:
    """The fence schema's script_refusal table only raises: an insert never stores a row, and the
    lease guard still refuses a grant forged by plain SQL while the lease is live, or a fence raised
    above the lease's counter (FM006)."""
    project = at_a1(make_project, mysql_url)
    project.run_cli("lease", "acquire", "--holder", "agent-7", "--ttl", "5m").check(0)
    before = dump(mysql_url)
    for sql in (
        "INSERT INTO fencemigrate_script_refusal (message) VALUES ('anything');",
        "UPDATE fencemigrate_lease SET holder = 'intruder', token = 3 WHERE resource = 'db/migrations';",
        "UPDATE fencemigrate_agent_fence SET token = 9 WHERE resource = 'db/migrations';",
        "SET @fencemigrate_token = 9; UPDATE fencemigrate_agent_fence SET token = @fencemigrate_token "
        "WHERE resource = 'db/migrations';",
    ):
        result = run_client(mysql_url, sql)
        assert result.code == 1, (sql, result)
        assert "(45000)" in result.stderr or "(FM006)" in result.stderr, (sql, result)
    assert dump(mysql_url) == before
    assert mysql_rows(mysql_url, "SELECT count(*) FROM fencemigrate_script_refusal") == [(0,)]


def test_precheck_mode_on_postgresql_still_refuses_sql(make_project: MakeProject) -> None:
    """Only MySQL/MariaDB write pre-check scripts: ``--mode precheck --sql`` on PostgreSQL is refused
    (exit 2, nothing written); its transactional script is the one to use there."""
    project = make_project()
    add_chain(project)
    result = project.run_cli("upgrade", "head", "--token", "5", "--mode", "precheck", "--sql")
    result.check(2)
    assert result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        "fencemigrate: usage: offline fencing (--sql) needs transactional mode on PostgreSQL: in pre-check mode the "
        "runner itself checks the fence before each revision, which a script cannot do there. Leave --mode out, or "
        "run the command without --sql. Nothing was written"
    )
