"""A run whose server sessions are ended under it (``KILL CONNECTION``, ``pg_terminate_backend``).

The fault-injection harness ends every session of the database at random times. Whatever the
command was doing, it must end with its documented exit status and fencemigrate's one error line:
no Python traceback, in particular none logged by SQLAlchemy's pool ("Exception during reset or
similar") when it hands back a connection whose session is gone. The projects use Alembic's generic
env.py, whose ``fileConfig(alembic.ini)`` logs SQLAlchemy's warnings and errors to stderr.

Each test stops the command at a known point (waiting for a lock the test holds, or inside a
revision that sleeps on the server), ends its sessions from another session, and lets it finish.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import psycopg
import pytest
import sqlalchemy as sa
from support.fence_rows import without_progress
from support.mysql_server import connect, mysql_rows
from support.pg import PgServer
from support.project import MakeProject, Project, script_command, start_process
from support.zygote import Process

RESOURCE = "db/migrations"


# -- running a command and reading what it said ---------------------------------------------------


def start(project: Project, *args: str) -> Process:
    """``fencemigrate ARGS`` in the background."""
    return start_process([*script_command("fencemigrate"), *args], project.path)


def wait_for(condition: Callable[[], object], process: Process, what: str, timeout: float = 60.0) -> Any:
    """Poll ``condition`` until it is truthy (its value); fail if ``process`` exits first."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert process.poll() is None, (what, process.communicate())
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def finish(process: Process, timeout: float = 60.0) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of ``process`` (killed if it outlives ``timeout``)."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        process.kill()
    return process.returncode, stdout, stderr


def assert_one_error(code: int, stdout: str, stderr: str, status: int, prefix: str, as_json: bool) -> str:
    """Exit ``status``; no traceback anywhere; the error is one line of stderr (or, with ``--json``, the
    only thing on stdout, one object); the rest of stderr is Alembic's INFO log and the run's progress
    (each revision as it starts, the wait for the lease). The error's message."""
    shown = f"[exit {code}]\n--- stdout\n{stdout}--- stderr\n{stderr}"
    assert code == status, shown
    assert "Traceback" not in stdout + stderr, shown
    other = without_progress([line for line in stderr.splitlines() if not line.startswith("INFO  [alembic.")])
    if as_json:
        assert other == [], shown
        payload = json.loads(stdout)
        assert stdout.strip().count("\n") == 0, shown
        message = str(payload["message"])
        assert payload["status"] == prefix, shown
        assert "\n" not in message, shown
        return message
    assert stdout == "", shown
    assert len(other) == 1 and other[0].startswith(f"fencemigrate: {prefix}: "), shown
    return other[0].removeprefix(f"fencemigrate: {prefix}: ")


def two_revisions(project: Project, sleep_sql: str = "") -> None:
    """``r01`` and ``r02``; ``r02``'s upgrade runs ``sleep_sql`` after its DDL when given."""
    project.add_revision("r01", None, "CREATE TABLE t01 (id int)", "DROP TABLE t01")
    project.add_revision(
        "r02", "r01", ["CREATE TABLE t02 (id int)", *([sleep_sql] if sleep_sql else [])], "DROP TABLE t02"
    )


def lease_for_other(project: Project) -> int:
    """Grant the lease to ``other`` for a minute; its token."""
    out = project.run_cli("lease", "acquire", "--holder", "other", "--ttl", "60s", "--json").check(0)
    return int(json.loads(out.stdout)["lease"]["token"])


# -- MariaDB ----------------------------------------------------------------------------------------


def mysql_sessions(url: str, skip: int | None = None) -> list[tuple[int, str]]:
    """``(id, statement running)`` of every session on ``url``'s database but this one and ``skip``."""
    database = url.rsplit("/", 1)[1]
    rows = mysql_rows(
        url,
        "SELECT id, COALESCE(info, '') FROM information_schema.processlist "
        "WHERE db = %s AND id <> CONNECTION_ID() ORDER BY id",
        (database,),
    )
    return [(int(row[0]), str(row[1])) for row in rows if row[0] != skip]


def kill_mysql(url: str, ids: list[int]) -> None:
    """``KILL CONNECTION`` each of ``ids``, in order, from one other session."""
    with connect(url) as conn, conn.cursor() as cursor:
        for connection_id in ids:
            cursor.execute("KILL CONNECTION %s", (connection_id,))


