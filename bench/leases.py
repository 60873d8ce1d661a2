"""Benchmark: what does a lease cost, and do concurrent runners queue instead of repeating the work?

Measures, in one run on one machine:

1. Lease round trips: acquire+release pairs per second through the lease backend objects
   (``open_backend`` on a SQLAlchemy engine, as a run does once env.py has connected) on
   PostgreSQL, on a SQLite file, and on Redis with the fence in PostgreSQL; for scale, the same
   number of bare committed writes (one UPDATE of a one-row table per transaction) on the same
   kind of connection. Median over rounds, backends and series interleaved.
2. Concurrent runners: wall time of 8 ``fencemigrate upgrade head`` (no ``--token``: each takes
   the lease itself) started at the same moment against one such run, on a chain of revisions,
   every run on a fresh database, on PostgreSQL and SQLite; plain ``alembic upgrade head`` for
   scale. Target: 8 runners take at most 1.5 times one runner (not 8 times). Where the time
   goes is read from the event log (GRANT and RELEASE times). This machine's floor, in the same
   rounds: 8 interpreters started together that only import what every env.py imports first
   (``from alembic import context``) and exit, against the one runner.
3. A summary block (Markdown) to paste into the project README.

Usage (see bench/README.md)::

    bash bench/run --leases                         # throwaway PostgreSQL and Redis, defaults
    .venv/bin/python bench/leases.py --pg-host 127.0.0.1 --pg-port 5432 \\
        --redis-url redis://127.0.0.1:6379/0 [--rounds N] [--pairs N] [--revisions N]

Exit status 0 whatever the verdict (this is a benchmark, not a test); 1 if a run failed or
produced a wrong state (the other backends are still measured and reported), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import IO, Any

import psycopg
import redis
from sqlalchemy import Connection, Engine, create_engine, event, text
from upgrade_overhead import (
    COMMAND_TIMEOUT,
    FENCE_SCHEMA,
    NOISE_LIMIT,
    BenchError,
    Databases,
    Project,
    Run,
    Series,
    Server,
    chain_project,
    check,
    child_env,
    console_script,
    expect,
    machine_line,
    server_from_args,
)

from fencemigrate.dialects.sqlite_transactions import sqlite_transactions
from fencemigrate.leases import LeaseBackend, LeaseRequest, open_backend
from fencemigrate.leases.redis import last_key, lease_key, token_key

REDIS_VAR = "FENCEMIGRATE_TEST_REDIS_URL"

#: Target from the issue: 8 runners started together take at most 1.5 times one runner.
TARGET_RATIO = 1.5
DEFAULT_RUNNERS = 8
DEFAULT_PAIRS = 200
DEFAULT_PAIR_ROUNDS = 7
DEFAULT_RUNNER_ROUNDS = 5
DEFAULT_REVISIONS = 500

POSTGRESQL = "PostgreSQL"
SQLITE = "SQLite"
REDIS = "Redis"
BACKENDS = {"postgresql": POSTGRESQL, "sqlite": SQLITE, "redis": REDIS}
LEASE_BACKENDS = (POSTGRESQL, SQLITE, REDIS)
RUNNER_BACKENDS = (POSTGRESQL, SQLITE)

#: Part 1 uses a resource of its own, so a Redis that is not throwaway keeps its other keys.
RESOURCE = f"bench/leases/{os.getpid()}"
RUN_RESOURCE = "db/migrations"  # what `fencemigrate upgrade` leases and fences by default
HOLDER = "bench"
LEASE_TTL_MS = 60_000

SCALE_TABLE = "bench_scale"
SCALE_UPDATE = f"UPDATE {SCALE_TABLE} SET n = n + 1 WHERE id = 1"

ALEMBIC = "alembic upgrade head"
SINGLE = "fencemigrate upgrade head"


FLOOR_IMPORT = "from alembic import context"  # env.py's first line: any runner of env.py imports this
FLOOR_CODE = f"{FLOOR_IMPORT}; import os; os._exit(0)"  # and exits at once, as fencemigrate does


def together(runners: int) -> str:
    """Name of the series of ``runners`` concurrent runs."""
    return f"{runners} x fencemigrate upgrade head"


def floor(runners: int) -> str:
    """Name of the series of ``runners`` interpreters that only import alembic: the machine's floor."""
    return f"{runners} x {FLOOR_IMPORT}"


# -- reading a database's state with its own driver ---------------------------------------------


class Store:
    """A database's state read with its own driver, not through fencemigrate: for the checks."""

    placeholder = "%s"

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of ``sql``."""
        raise NotImplementedError

    def table(self, name: str) -> str:
        """The fence schema's table ``name`` as SQL."""
        raise NotImplementedError

    def versions(self) -> list[str] | None:
        """Rows of alembic_version, None if the table does not exist."""
        raise NotImplementedError

    def chain_tables(self) -> int:
        """How many ``t_NNNN`` tables the chain created."""
        raise NotImplementedError

    def fence_schema_present(self) -> bool:
        """True if any fence table exists."""
        raise NotImplementedError

    def fence_token(self, resource_name: str) -> int | None:
        """The fence token of ``resource_name``, None without a row."""
        rows = self.rows(
            f"SELECT token FROM {self.table('agent_fence')} WHERE resource = {self.placeholder}", (resource_name,)
        )
        return int(rows[0][0]) if rows else None

    def lease_row(self, resource_name: str) -> tuple[str | None, int] | None:
        """(holder, token) of the built-in lease service's row, None without a row."""
        rows = self.rows(
            f"SELECT holder, token FROM {self.table('lease')} WHERE resource = {self.placeholder}", (resource_name,)
        )
        return (rows[0][0], int(rows[0][1])) if rows else None

    def event_counts(self, resource_name: str) -> Counter[str]:
        """How many events of each kind the log has for ``resource_name``."""
        rows = self.rows(
            f"SELECT kind, count(*) FROM {self.table('fence_event')} WHERE resource = {self.placeholder} GROUP BY kind",
            (resource_name,),
        )
        return Counter({str(kind): int(count) for kind, count in rows})

    def lease_events(self, resource_name: str) -> list[tuple[str, str, int, float]]:
        """(kind, holder, token, time since the epoch) of the GRANT and RELEASE events, in order."""
        rows = self.rows(
            f"SELECT kind, holder, token, at FROM {self.table('fence_event')} "
            f"WHERE resource = {self.placeholder} AND kind IN ('GRANT', 'RELEASE') ORDER BY id",
            (resource_name,),
        )
        return [(str(kind), str(holder), int(token), _epoch(at)) for kind, holder, token, at in rows]

    def ledger(self) -> list[tuple[str, int]]:
        """(revision, applied_token) of every ledger row."""
        return [
            (str(rev), int(token))
            for rev, token in self.rows(f"SELECT revision, applied_token FROM {self.table('applied_revision')}")
        ]

    def scale_count(self) -> int:
        """The counter the bare writes increment."""
        return int(self.rows(f"SELECT n FROM {SCALE_TABLE} WHERE id = 1")[0][0])


