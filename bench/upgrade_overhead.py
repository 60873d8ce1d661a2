"""Benchmark: what does fencing cost on top of ``alembic upgrade head``?

Measures, in one run on one machine, against a real PostgreSQL server:

1. Whole-command wall time of plain ``alembic upgrade head`` versus
   ``fencemigrate upgrade head --token 1`` on a chain of small revisions (default
   200, each ``CREATE TABLE t_NNNN``), every run on a fresh database, runs
   interleaved, median over N rounds, for the generic env.py (one transaction) and
   for ``transaction_per_migration=True``. fencemigrate is measured twice: on a
   bare database (the run installs the fence schema: the real first-run cost) and
   with the fence schema installed beforehand (``fencemigrate install``, untimed).
2. Time-to-FENCED: how long a stale writer (token 9 after token 10 wrote) takes to
   be rejected when the next revision's DDL would take 5 s, against a successful
   run (token 11) through the same revision.
3. Already at head (every deploy after the first): ``alembic upgrade head`` against
   ``fencemigrate upgrade head`` (no token: with nothing to do it takes no lease) on a database that is at
   head, both finding nothing to do, runs alternated, median over N rounds.
4. A summary block (Markdown) to paste into the project README.

Usage (see bench/README.md)::

    bash bench/run                                  # throwaway server, defaults
    .venv/bin/python bench/upgrade_overhead.py --pg-host 127.0.0.1 --pg-port 5432 [--rounds N]

Exit status 0 whatever the verdict (this is a benchmark, not a test); 1 if a run
failed or produced a wrong database state, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg
from common import FreshDatabases, host_line

HOST_VAR = "FENCEMIGRATE_TEST_PG_HOST"
PORT_VAR = "FENCEMIGRATE_TEST_PG_PORT"
PG_USER = "postgres"
MAINTENANCE_DB = "postgres"

#: Targets from the issues: fencemigrate's median at most 10 % above alembic's in one transaction
#: (issue 1), at most 5 % with ``transaction_per_migration=True`` (issue 15).
TARGETS = {"one transaction (generic env.py)": 1.10, "transaction_per_migration=True": 1.05}
#: Resamples of the bootstrap interval of the paired ratio (seeded: the same rounds give the same interval).
BOOTSTRAP_RESAMPLES = 2000
#: Default rounds, and the reduced default used when one alembic run is slow.
DEFAULT_ROUNDS = 7
REDUCED_ROUNDS = 5
SLOW_ALEMBIC_SECONDS = 3.0
#: Above this (max - min) / median of alembic's wall times, the machine was too busy to trust.
NOISE_LIMIT = 0.25
#: Kill a command after this many seconds: a hung run must not hang the benchmark.
COMMAND_TIMEOUT = 600.0

SCRIPT_DIR = "migrations"
FENCE_SCHEMA = "fencemigrate"
#: First line of the agent message of a FENCED upgrade (after env.py's log lines on stderr).
FENCED_LINE = "FENCED: you no longer own db/migrations."

ALEMBIC = "alembic"
FM_COLD = "fencemigrate"
FM_WARM = "fencemigrate (schema preinstalled)"
SERIES = (ALEMBIC, FM_COLD, FM_WARM)
FM_AT_HEAD = "fencemigrate (no token)"
AT_HEAD_SERIES = (ALEMBIC, FM_AT_HEAD)


class BenchError(RuntimeError):
    """A run failed or left the database in the wrong state: its time must not count."""


# -- PostgreSQL ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Server:
    """The PostgreSQL server (user ``postgres``, trust auth, as ``.ci/postgres`` starts it)."""

    host: str
    port: int

    def url(self, dbname: str) -> str:
        """SQLAlchemy URL of ``dbname`` with the psycopg (3) driver."""
        return f"postgresql+psycopg://{PG_USER}@{self.host}:{self.port}/{dbname}"

    @contextmanager
    def connect(self, dbname: str = MAINTENANCE_DB) -> Iterator[psycopg.Connection[Any]]:
        """An autocommit connection to ``dbname``."""
        with psycopg.connect(
            host=self.host, port=self.port, user=PG_USER, dbname=dbname, autocommit=True, connect_timeout=10
        ) as conn:
            yield conn

    def query(self, dbname: str, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` run in ``dbname``."""
        with self.connect(dbname) as conn:
            return conn.execute(sql, params).fetchall()

    def version(self) -> str:
        """``server_version`` of the server, with its durability settings."""
        settings = {
            name: str(self.query(MAINTENANCE_DB, f"SHOW {name}")[0][0])
            for name in ("server_version", "fsync", "synchronous_commit")
        }
        return (
            f"{settings['server_version']} (fsync={settings['fsync']}, "
            f"synchronous_commit={settings['synchronous_commit']})"
        )