@pytest.fixture
def held_mysql_lock(mysql_url: str) -> Iterator[Callable[[str], int]]:
    """``hold(prefix)``: take the named lock ``<prefix>:<database>/db/migrations`` on a session of the
    test's own, until the test releases it (``RELEASE_ALL_LOCKS`` on that id) or ends; its session id."""
    database = mysql_url.rsplit("/", 1)[1]
    holders: list[Any] = []

    def hold(prefix: str) -> int:
        conn = connect(mysql_url)
        holders.append(conn)
        with conn.cursor() as cursor:
            cursor.execute("SELECT GET_LOCK(%s, 0), CONNECTION_ID()", (f"{prefix}:{database}/{RESOURCE}",))
            taken, connection_id = cursor.fetchone()
        assert taken == 1
        return int(connection_id)

    yield hold
    for conn in holders:
        conn.close()


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_stale_reapply_waiting_for_the_named_lock_loses_its_connection(
    make_project: MakeProject, mysql_url: str, held_mysql_lock: Callable[[str], int], as_json: bool
) -> None:
    """The harness's schedule 306: a ``reapply`` under a given token waits for pre-check mode's named
    lock on env.py's connection (a statement sent straight to the driver); its session is killed:
    exit 1, "Lost connection", and no "Exception during reset" traceback from the pool."""
    project = make_project(url=mysql_url)
    two_revisions(project)
    project.run_cli("upgrade", "head", "--token", "1").check(0)
    holder = held_mysql_lock("fencemigrate")
    runner = start(project, "reapply", "r02", "--token", "1", "--wait", "30s", *(["--json"] if as_json else []))
    waiting = wait_for(
        lambda: [id_ for id_, running in mysql_sessions(mysql_url, holder) if "GET_LOCK('fencemigrate:" in running],
        runner,
        "the run to wait for the named lock",
    )
    kill_mysql(mysql_url, waiting)
    message = assert_one_error(*finish(runner), status=1, prefix="error", as_json=as_json)
    assert "Lost connection to MySQL server during query" in message


@pytest.mark.parametrize(
    "args",
    [
        ("upgrade", "head", "--wait", "30s", "--json"),
        ("lease", "acquire", "--holder", "B", "--wait", "30s", "--json"),
        ("lease", "release", "--holder", "other"),
    ],
    ids=["run-json", "lease-acquire-json", "lease-release"],
)
def test_lease_transaction_loses_its_connections(
    make_project: MakeProject, mysql_url: str, held_mysql_lock: Callable[[str], int], args: tuple[str, ...]
) -> None:
    """A lease transaction waits for the resource's lease lock (a statement sent straight to the
    driver) while env.py's own connection idles; every session of the command is killed, env.py's
    first: exit 1 with one error line, no traceback."""
    project = make_project(url=mysql_url)
    two_revisions(project)
    lease_for_other(project)
    holder = held_mysql_lock("fencemigrate-lease")
    runner = start(project, *args)
    wait_for(
        lambda: any("GET_LOCK('fencemigrate-lease:" in running for _, running in mysql_sessions(mysql_url, holder)),
        runner,
        "the lease transaction to wait for the lease lock",
    )
    kill_mysql(mysql_url, [id_ for id_, _ in mysql_sessions(mysql_url, holder)])  # ascending: env.py's first
    message = assert_one_error(*finish(runner), status=1, prefix="error", as_json="--json" in args)
    assert "Lost connection to MySQL server during query" in message or "MySQL server has gone away" in message