def _epoch(value: Any) -> float:
    """Seconds since the epoch of a timestamptz (PostgreSQL) or ISO-8601 text (SQLite)."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    assert isinstance(moment, datetime)
    return moment.timestamp()


class PostgresStore(Store):
    """One database of the PostgreSQL server."""

    def __init__(self, server: Server, db: str) -> None:
        self.server = server
        self.db = db

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self.server.query(self.db, sql, params or None)  # no params: '%' is not a placeholder

    def table(self, name: str) -> str:
        return f"{FENCE_SCHEMA}.{name}"

    def versions(self) -> list[str] | None:
        if not self.rows("SELECT to_regclass('public.alembic_version') IS NOT NULL")[0][0]:
            return None
        return sorted(str(row[0]) for row in self.rows("SELECT version_num FROM alembic_version"))

    def chain_tables(self) -> int:
        return int(
            self.rows("SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 't\\_%'")[0][0]
        )

    def fence_schema_present(self) -> bool:
        return bool(self.rows("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (FENCE_SCHEMA,))[0][0])


class SqliteStore(Store):
    """A SQLite file (the fence tables carry the schema's name as a prefix)."""

    placeholder = "?"

    def __init__(self, path: Path) -> None:
        self.path = path

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        connection = sqlite3.connect(self.path)
        try:
            return connection.execute(sql, tuple(params)).fetchall()
        finally:
            connection.close()

    def table(self, name: str) -> str:
        return f"{FENCE_SCHEMA}_{name}"

    def _tables_like(self, pattern: str) -> int:
        return int(
            self.rows(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE ? ESCAPE '\\'", (pattern,)
            )[0][0]
        )

    def versions(self) -> list[str] | None:
        if not self._tables_like("alembic\\_version"):
            return None
        return sorted(str(row[0]) for row in self.rows("SELECT version_num FROM alembic_version"))

    def chain_tables(self) -> int:
        return self._tables_like("t\\_%")

    def fence_schema_present(self) -> bool:
        return bool(self._tables_like(f"{FENCE_SCHEMA}\\_%"))


# -- part 1: lease round trips ---------------------------------------------------------------------


@dataclass
class LeaseLoop:
    """One backend of part 1: its lease service on a fresh database, and a bare write for scale."""

    backend: str
    engine: Engine
    leases: LeaseBackend
    writer: Connection  # the bare writes' connection, from the same engine as the lease service's
    store: Store  # where the fence (and the built-in service's lease row) is read back
    lease_is_free: Callable[[], bool]
    last_token: int = 0
    pairs: int = 0
    writes: int = 0


@dataclass
class RoundTrips:
    """Times of one backend's rounds: ``count`` lease pairs, ``count`` bare writes."""

    backend: str
    count: int
    pair_seconds: list[float] = field(default_factory=list)
    write_seconds: list[float] = field(default_factory=list)
    redis_seconds: list[float] = field(default_factory=list)  # bare Redis INCRs (Redis backend only)
    statements: int = 0  # SQL statements of one pair (BEGIN not counted)
    commits: int = 0  # transactions committed by one pair
    error: str | None = None

    def per_second(self, seconds: list[float]) -> float:
        """Operations per second at the median round."""
        return self.count / statistics.median(seconds)

    def pair_cost(self) -> float:
        """Median time of a lease pair / median time of a bare write."""
        return statistics.median(self.pair_seconds) / statistics.median(self.write_seconds)


def open_loop(
    backend: str, server: Server, dbs: Databases, workdir: Path, redis_url: str | None, stack: ExitStack
) -> LeaseLoop:
    """A fresh database (or file) with the fence schema, the lease service and a one-row table."""
    if backend == SQLITE:
        path = workdir / f"leases-{os.getpid()}.db"
        url = f"sqlite:///{path}"
        store: Store = SqliteStore(path)
    else:
        db = dbs.create()
        url = server.url(db)
        store = PostgresStore(server, db)
    engine = create_engine(url)
    stack.callback(engine.dispose)
    with engine.begin() as connection:
        connection.execute(text(f"CREATE TABLE {SCALE_TABLE} (id int PRIMARY KEY, n bigint NOT NULL)"))
        connection.execute(text(f"INSERT INTO {SCALE_TABLE} VALUES (1, 0)"))
    leases = open_backend(engine, FENCE_SCHEMA, redis_url if backend == REDIS else None)
    stack.callback(leases.close)
    writer = stack.enter_context(engine.connect())
    if backend == REDIS:
        assert redis_url is not None
        client = stack.enter_context(redis.Redis.from_url(redis_url))
        stack.callback(client.delete, lease_key(RESOURCE), last_key(RESOURCE), token_key(RESOURCE))

        def redis_free() -> bool:
            return client.get(lease_key(RESOURCE)) is None and client.hget(last_key(RESOURCE), "state") == b"released"

        return LeaseLoop(backend, engine, leases, writer, store, redis_free)

    def row_free() -> bool:
        row = store.lease_row(RESOURCE)
        return row is not None and row[0] is None

    return LeaseLoop(backend, engine, leases, writer, store, row_free)


def lease_pairs(loop: LeaseLoop, count: int) -> float:
    """``count`` acquire+release pairs, timed; then checks the tokens, the fence and the lease."""
    request = LeaseRequest(resource=RESOURCE, holder=HOLDER, ttl_ms=LEASE_TTL_MS)
    tokens: list[int] = []
    held_after_release = 0
    start = time.perf_counter()
    for _ in range(count):
        grant = loop.leases.acquire(request)
        tokens.append(grant.token)
        if loop.leases.release(RESOURCE, HOLDER, grant.token).holder is not None:
            held_after_release += 1
    seconds = time.perf_counter() - start
    loop.pairs += count
    previous = [loop.last_token] + tokens[:-1]
    if any(token <= before for token, before in zip(tokens, previous, strict=False)):
        raise BenchError(f"{loop.backend}: tokens not strictly increasing after {loop.last_token}: {tokens}")
    loop.last_token = tokens[-1]
    if held_after_release:
        raise BenchError(f"{loop.backend}: {held_after_release} releases still reported a holder")
    fence = loop.store.fence_token(RESOURCE)
    if fence != loop.last_token:
        raise BenchError(f"{loop.backend}: fence token {fence} after the last grant {loop.last_token}")
    if not loop.lease_is_free():
        raise BenchError(f"{loop.backend}: the lease is not free after the last release")
    events = loop.store.event_counts(RESOURCE)
    if (events["GRANT"], events["RELEASE"]) != (loop.pairs, loop.pairs):
        raise BenchError(
            f"{loop.backend}: {events['GRANT']} GRANT and {events['RELEASE']} RELEASE events after {loop.pairs} pairs"
        )
    return seconds


def count_statements(loop: LeaseLoop) -> tuple[int, int]:
    """Untimed pairs (checked like the others): a first one, which may set things up, then one
    counting its SQL statements and commits."""
    lease_pairs(loop, 1)
    counts: Counter[str] = Counter()

    def on_execute(connection: Connection, cursor: Any, statement: str, *_: Any) -> None:
        if not statement.lstrip().upper().startswith("BEGIN"):
            counts["statements"] += 1

    def on_commit(connection: Connection) -> None:
        counts["commits"] += 1

    event.listen(loop.engine, "before_cursor_execute", on_execute)
    event.listen(loop.engine, "commit", on_commit)
    try:
        lease_pairs(loop, 1)
    finally:
        event.remove(loop.engine, "commit", on_commit)
        event.remove(loop.engine, "before_cursor_execute", on_execute)
    return counts["statements"], counts["commits"]


def bare_writes(loop: LeaseLoop, count: int) -> float:
    """``count`` transactions of one UPDATE each on the lease service's kind of connection, timed."""
    update = text(SCALE_UPDATE)
    start = time.perf_counter()
    for _ in range(count):
        with loop.writer.begin():
            loop.writer.execute(update)
    seconds = time.perf_counter() - start
    loop.writes += count
    found = loop.store.scale_count()
    if found != loop.writes:
        raise BenchError(f"{loop.backend}: the bare writes' counter is {found}, not {loop.writes}")
    return seconds


def redis_increments(redis_url: str, count: int) -> float:
    """``count`` INCR round trips to Redis, timed (the Redis backend's scale)."""
    key = f"{RESOURCE}:bench-incr"
    with redis.Redis.from_url(redis_url) as client:
        client.delete(key)
        start = time.perf_counter()
        for _ in range(count):
            client.incr(key)
        seconds = time.perf_counter() - start
        found = int(client.get(key) or 0)
        client.delete(key)
    if found != count:
        raise BenchError(f"Redis: INCR counter at {found} after {count} increments")
    return seconds


def describe_error(error: BaseException) -> str:
    """One line for a failed backend (with fencemigrate's error line when a command failed)."""
    lines = str(error).strip().splitlines()
    line = f"{type(error).__name__}: {lines[0] if lines else ''}"
    reported = [text for text in lines if text.startswith("fencemigrate: ")]
    return f"{line} ({reported[-1]})" if reported else line


def measure_round_trips(
    server: Server,
    dbs: Databases,
    workdir: Path,
    backends: Sequence[str],
    redis_url: str | None,
    count: int,
    rounds: int,
) -> list[RoundTrips]:
    """``rounds`` rounds of each backend's lease pairs and bare writes, interleaved and rotating.

    A backend that fails (to open, or in a round) is reported with its error and left out of
    the later rounds; the others go on.
    """
    results = {name: RoundTrips(name, count) for name in backends}
    loops: dict[str, LeaseLoop] = {}
    with ExitStack() as stack:
        # As while a fenced run's env.py runs: SQLite connections get transactional DDL.
        stack.enter_context(sqlite_transactions())
        for name in backends:
            try:
                loops[name] = open_loop(name, server, dbs, workdir, redis_url, stack)
                results[name].statements, results[name].commits = count_statements(loops[name])
            except Exception as error:  # noqa: BLE001 - any failure marks this backend as failed
                results[name].error = describe_error(error)
                print(f"  [{name}] FAILED to open the lease service: {results[name].error}", flush=True)
        for number in range(rounds):
            live = [name for name in backends if name in loops and results[name].error is None]
            shift = number % max(len(live), 1)
            for name in live[shift:] + live[:shift]:
                result, loop = results[name], loops[name]
                try:
                    steps: list[tuple[str, Callable[[], float], list[float]]] = [
                        ("lease pairs", partial(lease_pairs, loop, count), result.pair_seconds),
                        ("bare writes", partial(bare_writes, loop, count), result.write_seconds),
                    ]
                    if name == REDIS:
                        assert redis_url is not None
                        steps.append(("Redis INCRs", lambda: redis_increments(redis_url, count), result.redis_seconds))
                    for label, measure, into in steps[number % 2 :] + steps[: number % 2]:
                        seconds = measure()
                        into.append(seconds)
                        print(
                            f"  [{name}] round {number + 1}/{rounds}  {count} {label:<12} {seconds:6.3f} s "
                            f"({count / seconds:7.0f}/s)  ok",
                            flush=True,
                        )
                except Exception as error:  # noqa: BLE001 - any failure marks this backend as failed
                    result.error = describe_error(error)
                    print(f"  [{name}] FAILED in round {number + 1}: {result.error}", flush=True)
    return [results[name] for name in backends]


# -- part 2: concurrent runners --------------------------------------------------------------------


@dataclass(frozen=True)
class Timeline:
    """Where a run's wall time went, from the event log's GRANT and RELEASE times (seconds)."""

    to_first_grant: float  # start to the first grant: interpreter start, imports, env.py, connect
    first_hold: float  # the first holder's grant to its release: the migration itself
    handoffs: float  # the other runners: from a release to the next grant, summed
    other_holds: float  # the other runners that took the lease: grant to release (nothing to do), summed
    after_last_release: float  # the last release to the last exit

    @property
    def parts(self) -> tuple[float, ...]:
        """The five parts, in order."""
        return (self.to_first_grant, self.first_hold, self.handoffs, self.other_holds, self.after_last_release)


TIMELINE_LABELS = (
    "start to first grant",
    "first holder's migration",
    "handoffs (release to next grant)",
    "other holders (nothing to do)",
    "last release to last exit",
)


def timeline(events: Sequence[tuple[str, str, int, float]], started: float, ended: float) -> Timeline:
    """The parts of a run (or of concurrent runs) from its alternating GRANT/RELEASE events."""
    grants = [at for kind, _, _, at in events if kind == "GRANT"]
    releases = [at for kind, _, _, at in events if kind == "RELEASE"]
    return Timeline(
        to_first_grant=grants[0] - started,
        first_hold=releases[0] - grants[0],
        handoffs=sum(grant - release for grant, release in zip(grants[1:], releases, strict=False)),
        other_holds=sum(release - grant for grant, release in zip(grants[1:], releases[1:], strict=False)),
        after_last_release=ended - releases[-1],
    )


@dataclass
class Together:
    """``count`` runs of one command started at the same moment."""

    runs: list[Run]
    seconds: float  # until the last one exited
    cpu: float  # user + sys of all of them
    started: float  # time.time() when the first was started
    ended: float  # time.time() when the last had exited


def run_together(argv: Sequence[str], cwd: Path, env: Mapping[str, str], count: int) -> Together:
    """Start ``count`` copies of ``argv`` back to back and wait for all of them."""
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with ExitStack() as stack:
        outputs: list[tuple[IO[str], IO[str]]] = [
            (stack.enter_context(tempfile.TemporaryFile("w+")), stack.enter_context(tempfile.TemporaryFile("w+")))
            for _ in range(count)
        ]
        started = time.time()
        start = time.perf_counter()
        processes: list[subprocess.Popen[str]] = []
        try:
            for out, err in outputs:
                processes.append(
                    subprocess.Popen(
                        list(argv),
                        cwd=cwd,
                        env=dict(env),
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=err,
                        text=True,
                    )
                )
            for process in processes:
                process.wait(timeout=max(COMMAND_TIMEOUT - (time.perf_counter() - start), 0.1))
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        seconds = time.perf_counter() - start
        ended = time.time()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        runs = []
        for process, (out, err) in zip(processes, outputs, strict=False):
            out.seek(0)
            err.seek(0)
            # Each Run carries the group's wall time; CPU time is only known for the group.
            runs.append(Run(tuple(argv), seconds, 0.0, process.returncode, out.read(), err.read()))
    cpu = (usage.ru_utime - usage_before.ru_utime) + (usage.ru_stime - usage_before.ru_stime)
    return Together(runs, seconds, cpu, started, ended)


@dataclass
class Fresh:
    """A fresh database of one backend: its URL and its state, read with its own driver."""

    url: str
    store: Store


@contextmanager
def fresh_database(backend: str, server: Server, dbs: Databases, workdir: Path) -> Iterator[Fresh]:
    """A fresh PostgreSQL database or SQLite file for one run, dropped afterwards (not timed)."""
    if backend == SQLITE:
        path = workdir / f"runners-{time.monotonic_ns()}.db"
        try:
            yield Fresh(f"sqlite:///{path}", SqliteStore(path))
        finally:
            for leftover in path.parent.glob(path.name + "*"):
                leftover.unlink()
        return
    with dbs.fresh() as db:
        yield Fresh(server.url(db), PostgresStore(server, db))


def verify_migrated(store: Store, project: Project, result: Run) -> None:
    """The whole chain is applied: version table at the head, every table there."""
    check(store.versions() == [project.head], f"alembic_version is not [{project.head}]", result)
    tables = store.chain_tables()
    check(tables == len(project.revisions), f"{tables} chain tables instead of {len(project.revisions)}", result)


def verify_leased(store: Store, project: Project, runs: Sequence[Run]) -> list[tuple[str, str, int, float]]:
    """Every revision applied exactly once, by the first holder; every grant (tokens 1, 2, ...)
    released by its holder before the next; the runners that waited while the work was done
    stopped waiting without a lease; the lease is free and the fence at the last token.
    Returns the GRANT/RELEASE events."""
    first = runs[0]
    for result in runs:
        expect(result, 0)
    verify_migrated(store, project, first)
    count = len(project.revisions)
    ledger = store.ledger()
    check(
        sorted(rev for rev, _ in ledger) == sorted(project.revisions),
        f"{len(ledger)} ledger rows, not one per revision",
        first,
    )
    check({token for _, token in ledger} == {1}, f"ledger tokens {sorted({t for _, t in ledger})}, not all 1", first)
    counts = store.event_counts(RUN_RESOURCE)
    check(counts["APPLY"] == count, f"{counts['APPLY']} APPLY events for {count} revisions", first)
    events = store.lease_events(RUN_RESOURCE)
    grants = len(events) // 2
    check(
        1 <= grants <= len(runs) and [kind for kind, *_ in events] == ["GRANT", "RELEASE"] * grants,
        f"lease events {[k for k, *_ in events]}",
        first,
    )
    for number, (grant, release) in enumerate(zip(events[::2], events[1::2], strict=False), start=1):
        check(
            grant[2] == release[2] == number and grant[1] == release[1],
            f"grant {number}: {grant[:3]} released as {release[:3]}",
            first,
        )
    check(store.fence_token(RUN_RESOURCE) == grants, f"fence token is not {grants}", first)
    lease = store.lease_row(RUN_RESOURCE)
    check(lease is not None and lease[0] is None, f"the lease is not free: {lease}", first)
    applied = [result for result in runs if f"applied {project.head} under token 1" in result.stdout]
    idle = [result for result in runs if "nothing to do" in result.stdout]
    unleased = [result for result in idle if "no lease taken" in result.stdout]
    check(
        len(applied) == 1 and len(idle) == len(runs) - 1,
        f"{len(applied)} runners applied the chain, {len(idle)} had nothing to do",
        first,
    )
    check(
        len(unleased) == len(runs) - grants,
        f"{len(unleased)} runners took no lease, but {grants} grants for {len(runs)} runners",
        first,
    )
    return events


@dataclass
class RunnerResult:
    """Part 2 for one backend: the three series and the timelines of the fencemigrate ones."""

    backend: str
    runners: int
    series: dict[str, Series]
    timelines: dict[str, list[Timeline]]
    error: str | None = None

    @property
    def concurrent(self) -> str:
        """Name of the concurrent series."""
        return together(self.runners)

    @property
    def floor(self) -> str:
        """Name of the floor series."""
        return floor(self.runners)

    def ratio(self) -> float:
        """median(concurrent) / median(single): the headline number."""
        return self.series[self.concurrent].median / self.series[SINGLE].median

    def floor_ratio(self) -> float:
        """median(floor) / median(single): what no alembic-based runner can beat on this machine."""
        return self.series[self.floor].median / self.series[SINGLE].median

    def verdict(self) -> str:
        """PASS/FAIL against the target ratio; a FAIL says so when the floor is above the target too."""
        if self.ratio() <= TARGET_RATIO:
            return "PASS"
        return "FAIL (floor above target)" if self.floor_ratio() > TARGET_RATIO else "FAIL"

    def paired_ratio(self) -> float:
        """Median over rounds of concurrent / single within the same round."""
        pairs = zip(self.series[self.concurrent].seconds, self.series[SINGLE].seconds, strict=False)
        return statistics.median(mine / base for mine, base in pairs)

    def spread(self) -> float:
        """(max - min) / median of the single runner's wall times: how noisy the machine was."""
        seconds = self.series[SINGLE].seconds
        return (max(seconds) - min(seconds)) / statistics.median(seconds)

    def median_timeline(self, name: str) -> tuple[float, ...]:
        """Median of each timeline part of series ``name``."""
        return tuple(statistics.median(parts) for parts in zip(*(t.parts for t in self.timelines[name]), strict=False))


def runner_round(
    backend: str,
    name: str,
    server: Server,
    dbs: Databases,
    workdir: Path,
    project: Project,
    runners: int,
    preinstall: bool,
) -> tuple[float, float, Timeline | None]:
    """One run of series ``name`` on a fresh database, checked; (wall, cpu, timeline)."""
    if name == floor(runners):
        group = run_together([sys.executable, "-c", FLOOR_CODE], project.path, project.env, runners)
        for result in group.runs:
            expect(result, 0)
        return group.seconds, group.cpu, None
    with fresh_database(backend, server, dbs, workdir) as fresh:
        project.set_url(fresh.url)
        if name == ALEMBIC:
            result = expect(project.alembic("upgrade", "head"), 0)
            verify_migrated(fresh.store, project, result)
            check(not fresh.store.fence_schema_present(), "plain alembic created the fence schema", result)
            return result.seconds, result.cpu, None
        if preinstall:
            expect(project.fencemigrate("install"), 0)
        if name == SINGLE:
            started = time.time()
            result = project.fencemigrate("upgrade", "head")
            ended = time.time()
            events = verify_leased(fresh.store, project, [result])
            return result.seconds, result.cpu, timeline(events, started, ended)
        group = run_together(console_script("fencemigrate") + ["upgrade", "head"], project.path, project.env, runners)
        events = verify_leased(fresh.store, project, group.runs)
        return group.seconds, group.cpu, timeline(events, group.started, group.ended)


def measure_runners(
    server: Server,
    dbs: Databases,
    workdir: Path,
    project: Project,
    backends: Sequence[str],
    runners: int,
    rounds: int,
    preinstall: bool,
) -> list[RunnerResult]:
    """One untimed warm-up of every series, then ``rounds`` rounds, backends and series rotating.

    A backend whose run fails is reported with its error and left out of the later rounds.
    """
    names = (ALEMBIC, SINGLE, together(runners), floor(runners))
    results = {
        backend: RunnerResult(backend, runners, {name: Series(name) for name in names}, {name: [] for name in names})
        for backend in backends
    }
    for number in range(-1, rounds):
        live = [backend for backend in backends if results[backend].error is None]
        shift = max(number, 0) % max(len(live), 1)
        for backend in live[shift:] + live[:shift]:
            result = results[backend]
            turn = max(number, 0) % len(names)
            try:
                for name in names[turn:] + names[:turn]:
                    seconds, cpu, parts = runner_round(
                        backend, name, server, dbs, workdir, project, runners, preinstall
                    )
                    if number < 0:
                        continue
                    result.series[name].seconds.append(seconds)
                    result.series[name].cpu.append(cpu)
                    if parts is not None:
                        result.timelines[name].append(parts)
                    print(
                        f"  [{backend}] round {number + 1}/{rounds}  {name:<32} {seconds:6.3f} s "
                        f"(cpu {cpu:6.3f} s)  ok",
                        flush=True,
                    )
                if number < 0:
                    print(f"  [{backend}] warm-up done", flush=True)
            except (BenchError, subprocess.TimeoutExpired, psycopg.Error, sqlite3.Error) as error:
                result.error = describe_error(error)
                print(
                    f"  [{backend}] FAILED in {'the warm-up' if number < 0 else f'round {number + 1}'}: "
                    f"{result.error}\n{error}",
                    flush=True,
                )
    return [results[backend] for backend in backends]


# -- report -------------------------------------------------------------------------------------------


def print_round_trips(results: Sequence[RoundTrips]) -> None:
    """Pairs per second against bare writes per second, per backend."""
    print()
    print(
        f"{'backend':<12} {'pairs/s':>8} {'ms/pair':>8} {'min':>7} {'max':>7} {'writes/s':>9} {'ms/write':>9} "
        f"{'pair/write':>10} {'SQL/pair':>9}"
    )
    for result in results:
        if result.error is not None or not result.pair_seconds:
            print(f"{result.backend:<12} FAILED: {result.error}")
            continue
        pair_ms = [s * 1000 / result.count for s in result.pair_seconds]
        print(
            f"{result.backend:<12} {result.per_second(result.pair_seconds):8.0f} {statistics.median(pair_ms):8.2f} "
            f"{min(pair_ms):7.2f} {max(pair_ms):7.2f} {result.per_second(result.write_seconds):9.0f} "
            f"{statistics.median(result.write_seconds) * 1000 / result.count:9.2f} {result.pair_cost():10.1f} "
            f"{result.statements:>4} ({result.commits})"
        )
        if result.redis_seconds:
            print(
                f"{'':<12} (a bare Redis INCR: {result.per_second(result.redis_seconds):.0f}/s, "
                f"{statistics.median(result.redis_seconds) * 1000 / result.count:.3f} ms)"
            )
    print(
        "  pairs/s: acquire+release through the backend object at the median round (min/max: ms per pair in the "
        "fastest\n  and slowest round); writes/s: one UPDATE of a one-row table per transaction on the same engine "
        "(for Redis:\n  the PostgreSQL database holding the fence, which every grant and release also commits to); "
        "SQL/pair: SQL\n  statements (commits) of one acquire+release, BEGIN not counted (a bare write: 1 (1))"
    )


def print_runners(results: Sequence[RunnerResult]) -> None:
    """Wall times, ratio and verdict, and where the time went, per backend."""
    print()
    print(f"{'backend':<12} {'command':<32} {'median':>8} {'min':>8} {'max':>8} {'cpu':>8}")
    for result in results:
        if result.error is not None:
            print(f"{result.backend:<12} FAILED: {result.error}")
            continue
        for name, series in result.series.items():
            print(
                f"{result.backend:<12} {name:<32} {series.median:7.3f}s {min(series.seconds):7.3f}s "
                f"{max(series.seconds):7.3f}s {series.cpu_median:7.3f}s"
            )
    print(
        "  cpu: median user+sys CPU of the command (all runners together for the concurrent series; not the server's)"
    )
    for result in results:
        if result.error is not None:
            continue
        print()
        print(f"  [{result.backend}] where the time went (medians, seconds; from the event log's GRANT/RELEASE times)")
        print(f"  {'':<36} {SINGLE:>28} {result.concurrent:>28}")
        single, concurrent = result.median_timeline(SINGLE), result.median_timeline(result.concurrent)
        for label, mine, theirs in zip(TIMELINE_LABELS, single, concurrent, strict=False):
            print(f"  {label:<36} {mine:28.3f} {theirs:28.3f}")
    print()
    for result in results:
        if result.error is not None:
            print(f"FAILED  {result.backend}: {result.error}")
            continue
        ratio = result.ratio()
        print(
            f"{result.verdict()}  {result.backend}: {result.concurrent} / {SINGLE} = {ratio:.2f} "
            f"(paired {result.paired_ratio():.2f}; target <= {TARGET_RATIO:.1f}, {result.runners:.0f} if serialised)"
        )
        print(
            f"      floor: {result.floor} / {SINGLE} = {result.floor_ratio():.2f} "
            f"({result.runners} interpreters that only import alembic, on {os.cpu_count()} CPUs)"
        )
        if result.spread() > NOISE_LIMIT:
            print(f"WARNING  {noise_warning(result)}")


def noise_warning(result: RunnerResult) -> str:
    """Why the wall-time ratio of ``result`` should not be trusted."""
    seconds = result.series[SINGLE].seconds
    return (
        f"{result.backend}: one runner's wall time ranged from {min(seconds):.2f} to {max(seconds):.2f} s "
        f"({result.spread():.0%} of its median): the machine was busy, so the ratio is noisy (the paired ratio "
        "is more robust). Rerun on an idle machine (or with more --runner-rounds)."
    )


def summary(
    machine: str, trips: Sequence[RoundTrips], runners: Sequence[RunnerResult], args: argparse.Namespace
) -> str:
    """The copy-pasteable Markdown block for the README (the parts that ran)."""
    lines = ["### Leases: round trips and concurrent runners (bench/leases.py)", "", f"Machine: {machine}."]
    if trips:
        lines += ["", *round_trip_summary(trips, args)]
    if runners:
        lines += ["", *runner_summary(runners, args)]
    return "\n".join(lines)


def round_trip_summary(trips: Sequence[RoundTrips], args: argparse.Namespace) -> list[str]:
    """Part 1 in Markdown."""
    lines = [
        f"**Lease round trips.** {args.pairs} acquire+release pairs per round through the lease backend "
        "object (`open_backend` on a SQLAlchemy engine, as a run does once env.py has connected), median of "
        f"{args.rounds} interleaved rounds; for scale, as many bare transactions of one `UPDATE` of a "
        "one-row table on the same engine (for Redis: the PostgreSQL database that holds the fence). "
        "Checked every round: tokens strictly increasing, the fence at the last token, the lease free, "
        "one GRANT and one RELEASE event per pair. SQL statements: of one pair, on the database, BEGIN not "
        "counted (a bare write: 1 statement, 1 commit).",
        "",
        "| lease backend | acquire+release pairs/s | ms per pair | bare writes/s | ms per write | pair / write "
        "| SQL statements (commits) per pair |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for result in trips:
        label = "Redis (fence in PostgreSQL)" if result.backend == REDIS else result.backend
        if result.error is not None or not result.pair_seconds:
            lines.append(f"| {label} | failed: {result.error} | | | | | |")
            continue
        redis_note = ""
        if result.redis_seconds:
            redis_note = f" (a bare Redis `INCR`: {result.per_second(result.redis_seconds):.0f}/s)"
        lines.append(
            f"| {label} | {result.per_second(result.pair_seconds):.0f} "
            f"| {statistics.median(result.pair_seconds) * 1000 / result.count:.2f} "
            f"| {result.per_second(result.write_seconds):.0f}{redis_note} "
            f"| {statistics.median(result.write_seconds) * 1000 / result.count:.2f} | {result.pair_cost():.1f} "
            f"| {result.statements} ({result.commits}) |"
        )
    return lines


def runner_summary(runners: Sequence[RunnerResult], args: argparse.Namespace) -> list[str]:
    """Part 2 in Markdown."""
    install = (
        "the fence schema installed beforehand (`fencemigrate install`, untimed)"
        if args.preinstall
        else "the runners install the fence schema themselves (a first deployment)"
    )
    lines = [
        f"**Concurrent runners.** A chain of {args.revisions} revisions (one `CREATE TABLE` each, the generic "
        f"env.py: one transaction), every run on a fresh database, {install}. Whole-command wall time "
        f"(interpreter start included; for the {args.runners} runners started together, until the last one "
        f"exits), median of {args.runner_rounds} interleaved rounds. Each runner takes the lease itself (no "
        "`--token`); checked: all exit 0, every revision applied once (ledger, APPLY events), each grant "
        "released before the next, the runners that queued while the work was done stopped waiting without "
        "a lease, the lease free at the end.",
        "",
        f"| database | `alembic upgrade head` | `fencemigrate upgrade head`, one runner | {args.runners} runners "
        f"together | ratio (paired) | floor: {args.runners} × `{FLOOR_IMPORT}` (ratio) "
        f"| target ratio <= {TARGET_RATIO:.1f} |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for result in runners:
        if result.error is not None:
            lines.append(f"| {result.backend} | failed: {result.error} | | | | | |")
            continue
        s = result.series
        lines.append(
            f"| {result.backend} | {s[ALEMBIC].median:.2f} s | {s[SINGLE].median:.2f} s "
            f"| {s[result.concurrent].median:.2f} s | {result.ratio():.2f} ({result.paired_ratio():.2f}) "
            f"| {s[result.floor].median:.2f} s ({result.floor_ratio():.2f}) | {result.verdict()} |"
        )
    for result in runners:
        if result.error is not None:
            continue
        parts = result.median_timeline(result.concurrent)
        single = result.median_timeline(SINGLE)
        lines += [
            "",
            f"Where the time of the {result.runners} runners went on {result.backend} (medians, from the event "
            f"log): {parts[0]:.2f} s to the first grant (one runner alone: {single[0]:.2f} s), {parts[1]:.2f} s "
            f"of migration by the first holder ({single[1]:.2f} s alone), {parts[2]:.2f} s of handoffs and "
            f"{parts[3]:.2f} s held by the {result.runners - 1} runners that found nothing to do, {parts[4]:.2f} s "
            f"from the last release to the last exit ({single[4]:.2f} s alone).",
        ]
        if result.spread() > NOISE_LIMIT:
            lines += ["", f"Warning: {noise_warning(result)}"]
    return lines


def versions_line(redis_url: str | None) -> str:
    """SQLite's version and durability (as a fenced run's connection has them), and Redis's version."""
    with tempfile.TemporaryDirectory() as directory, sqlite_transactions():
        engine = create_engine(f"sqlite:///{directory}/probe.db")
        try:
            with engine.connect() as connection:
                mode = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
                synchronous = connection.exec_driver_sql("PRAGMA synchronous").scalar()
        finally:
            engine.dispose()
    level = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(int(synchronous or 0), str(synchronous))
    line = f"SQLite {sqlite3.sqlite_version} (journal_mode={mode}, synchronous={level})"
    if redis_url is not None:
        with redis.Redis.from_url(redis_url) as client:
            info = client.info("server")
        line += f", Redis {info.get('redis_version', '?')} (redis-py {metadata.version('redis')})"
    return line


# -- main -----------------------------------------------------------------------------------------


def parse_backends(text_value: str, allowed: Sequence[str], option: str) -> list[str]:
    """``postgresql,sqlite`` to backend names; argparse error text on an unknown one."""
    names = []
    for part in (piece.strip().lower() for piece in text_value.split(",")):
        if BACKENDS.get(part) not in allowed:
            choices = ", ".join(k for k, v in BACKENDS.items() if v in allowed)
            raise argparse.ArgumentTypeError(f"{option}: unknown backend {part!r} (choose from {choices})")
        names.append(BACKENDS[part])
    return list(dict.fromkeys(names))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--pairs",
        type=int,
        default=DEFAULT_PAIRS,
        help=f"lease acquire+release pairs (and bare writes) per round (default {DEFAULT_PAIRS})",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_PAIR_ROUNDS,
        help=f"rounds of the round-trip part (default {DEFAULT_PAIR_ROUNDS})",
    )
    parser.add_argument(
        "--backends",
        default="postgresql,sqlite,redis",
        help="lease backends of the round-trip part (default postgresql,sqlite,redis)",
    )
    parser.add_argument(
        "--runners", type=int, default=DEFAULT_RUNNERS, help=f"runners started together (default {DEFAULT_RUNNERS})"
    )
    parser.add_argument(
        "--runner-rounds",
        type=int,
        default=DEFAULT_RUNNER_ROUNDS,
        help=f"rounds of the concurrent-runner part (default {DEFAULT_RUNNER_ROUNDS})",
    )
    parser.add_argument(
        "--runner-backends",
        default="postgresql,sqlite",
        help="databases of the concurrent-runner part (default postgresql,sqlite)",
    )
    parser.add_argument(
        "--revisions",
        type=int,
        default=DEFAULT_REVISIONS,
        help=f"length of the revision chain (default {DEFAULT_REVISIONS})",
    )
    parser.add_argument(
        "--preinstall",
        action="store_true",
        help="install the fence schema (untimed) before every fencemigrate run; by default "
        "the runners install it themselves, as on a first deployment",
    )
    parser.add_argument("--skip-round-trips", action="store_true", help="run the concurrent-runner part only")
    parser.add_argument("--skip-runners", action="store_true", help="run the round-trip part only")
    parser.add_argument("--pg-host", help="PostgreSQL host (default $FENCEMIGRATE_TEST_PG_HOST)")
    parser.add_argument("--pg-port", type=int, help="PostgreSQL port (default $FENCEMIGRATE_TEST_PG_PORT)")
    parser.add_argument("--redis-url", help=f"Redis for the Redis backend (default ${REDIS_VAR})")
    parser.add_argument("--keep", action="store_true", help="keep the temporary projects (databases are dropped)")
    args = parser.parse_args(argv)
    for name in ("pairs", "rounds", "runners", "runner_rounds", "revisions"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.runners < 2:
        parser.error("--runners must be at least 2")
    try:
        args.backends = parse_backends(args.backends, LEASE_BACKENDS, "--backends")
        args.runner_backends = parse_backends(args.runner_backends, RUNNER_BACKENDS, "--runner-backends")
    except argparse.ArgumentTypeError as error:
        parser.error(str(error))
    if args.skip_round_trips and args.skip_runners:
        parser.error("--skip-round-trips and --skip-runners leave nothing to run")
    args.redis_url = args.redis_url or os.environ.get(REDIS_VAR, "").strip() or None
    if REDIS in args.backends and not args.skip_round_trips and args.redis_url is None:
        parser.error(
            f"the Redis backend needs --redis-url or ${REDIS_VAR} (or leave it out with --backends postgresql,sqlite)"
        )
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run both parts and print the tables; 0 unless a run failed."""
    args = parse_args(argv)
    server = server_from_args(args.pg_host, args.pg_port)
    machine = f"{machine_line(server)}, {versions_line(args.redis_url)}"
    print(f"machine: {machine}")
    print(f"server: {server.host}:{server.port}" + (f", Redis: {args.redis_url}" if args.redis_url else ""))
    dbs = Databases(server)
    workdir = Path(tempfile.mkdtemp(prefix="fm-bench-leases-"))
    started = time.perf_counter()
    trips: list[RoundTrips] = []
    runners: list[RunnerResult] = []
    try:
        if not args.skip_round_trips:
            print()
            print(f"part 1: {args.pairs} lease acquire+release pairs against {args.pairs} bare writes per round")
            trips = measure_round_trips(server, dbs, workdir, args.backends, args.redis_url, args.pairs, args.rounds)
            print_round_trips(trips)
        if not args.skip_runners:
            print()
            print(
                f"part 2: {args.runners} x fencemigrate upgrade head started together against one, "
                f"{args.revisions} revisions, fresh database per run"
                + (" (fence schema preinstalled)" if args.preinstall else "")
            )
            project = chain_project(workdir / "chain", child_env(), args.revisions, False)
            print(f"project: `alembic init -t generic` in {project.path}")
            runners = measure_runners(
                server,
                dbs,
                workdir,
                project,
                args.runner_backends,
                args.runners,
                args.runner_rounds,
                args.preinstall,
            )
            print_runners(runners)
        print()
        print("----- summary (Markdown, for the README) -----")
        print(summary(machine, trips, runners, args))
        print("----- end of summary -----")
        print(f"\ntotal benchmark time: {time.perf_counter() - started:.0f} s")
        failed = [f"{r.backend} (round trips)" for r in trips if r.error]
        failed += [f"{r.backend} (concurrent runners)" for r in runners if r.error]
        if failed:
            print(f"\nbenchmark error: failed: {', '.join(failed)} (see above)", file=sys.stderr)
            return 1
        return 0
    except (BenchError, subprocess.TimeoutExpired) as error:
        print(f"\nbenchmark error: {error}", file=sys.stderr)
        return 1
    finally:
        dbs.drop_all()
        if args.keep:
            print(f"projects kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