class Databases(FreshDatabases):
    """Fresh PostgreSQL databases (``DROP ... WITH (FORCE)`` ends leftover sessions)."""

    def __init__(self, server: Server) -> None:
        super().__init__()
        self.server = server

    def _create(self, name: str) -> None:
        with self.server.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')

    def _drop(self, name: str) -> None:
        with self.server.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def server_from_args(host: str | None, port: int | None) -> Server:
    """The server from --pg-host/--pg-port, else from FENCEMIGRATE_TEST_PG_HOST/PORT."""
    host = host or os.environ.get(HOST_VAR, "").strip() or None
    port_text = str(port) if port is not None else os.environ.get(PORT_VAR, "").strip()
    if not host or not port_text:
        raise SystemExit(
            f"usage: no PostgreSQL server: pass --pg-host/--pg-port or set {HOST_VAR}/{PORT_VAR} "
            "(or run `bash bench/run`, which starts a throwaway server)"
        )
    try:
        return Server(host, int(port_text))
    except ValueError:
        raise SystemExit(f"usage: {port_text!r} is not a port number") from None


# -- commands -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One command: its wall time, exit status and output."""

    argv: tuple[str, ...]
    seconds: float
    cpu: float  # user + sys CPU seconds of the command (and its children)
    code: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        """The command, its status and its output, for error messages."""
        return (
            f"$ {' '.join(self.argv)}\n[exit {self.code} after {self.seconds:.2f} s]\n"
            f"--- stdout ---\n{self.stdout[-4000:]}--- stderr ---\n{self.stderr[-4000:]}"
        )