def test_competing_downgrade_refused_as_usage_after_its_connection_was_killed(
    make_project: MakeProject, mysql_url: str, held_mysql_lock: Callable[[str], int]
) -> None:
    """The harness's schedule 66: a runner's ``downgrade r01`` waits for the lease; env.py's idle
    connection is killed meanwhile, and another holder takes the database to base. The runner finds
    ``r01`` no longer below it: exit 2, one usage line, and no traceback for the dead connection it
    never used again."""
    project = make_project(url=mysql_url)
    two_revisions(project)
    token = lease_for_other(project)
    project.run_cli("upgrade", "head", "--token", str(token), "--holder", "other").check(0)
    holder = held_mysql_lock("fencemigrate-lease")
    runner = start(project, "downgrade", "r01", "--wait", "30s")
    lease_wait = wait_for(
        lambda: [
            id_ for id_, running in mysql_sessions(mysql_url, holder) if "GET_LOCK('fencemigrate-lease:" in running
        ],
        runner,
        "the runner to wait for the lease lock",
    )
    kill_mysql(mysql_url, [id_ for id_, _ in mysql_sessions(mysql_url, holder) if id_ not in lease_wait])
    project.run_cli("downgrade", "base", "--token", str(token), "--holder", "other").check(0)
    mysql_rows(mysql_url, f"KILL CONNECTION {holder}")  # frees the lease lock: the runner goes on
    message = assert_one_error(*finish(runner), status=2, prefix="usage", as_json=False)
    assert message == "Destination r01 is not a valid downgrade target from current head(s)"


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_run_killed_inside_a_revision_reports_the_revision(
    make_project: MakeProject, mysql_url: str, as_json: bool
) -> None:
    """A run with its own lease is killed inside a revision (``SELECT SLEEP``), its lease connection
    too: the revision's failure is what it reports (exit 1, one line), not the release that could not
    reach the database."""
    project = make_project(url=mysql_url)
    two_revisions(project, "SELECT SLEEP(60)")
    runner = start(project, "upgrade", "head", *(["--json"] if as_json else []))
    wait_for(
        lambda: any("SLEEP(60)" in running for _, running in mysql_sessions(mysql_url)), runner, "the revision to sleep"
    )
    # The lease connection first, so that it is gone before the run, woken, releases its lease.
    sessions = sorted(mysql_sessions(mysql_url), key=lambda session: "SLEEP(60)" in session[1])
    kill_mysql(mysql_url, [id_ for id_, _ in sessions])
    message = assert_one_error(*finish(runner), status=1, prefix="error", as_json=as_json)
    assert re.match(
        r"revision r02 \(migrations/versions/r02_rev\.py, line \d+, in upgrade\) failed in pre-check "
        r"mode: database error: \(2013, ",
        message,
    ), message


# -- PostgreSQL ---------------------------------------------------------------------------------------


def pg_sessions(server: PgServer, test_connection: psycopg.Connection[Any]) -> list[tuple[int, str, str]]:
    """``(pid, state, last statement)`` of every client session on the test's database but the test's own."""
    with psycopg.connect(host=server.host, port=server.port, user=server.user, dbname="postgres") as conn:
        rows = conn.execute(
            "SELECT pid, COALESCE(state, ''), query FROM pg_stat_activity "
            "WHERE datname = %s AND pid NOT IN (pg_backend_pid(), %s) AND backend_type = 'client backend' "
            "ORDER BY pid",
            (test_connection.info.dbname, test_connection.info.backend_pid),
        ).fetchall()
    return [(int(pid), str(state), str(query)) for pid, state, query in rows]


def terminate_pg(server: PgServer, pids: list[int]) -> None:
    """``pg_terminate_backend`` each of ``pids``, waiting for each to end."""
    with psycopg.connect(
        host=server.host, port=server.port, user=server.user, dbname="postgres", autocommit=True
    ) as conn:
        for pid in pids:
            conn.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_run_waiting_for_the_lease_loses_its_connections_on_postgresql(
    make_project: MakeProject, pg_server: PgServer, postgresql: psycopg.Connection[Any], as_json: bool
) -> None:
    """A run waits for the lease, LISTENing on its lease connection (psycopg's own wait for
    notifications, not SQLAlchemy's); every session of the run is terminated: exit 1 with one error
    line, no traceback for the connection psycopg saw lost."""
    project = make_project()
    two_revisions(project)
    lease_for_other(project)
    runner = start(project, "upgrade", "head", "--wait", "30s", *(["--json"] if as_json else []))
    # env.py's connection, the lease service's (listening since its first pause) and the probe's
    wait_for(lambda: len(pg_sessions(pg_server, postgresql)) >= 3, runner, "the run to wait for a release")
    terminate_pg(pg_server, [pid for pid, _, _ in pg_sessions(pg_server, postgresql)])
    message = assert_one_error(*finish(runner), status=1, prefix="error", as_json=as_json)
    assert message.startswith("database error: "), message


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_run_terminated_inside_a_revision_on_postgresql(
    make_project: MakeProject, pg_server: PgServer, postgresql: psycopg.Connection[Any], as_json: bool
) -> None:
    """A run with its own lease is terminated inside a revision (``pg_sleep``), its lease connection
    too: exit 1 with the revision's error on one line, not the release's."""
    project = make_project()
    two_revisions(project, "SELECT pg_sleep(60)")
    runner = start(project, "upgrade", "head", *(["--json"] if as_json else []))
    wait_for(
        lambda: any(
            state == "active" and "pg_sleep(60)" in query for _, state, query in pg_sessions(pg_server, postgresql)
        ),
        runner,
        "the revision to sleep",
    )
    # The lease connection first, so that it is gone before the run, woken, releases its lease.
    sessions = sorted(pg_sessions(pg_server, postgresql), key=lambda session: session[1] == "active")
    terminate_pg(pg_server, [pid for pid, _, _ in sessions])
    message = assert_one_error(*finish(runner), status=1, prefix="error", as_json=as_json)
    assert re.fullmatch(
        r"revision r02 \(migrations/versions/r02_rev\.py, line \d+, in upgrade\) failed: database error: terminating "
        r"connection due to administrator command; the run's transaction rolled back: nothing was applied",
        message,
    ), message


# -- a grant whose caller loses env.py's connection (the fault harness's #142) ---------------------


def lease_row(url: str) -> tuple[str | None, int, bool]:
    """``(holder, token, live)`` of the built-in lease on ``RESOURCE``."""
    ((holder, token, live),) = mysql_rows(
        url,
        "SELECT holder, token, expires_at > UTC_TIMESTAMP(6) FROM fencemigrate_lease WHERE resource = %s",
        (RESOURCE,),
    )
    return holder, int(token), bool(live)


def lease_events(url: str) -> list[tuple[str, str | None, int | None]]:
    """``(kind, holder, token)`` of every lease event on ``RESOURCE``, in order."""
    rows = mysql_rows(
        url, "SELECT kind, holder, token FROM fencemigrate_fence_event WHERE resource = %s ORDER BY id", (RESOURCE,)
    )
    return [(str(kind), holder, token) for kind, holder, token in rows]


def test_grant_whose_env_py_connection_was_killed_is_released(
    make_project: MakeProject, mysql_url: str, held_mysql_lock: Callable[[str], int]
) -> None:
    """``lease acquire`` waits for the lease lock while env.py's connection idles; that session is
    killed, then the lock is freed and the grant commits on the lease connection. The state read
    after the grant (env.py's connection) fails: the grant is released, not left live for a caller
    told "error"; exit 1, one line naming the released token."""
    project = make_project(url=mysql_url)
    two_revisions(project)
    project.run_cli("install").check(0)
    holder = held_mysql_lock("fencemigrate-lease")
    runner = start(project, "lease", "acquire", "--holder", "agent-A", "--ttl", "60s", "--wait", "30s")
    lease_wait = wait_for(
        lambda: [
            id_ for id_, running in mysql_sessions(mysql_url, holder) if "GET_LOCK('fencemigrate-lease:" in running
        ],
        runner,
        "the grant to wait for the lease lock",
    )
    kill_mysql(mysql_url, [id_ for id_, _ in mysql_sessions(mysql_url, holder) if id_ not in lease_wait])
    kill_mysql(mysql_url, [holder])  # frees the lease lock: the grant commits
    message = assert_one_error(*finish(runner), status=1, prefix="grant released", as_json=False)
    assert re.fullmatch(
        r"lease on db/migrations granted to agent-A with token 1, then released: after the grant, database error: "
        r"\(20(13|06), '(Lost connection to MySQL server during query|MySQL server has gone away)'\)\. "
        r"Nothing may be written with that token; acquire the lease again",
        message,
    ), message
    assert lease_events(mysql_url) == [("GRANT", "agent-A", 1), ("RELEASE", "agent-A", 1)]
    assert lease_row(mysql_url)[0] is None