def console_script(name: str) -> list[str]:
    """argv prefix running console script ``name`` of this interpreter's environment."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return [str(candidate)]
    return [sys.executable, "-m", name]


def child_env() -> dict[str, str]:
    """Environment of the timed commands: ours, minus what could change their behaviour."""
    env = dict(os.environ)
    for name in ("FENCEMIGRATE_TOKEN", "ALEMBIC_CONFIG", "PYTHONDONTWRITEBYTECODE", "PYTHONPROFILEIMPORTTIME"):
        env.pop(name, None)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> Run:
    """Run ``argv`` in ``cwd`` and time the whole subprocess (interpreter start included).

    Also records the command's own CPU time, which a busy machine disturbs much less than
    wall time (it does not include the PostgreSQL server's work).
    """
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    completed = subprocess.run(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage.ru_utime - usage_before.ru_utime) + (usage.ru_stime - usage_before.ru_stime)
    return Run(tuple(argv), seconds, cpu, completed.returncode, completed.stdout, completed.stderr)


def expect(result: Run, code: int) -> Run:
    """Raise :class:`BenchError` unless ``result`` exited with ``code``."""
    if result.code != code:
        raise BenchError(f"expected exit status {code}\n{result.describe()}")
    return result


# -- Alembic projects -----------------------------------------------------------------------


@dataclass
class Project:
    """An Alembic project made by the real ``alembic init -t generic`` in :attr:`path`."""

    path: Path
    env: Mapping[str, str]
    revisions: list[str] = field(default_factory=list)

    @classmethod
    def init(cls, path: Path, env: Mapping[str, str]) -> Project:
        """Run ``alembic init -t generic migrations`` in ``path``."""
        path.mkdir(parents=True)
        expect(run(console_script("alembic") + ["init", "-t", "generic", SCRIPT_DIR], path, env), 0)
        return cls(path, env)

    @property
    def head(self) -> str:
        """The last revision written."""
        return self.revisions[-1]

    def add_revision(self, rev_id: str, upgrade_sql: Sequence[str], downgrade_sql: Sequence[str]) -> None:
        """Write ``versions/<rev_id>_bench.py`` revising the previous revision, like ``alembic revision``."""
        down = self.revisions[-1] if self.revisions else None

        def body(statements: Sequence[str]) -> str:
            return "\n".join(f"    op.execute({sql!r})" for sql in statements) or "    pass"

        source = (
            f'"""bench {rev_id}\n\nRevision ID: {rev_id}\nRevises: {down or ""}\n"""\n'
            "from typing import Sequence, Union\n\n"
            "import sqlalchemy as sa  # noqa: F401\n"
            "from alembic import op\n\n"
            f"revision: str = {rev_id!r}\n"
            f"down_revision: Union[str, Sequence[str], None] = {down!r}\n"
            "branch_labels: Union[str, Sequence[str], None] = None\n"
            "depends_on: Union[str, Sequence[str], None] = None\n\n\n"
            f"def upgrade() -> None:\n{body(upgrade_sql)}\n\n\n"
            f"def downgrade() -> None:\n{body(downgrade_sql)}\n"
        )
        (self.path / SCRIPT_DIR / "versions" / f"{rev_id}_bench.py").write_text(source)
        self.revisions.append(rev_id)

    def set_url(self, url: str) -> None:
        """Point ``sqlalchemy.url`` in alembic.ini at ``url``."""
        ini = self.path / "alembic.ini"
        text, count = re.subn(
            r"^sqlalchemy\.url\s*=.*$",
            lambda _: f"sqlalchemy.url = {url.replace('%', '%%')}",
            ini.read_text(),
            flags=re.MULTILINE,
        )
        if count != 1:
            raise BenchError(f"expected one sqlalchemy.url line in {ini}, found {count}")
        ini.write_text(text)

    def transaction_per_migration(self) -> None:
        """Add ``transaction_per_migration=True`` to env.py's online ``context.configure``."""
        env_py = self.path / SCRIPT_DIR / "env.py"
        old = "connection=connection, target_metadata=target_metadata"
        text = env_py.read_text()
        if text.count(old) != 1:
            raise BenchError(f"{old!r} not found once in {env_py}: the generic template changed")
        env_py.write_text(text.replace(old, old + ", transaction_per_migration=True"))

    def alembic(self, *args: str) -> Run:
        """Plain ``alembic *args`` in the project directory."""
        return run(console_script("alembic") + list(args), self.path, self.env)

    def fencemigrate(self, *args: str) -> Run:
        """``fencemigrate *args`` in the project directory."""
        return run(console_script("fencemigrate") + list(args), self.path, self.env)


def chain_project(path: Path, env: Mapping[str, str], count: int, per_migration: bool) -> Project:
    """A project whose ``count`` revisions each create one small table."""
    project = Project.init(path, env)
    if per_migration:
        project.transaction_per_migration()
    for number in range(1, count + 1):
        project.add_revision(
            f"r{number:04d}",
            [f"CREATE TABLE t_{number:04d} (id int PRIMARY KEY, v text)"],
            [f"DROP TABLE t_{number:04d}"],
        )
    return project


# -- database state checks -----------------------------------------------------------------


def versions(server: Server, db: str) -> list[str] | None:
    """Rows of alembic_version, None if the table does not exist."""
    if not server.query(db, "SELECT to_regclass('public.alembic_version') IS NOT NULL")[0][0]:
        return None
    return sorted(str(row[0]) for row in server.query(db, "SELECT version_num FROM alembic_version"))


def table_exists(server: Server, db: str, table: str) -> bool:
    """True if ``public.<table>`` exists."""
    return bool(server.query(db, "SELECT to_regclass(%s) IS NOT NULL", (f"public.{table}",))[0][0])


def fence_schema_present(server: Server, db: str) -> bool:
    """True if the fence schema exists."""
    return bool(server.query(db, "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (FENCE_SCHEMA,))[0][0])


def fence_token(server: Server, db: str, resource: str = "db/migrations") -> int | None:
    """The fence token of ``resource``, None without a row."""
    rows = server.query(db, f"SELECT token FROM {FENCE_SCHEMA}.agent_fence WHERE resource = %s", (resource,))
    return int(rows[0][0]) if rows else None


def check(condition: bool, what: str, result: Run) -> None:
    """Raise :class:`BenchError` describing ``what`` unless ``condition``."""
    if not condition:
        raise BenchError(f"wrong state after the run: {what}\n{result.describe()}")


def verify_chain(server: Server, db: str, project: Project, series: str, result: Run) -> None:
    """Check that a chain run really migrated everything, so a broken run cannot look fast."""
    expect(result, 0)
    count = len(project.revisions)
    check(versions(server, db) == [project.head], f"alembic_version is not [{project.head}]", result)
    tables = server.query(db, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 't\\_%'")[
        0
    ][0]
    check(tables == count, f"{tables} chain tables instead of {count}", result)
    if series == ALEMBIC:
        check(not fence_schema_present(server, db), "plain alembic created the fence schema", result)
        return
    check(fence_token(server, db) == 1, "fence token of db/migrations is not 1", result)
    ledger = server.query(db, f"SELECT count(*) FROM {FENCE_SCHEMA}.applied_revision")[0][0]
    check(ledger == count, f"{ledger} ledger rows instead of {count}", result)
    installed = "installed the fence schema" in result.stdout
    check(installed == (series == FM_COLD), f"'installed the fence schema' printed: {installed}", result)


# -- part 1: chain overhead ----------------------------------------------------------------


@dataclass
class Series:
    """Wall and CPU times of one command in one env.py mode, one entry per round."""

    name: str
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        """Median wall time."""
        return statistics.median(self.seconds)

    @property
    def cpu_median(self) -> float:
        """Median CPU time of the command."""
        return statistics.median(self.cpu)


@dataclass
class ModeResult:
    """The three series of one env.py mode."""

    mode: str
    series: dict[str, Series]

    def ratio(self, name: str) -> float:
        """median(name) / median(alembic): the headline number."""
        return self.series[name].median / self.series[ALEMBIC].median

    def paired_ratio(self, name: str) -> float:
        """Median over rounds of name / alembic within the same round (runs close in time)."""
        pairs = zip(self.series[name].seconds, self.series[ALEMBIC].seconds, strict=False)
        return statistics.median(mine / base for mine, base in pairs)

    def paired_interval(self, name: str) -> tuple[float, float]:
        """A 95 % bootstrap interval of :meth:`paired_ratio` (percentile method, resampling rounds)."""
        ratios = [
            mine / base for mine, base in zip(self.series[name].seconds, self.series[ALEMBIC].seconds, strict=False)
        ]
        draw = random.Random(len(ratios))
        medians = sorted(statistics.median(draw.choices(ratios, k=len(ratios))) for _ in range(BOOTSTRAP_RESAMPLES))
        return medians[int(0.025 * BOOTSTRAP_RESAMPLES)], medians[int(0.975 * BOOTSTRAP_RESAMPLES) - 1]

    def cpu_ratio(self, name: str) -> float:
        """median CPU time of name / median CPU time of alembic (client side only)."""
        return self.series[name].cpu_median / self.series[ALEMBIC].cpu_median

    def spread(self) -> float:
        """(max - min) / median of alembic's wall times: how noisy the machine was."""
        seconds = self.series[ALEMBIC].seconds
        return (max(seconds) - min(seconds)) / statistics.median(seconds)


def chain_run(server: Server, dbs: Databases, project: Project, series: str) -> Run:
    """One run of ``series`` on a fresh database; creating (and preinstalling) is not timed."""
    with dbs.fresh() as db:
        project.set_url(server.url(db))
        if series == ALEMBIC:
            result = project.alembic("upgrade", "head")
        else:
            if series == FM_WARM:
                expect(project.fencemigrate("install"), 0)
            result = project.fencemigrate("upgrade", "head", "--token", "1")
        verify_chain(server, db, project, series, result)
    return result


def measure_mode(server: Server, dbs: Databases, project: Project, mode: str, rounds: int) -> ModeResult:
    """``rounds`` runs of each series, interleaved; the order rotates every round."""
    result = ModeResult(mode, {name: Series(name) for name in SERIES})
    for number in range(rounds):
        shift = number % len(SERIES)
        order = SERIES[shift:] + SERIES[:shift]
        for name in order:
            run_result = chain_run(server, dbs, project, name)
            result.series[name].seconds.append(run_result.seconds)
            result.series[name].cpu.append(run_result.cpu)
            print(
                f"  [{mode}] round {number + 1}/{rounds}  {name:<36} {run_result.seconds:6.3f} s "
                f"(cpu {run_result.cpu:5.3f} s)  ok",
                flush=True,
            )
    return result


def warm_up(server: Server, dbs: Databases, project: Project, mode: str) -> float:
    """Untimed runs of every series (writes bytecode caches); returns a warm alembic run's time."""
    for name in SERIES:
        chain_run(server, dbs, project, name)
    seconds = chain_run(server, dbs, project, ALEMBIC).seconds
    print(f"  [{mode}] warm-up done (warm alembic run: {seconds:.3f} s)", flush=True)
    return seconds


# -- part 2: time to FENCED ------------------------------------------------------------------


@dataclass
class FencedResult:
    """Timings of the stale and the valid writer in front of a slow revision."""

    slow_seconds: float
    fenced: list[float]
    startup: list[float]
    success: float


def measure_fenced(server: Server, dbs: Databases, project: Project, runs: int, slow: float) -> FencedResult:
    """Fence at 10 after the first revision; time token 9 (FENCED) and token 11 (success)."""
    first, slow_rev = project.revisions
    with dbs.fresh() as db:
        project.set_url(server.url(db))
        expect(project.fencemigrate("upgrade", first, "--token", "10"), 0)
        if fence_token(server, db) != 10 or versions(server, db) != [first]:
            raise BenchError("setup: fence is not at 10 after the first revision")
        fenced: list[float] = []
        startup: list[float] = []
        for number in range(runs):
            result = expect(project.fencemigrate("upgrade", "head", "--token", "9"), 3)
            check(FENCED_LINE in result.stderr.splitlines(), "no FENCED message on stderr", result)
            check(versions(server, db) == [first], "the stale writer moved alembic_version", result)
            check(not table_exists(server, db, "slow_t"), "the stale writer created slow_t", result)
            check(fence_token(server, db) == 10, "the fence moved", result)
            fenced.append(result.seconds)
            reference = expect(project.alembic("current"), 0)
            startup.append(reference.seconds)
            print(
                f"  [fenced] run {number + 1}/{runs}  token 9 -> exit 3 in {result.seconds:6.3f} s"
                f"   (alembic current: {reference.seconds:6.3f} s)",
                flush=True,
            )
        result = expect(project.fencemigrate("upgrade", "head", "--token", "11"), 0)
        check(versions(server, db) == [slow_rev], f"alembic_version is not [{slow_rev}]", result)
        check(table_exists(server, db, "slow_t"), "slow_t missing", result)
        check(fence_token(server, db) == 11, "fence token is not 11", result)
        check(result.seconds >= slow, f"a run through pg_sleep({slow}) took under {slow} s", result)
        print(f"  [fenced] token 11 -> exit 0 in {result.seconds:6.3f} s", flush=True)
    return FencedResult(slow, fenced, startup, result.seconds)


# -- part 3: already at head -----------------------------------------------------------------------


def measure_at_head(server: Server, dbs: Databases, project: Project, rounds: int) -> ModeResult:
    """One database brought to head once; then, per round, both commands find nothing to do.

    One untimed round first; the order alternates every round.
    """
    result = ModeResult("already at head", {name: Series(name) for name in AT_HEAD_SERIES})
    with dbs.fresh() as db:
        project.set_url(server.url(db))
        expect(project.fencemigrate("upgrade", "head"), 0)
        for number in range(-1, rounds):
            order = AT_HEAD_SERIES if number % 2 == 0 else AT_HEAD_SERIES[::-1]
            for name in order:
                if name == ALEMBIC:
                    run_result = expect(project.alembic("upgrade", "head"), 0)
                else:
                    run_result = expect(project.fencemigrate("upgrade", "head"), 0)
                    check("  nothing to do" in run_result.stdout.splitlines(), "fencemigrate did something", run_result)
                check(versions(server, db) == [project.head], f"alembic_version is not [{project.head}]", run_result)
                if number < 0:
                    continue
                result.series[name].seconds.append(run_result.seconds)
                result.series[name].cpu.append(run_result.cpu)
                print(
                    f"  [at head] round {number + 1}/{rounds}  {name:<36} {run_result.seconds:6.3f} s "
                    f"(cpu {run_result.cpu:5.3f} s)  ok",
                    flush=True,
                )
    return result


def at_head_line(at_head: ModeResult, revisions: int) -> str:
    """Part 3 in one sentence (the same for the console and the README)."""
    s = at_head.series
    return (
        f"Already at head, {revisions} revisions (every deploy after the first), median of "
        f"{len(s[ALEMBIC].seconds)} alternated runs: `alembic upgrade head` {s[ALEMBIC].median:.2f} s "
        f"(CPU {s[ALEMBIC].cpu_median:.2f} s), `fencemigrate upgrade head` without --token "
        f"{s[FM_AT_HEAD].median:.2f} s (CPU {s[FM_AT_HEAD].cpu_median:.2f} s): ratio "
        f"{at_head.ratio(FM_AT_HEAD):.2f} (paired {at_head.paired_ratio(FM_AT_HEAD):.2f}, CPU "
        f"{at_head.cpu_ratio(FM_AT_HEAD):.2f}). Both find nothing to do; fencemigrate reads the heads the "
        "revision files declare instead of importing them."
    )


# -- report -------------------------------------------------------------------------------------


def machine_line(server: Server) -> str:
    """nproc, CPU, Python, PostgreSQL and library versions."""
    return (
        f"{host_line()}, PostgreSQL {server.version()}, "
        f"alembic {metadata.version('alembic')}, SQLAlchemy {metadata.version('SQLAlchemy')}, "
        f"psycopg {metadata.version('psycopg')}, fencemigrate {metadata.version('fencemigrate')}"
    )


def verdict(mode: ModeResult, name: str) -> str:
    """PASS/FAIL of ``name``'s ratio against its mode's target, and whether the paired ratio's 95 %
    interval lies below the target (shown), straddles it (not shown) or lies above it."""
    target = TARGETS[mode.mode]
    low, high = mode.paired_interval(name)
    shown = "shown" if high <= target else "above" if low > target else "not shown"
    return f"{'PASS' if mode.ratio(name) <= target else 'FAIL'} ({shown})"


def print_details(results: Sequence[ModeResult], revisions: int) -> None:
    """Per-series medians, spread, overhead per revision, and the ratios with their verdicts."""
    print()
    print(
        f"{'mode':<32} {'command':<36} {'median':>8} {'min':>8} {'max':>8} {'ratio':>6} "
        f"{'paired':>6} {'cpu':>7} {'cpu ratio':>9} {'ms/rev':>7}"
    )
    for mode in results:
        base = mode.series[ALEMBIC].median
        for name in SERIES:
            series = mode.series[name]
            extra = "" if name == ALEMBIC else f"{(series.median - base) * 1000 / revisions:+.2f}"
            print(
                f"{mode.mode:<32} {name:<36} {series.median:7.3f}s {min(series.seconds):7.3f}s "
                f"{max(series.seconds):7.3f}s {mode.ratio(name):6.3f} {mode.paired_ratio(name):6.3f} "
                f"{series.cpu_median:6.3f}s {mode.cpu_ratio(name):9.3f} {extra:>7}"
            )
    print(
        "  median/min/max: wall time of the whole command; ratio = median / median(alembic); "
        "paired = median over rounds of the\n  ratio to the alembic run of the same round; cpu = median "
        "user+sys CPU of the command (not the server's);\n  ms/rev = (median - median(alembic)) / revisions"
    )
    print()
    for mode in results:
        for name in (FM_COLD, FM_WARM):
            low, high = mode.paired_interval(name)
            print(
                f"{verdict(mode, name)}  {mode.mode}: {name} / alembic = {mode.ratio(name):.3f}, paired "
                f"{mode.paired_ratio(name):.3f}, 95% interval [{low:.3f}, {high:.3f}] "
                f"(target <= {TARGETS[mode.mode]:.2f})"
            )
    for mode in results:
        if mode.spread() > NOISE_LIMIT:
            print(f"WARNING  {noise_warning(mode)}")


def noise_warning(mode: ModeResult) -> str:
    """Why the wall-time ratios of ``mode`` should not be trusted."""
    seconds = mode.series[ALEMBIC].seconds
    return (
        f"{mode.mode}: alembic's own wall time ranged from {min(seconds):.2f} to {max(seconds):.2f} s "
        f"({mode.spread():.0%} of its median): the machine was busy, so the wall-time ratios are noisy; "
        "the paired and CPU ratios are more robust. Rerun on an idle machine (or with more --rounds)."
    )


def summary(
    machine: str,
    results: Sequence[ModeResult],
    fenced: FencedResult,
    at_head: ModeResult,
    revisions: int,
    rounds: int,
    note: str,
) -> str:
    """The copy-pasteable Markdown block for the README."""
    lines = [
        "### fencemigrate upgrade overhead (bench/upgrade_overhead.py)",
        "",
        f"Machine: {machine}.",
        "",
        f"Chain of {revisions} revisions (one `CREATE TABLE` each), every run on a fresh database, "
        f"whole-command wall time (interpreter start included), median of {rounds} interleaved runs.{note} "
        '"first run" = the fence schema is installed by the run itself (a fresh database\'s real first '
        'run); "schema preinstalled" = `fencemigrate install` ran beforehand, untimed. Ratio = '
        "median / median(alembic); paired = median of the per-round ratios; CPU = the command's own "
        "user+sys time (not the server's); the verdict compares the ratio with the target, and says whether "
        "the paired ratio's 95 % bootstrap interval lies below it (shown), across it (not shown) or above it.",
        "",
        "| env.py | `alembic upgrade head` | `fencemigrate upgrade head --token 1`, first run "
        "| ratio (paired, CPU) | fencemigrate, schema preinstalled | ratio (paired, CPU) | target | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for mode in results:
        s = mode.series
        cold, warm = mode.ratio(FM_COLD), mode.ratio(FM_WARM)
        target = TARGETS[mode.mode]
        lines.append(
            f"| {mode.mode} | {s[ALEMBIC].median:.2f} s | {s[FM_COLD].median:.2f} s "
            f"| {cold:.2f} ({mode.paired_ratio(FM_COLD):.2f}, {mode.cpu_ratio(FM_COLD):.2f}) "
            f"| {s[FM_WARM].median:.2f} s | {warm:.2f} ({mode.paired_ratio(FM_WARM):.2f}, "
            f"{mode.cpu_ratio(FM_WARM):.2f}) | <= {target:.2f} "
            f"| {verdict(mode, FM_COLD)} first run, {verdict(mode, FM_WARM)} preinstalled |"
        )
    for mode in results:
        if mode.spread() > NOISE_LIMIT:
            lines += ["", f"Warning: {noise_warning(mode)}"]
    lines += [
        "",
        f"Time to FENCED (token 9 after token 10 wrote; the next revision's DDL takes "
        f"{fenced.slow_seconds:g} s): median {statistics.median(fenced.fenced):.2f} s over "
        f"{len(fenced.fenced)} runs, exit 3, nothing applied "
        f"(`alembic current` on the same database: {statistics.median(fenced.startup):.2f} s). "
        f"The valid writer (token 11) through the same revision: {fenced.success:.2f} s, exit 0.",
        "",
        at_head_line(at_head, revisions),
    ]
    return "\n".join(lines)


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help=f"runs per command and mode (default {DEFAULT_ROUNDS}, or {REDUCED_ROUNDS} when one "
        f"alembic run takes over {SLOW_ALEMBIC_SECONDS:g} s)",
    )
    parser.add_argument("--revisions", type=int, default=200, help="length of the revision chain (default 200)")
    parser.add_argument("--fenced-runs", type=int, default=5, help="timed FENCED rejections (default 5)")
    parser.add_argument(
        "--slow-seconds",
        type=float,
        default=5.0,
        help="pg_sleep of the slow revision in the time-to-FENCED part (default 5)",
    )
    parser.add_argument("--pg-host", help=f"PostgreSQL host (default ${HOST_VAR})")
    parser.add_argument("--pg-port", type=int, help=f"PostgreSQL port (default ${PORT_VAR})")
    parser.add_argument("--keep", action="store_true", help="keep the temporary projects (databases are dropped)")
    args = parser.parse_args(argv)
    for name in ("rounds", "revisions", "fenced_runs"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.slow_seconds <= 0:
        parser.error("--slow-seconds must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run all parts and print the tables; 0 unless a run failed."""
    args = parse_args(argv)
    server = server_from_args(args.pg_host, args.pg_port)
    machine = machine_line(server)
    print(f"machine: {machine}")
    print(f"server: {server.host}:{server.port}")
    dbs = Databases(server)
    env = child_env()
    workdir = Path(tempfile.mkdtemp(prefix="fm-bench-"))
    started = time.perf_counter()
    try:
        modes = {
            "one transaction (generic env.py)": chain_project(workdir / "default", env, args.revisions, False),
            "transaction_per_migration=True": chain_project(workdir / "per_migration", env, args.revisions, True),
        }
        print(f"projects: `alembic init -t generic` in {workdir}, {args.revisions} revisions each")
        print()
        print("part 1: alembic upgrade head vs fencemigrate upgrade head --token 1, fresh database per run")
        rounds: int = args.rounds or DEFAULT_ROUNDS
        note = ""
        results: list[ModeResult] = []
        for index, (mode, project) in enumerate(modes.items()):
            warm = warm_up(server, dbs, project, mode)
            if index == 0 and args.rounds is None and warm > SLOW_ALEMBIC_SECONDS:
                rounds = REDUCED_ROUNDS
                note = (
                    f" Rounds reduced to {REDUCED_ROUNDS}: one alembic run took {warm:.2f} s "
                    f"(> {SLOW_ALEMBIC_SECONDS:g} s)."
                )
                print(f"  note:{note}", flush=True)
            results.append(measure_mode(server, dbs, project, mode, rounds))
        print_details(results, args.revisions)
        print(
            '  ("fencemigrate" = first run on a fresh database: installing the fence schema is part of '
            'the measured cost; "schema preinstalled" = `fencemigrate install` ran before, untimed)'
        )

        print()
        print(f"part 2: time to FENCED in front of a revision whose DDL takes {args.slow_seconds:g} s")
        slow = Project.init(workdir / "slow", env)
        slow.add_revision("s0001", ["CREATE TABLE first_t (id int PRIMARY KEY)"], ["DROP TABLE first_t"])
        slow.add_revision(
            "s0002",
            [f"SELECT pg_sleep({args.slow_seconds})", "CREATE TABLE slow_t (id int PRIMARY KEY)"],
            ["DROP TABLE slow_t"],
        )
        fenced = measure_fenced(server, dbs, slow, args.fenced_runs, args.slow_seconds)
        median_fenced = statistics.median(fenced.fenced)
        print()
        print(
            f"time to FENCED (token 9, exit 3): median {median_fenced:.3f} s, "
            f"min {min(fenced.fenced):.3f} s, max {max(fenced.fenced):.3f} s over {len(fenced.fenced)} runs"
        )
        print(
            f"alembic current on the same database (startup + connect, for scale): "
            f"median {statistics.median(fenced.startup):.3f} s"
        )
        print(f"successful fencemigrate upgrade head --token 11 through the slow revision: {fenced.success:.3f} s")
        fast = max(fenced.fenced) < args.slow_seconds
        print(
            f"{'PASS' if fast else 'FAIL'}  every rejection came before the {args.slow_seconds:g} s DDL "
            f"(slowest {max(fenced.fenced):.3f} s)"
        )

        print()
        print("part 3: alembic upgrade head vs fencemigrate upgrade head on a database already at head")
        at_head = measure_at_head(server, dbs, modes["one transaction (generic env.py)"], rounds)
        print()
        print(at_head_line(at_head, args.revisions))

        print()
        print("----- summary (Markdown, for the README) -----")
        print(summary(machine, results, fenced, at_head, args.revisions, rounds, note))
        print("----- end of summary -----")
        print(f"\ntotal benchmark time: {time.perf_counter() - started:.0f} s")
        return 0
    except (BenchError, subprocess.TimeoutExpired, psycopg.Error) as error:
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