def test_mcp_grant_whose_env_py_connection_was_killed_is_released(
    make_project: MakeProject, mysql_url: str, held_mysql_lock: Callable[[str], int]
) -> None:
    """The same through ``fencemigrate mcp`` (the harness's #142: agent-A's first ``acquire_lease``
    committed token 1 and answered an error): the answer is that error, saying the grant was
    released; the server holds no token, the lease is free, and the next ``acquire_lease`` is granted."""
    from support.mcp_client import mcp_agent

    project = make_project(url=mysql_url)
    two_revisions(project)
    project.run_cli("install").check(0)
    holder = held_mysql_lock("fencemigrate-lease")

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "60s") as agent:

            async def kill_after_the_wait() -> None:
                deadline = time.monotonic() + 60
                while not (
                    waiting := [
                        id_ for id_, sql in mysql_sessions(mysql_url, holder) if "GET_LOCK('fencemigrate-lease:" in sql
                    ]
                ):
                    assert time.monotonic() < deadline, "timed out waiting for the grant to wait for the lease lock"
                    await anyio.sleep(0.05)
                kill_mysql(mysql_url, [id_ for id_, _ in mysql_sessions(mysql_url, holder) if id_ not in waiting])
                kill_mysql(mysql_url, [holder])

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(kill_after_the_wait)
                undone = await agent.error("acquire_lease", "ERROR", wait="30s")
            assert undone["status"] == "grant released" and undone["token"] == 1, undone
            assert undone["message"].startswith(
                "ERROR: lease on db/migrations granted to agent-A with token 1, then released: after the grant, "
                "database error: (20"
            ), undone
            assert lease_events(mysql_url) == [("GRANT", "agent-A", 1), ("RELEASE", "agent-A", 1)]
            assert lease_row(mysql_url)[0] is None
            assert (await agent.ok("read_state"))["server_token"] is None
            assert (await agent.ok("acquire_lease"))["server_token"] == 2

    anyio.run(scenario)


# -- a session ended between a run's commit and env.py's close (the fault harness's seed 9101 #58) -------

KILL_OWN_SESSION = """
        if os.environ.get("KILL_OWN_SESSION"):  # the server ends the session between the commit and the close
            own = connection.connection.dbapi_connection
            with connectable.connect() as killer:
                killer.exec_driver_sql(f"KILL CONNECTION {own.thread_id()}")
"""


def killed_after_commit(project: Project) -> None:
    """``project``'s env.py (Alembic's generic one) with the session of its connection ended, from
    another session, once its migrations have committed and before it closes the connection: as a
    runner stopped there (SIGSTOP) while the harness's ``KILL CONNECTION`` ran."""
    text = project.env_py.read_text()
    online = "        with context.begin_transaction():\n            context.run_migrations()\n"
    assert text.count(online) == 1
    project.env_py.write_text("import os\n" + text.replace(online, online + KILL_OWN_SESSION))


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_run_whose_session_ends_after_its_commit_succeeds_without_a_traceback(
    make_project: MakeProject, mysql_url: str, as_json: bool
) -> None:
    """The harness's seed 9101 #58: the run committed; its session is ended before env.py closes the
    connection, whose rollback on return to the pool then fails: exit 0, the run's own output, and no
    "Exception during reset" traceback. Control: plain Alembic prints that traceback for the same env.py.
    (On PostgreSQL psycopg sends no ROLLBACK for a connection with no transaction open: nothing fails.)"""
    url = mysql_url
    control = make_project(url=url, name="control")
    two_revisions(control)
    killed_after_commit(control)
    plain = control.run_alembic("upgrade", "head", env={"KILL_OWN_SESSION": "1"}).check(0)
    assert "Exception during reset or similar" in plain.stderr and "Traceback" in plain.stderr, plain
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        for table in ("t02", "t01", "alembic_version"):
            connection.execute(sa.text(f"DROP TABLE {table}"))
    engine.dispose()

    project = make_project(url=url)
    two_revisions(project)
    killed_after_commit(project)
    result = project.run_cli("upgrade", "head", *(["--json"] if as_json else []), env={"KILL_OWN_SESSION": "1"})
    shown = str(result)
    assert result.code == 0 and "Traceback" not in result.output and "Exception during" not in result.output, shown
    if as_json:
        assert json.loads(result.stdout)["heads"] == ["r02"], shown
    else:
        assert result.stdout.splitlines()[-1].strip() == "heads now: r02", shown
    with sa.create_engine(url).connect() as connection:
        assert connection.execute(sa.text("SELECT version_num FROM alembic_version")).all() == [("r02",)]
