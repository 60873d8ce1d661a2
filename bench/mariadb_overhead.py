"""Benchmark: what does pre-check mode cost on top of ``alembic upgrade head`` on MariaDB?

Measures, in one run on one machine, against a real MariaDB (or MySQL) server, the
whole-command wall time of plain ``alembic upgrade head`` and of ``fencemigrate upgrade head``
on a chain of small revisions (default 200, each ``CREATE TABLE t_NNNN``), every run on a
fresh database, runs interleaved, median over N rounds. fencemigrate runs in pre-check mode
(MySQL commits DDL on its own) and is measured three ways: ``--token 1`` on a bare database
(the run installs the fence schema), ``--token 1`` with the schema installed beforehand
(``fencemigrate install``, untimed), and without ``--token`` (the run takes its own lease).
Ends with a summary block (Markdown) to paste into the project README.

Usage (see bench/README.md)::

    bash bench/run --mariadb                        # throwaway durable MariaDB, defaults
    .venv/bin/python bench/mariadb_overhead.py --mysql-url mysql+pymysql://user:pw@127.0.0.1:3306 [--rounds N]

Exit status 0 whatever the verdict (this is a benchmark, not a test); 1 if a run
failed or produced a wrong database state, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import os
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

import pymysql
from common import FreshDatabases, host_line
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from upgrade_overhead import (
    ALEMBIC,
    DEFAULT_ROUNDS,
    NOISE_LIMIT,
    REDUCED_ROUNDS,
    SLOW_ALEMBIC_SECONDS,
    BenchError,
    ModeResult,
    Project,
    Run,
    Series,
    chain_project,
    check,
    child_env,
    expect,
    noise_warning,
)

URL_VAR = "FENCEMIGRATE_TEST_MYSQL_URL"

#: Target from the issue: fencemigrate's median at most 15 % above alembic's.
TARGET_RATIO = 1.15

#: Table prefix of the fence schema on MySQL (its objects live in the application's database).
FENCE_PREFIX = "fencemigrate"
RESOURCE = "db/migrations"
#: Every pre-check run says so on stdout.
PRECHECK_LINE = "pre-check mode:"
INSTALLED_LINE = "installed the fence schema"
OWN_LEASE_LINE = "the token came from a lease this run took"

FM_COLD = "fencemigrate --token 1"
FM_WARM = "fencemigrate --token 1 (schema preinstalled)"
FM_LEASE = "fencemigrate (own lease)"
SERIES = (ALEMBIC, FM_COLD, FM_WARM, FM_LEASE)
FENCED_SERIES = SERIES[1:]
MODE = "generic env.py"

#: Server counters read before and after every run (not timed): statements and flushes.
COUNTERS = ("Questions", "Innodb_log_writes", "Innodb_data_fsyncs")


# -- MariaDB ------------------------------------------------------------------------------


@dataclass(frozen=True)
class MysqlServer:
    """A MariaDB/MySQL server reached with PyMySQL; the account may CREATE and DROP databases."""

    url: URL

    def database_url(self, dbname: str) -> str:
        """SQLAlchemy URL of ``dbname`` on this server (password included: it goes into alembic.ini)."""
        return self.url.set(database=dbname).render_as_string(hide_password=False)

    @contextmanager
    def connect(self, dbname: str | None = None) -> Iterator[pymysql.connections.Connection[Any]]:
        """An autocommit connection, to ``dbname`` or to no database."""
        conn = pymysql.connect(
            host=self.url.host or "127.0.0.1",
            port=self.url.port or 3306,
            user=self.url.username or "",
            password=self.url.password or "",
            database=dbname,
            autocommit=True,
            connect_timeout=10,
        )
        try:
            yield conn
        finally:
            conn.close()

    def query(self, dbname: str | None, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
        """Rows of ``sql`` run in ``dbname``."""
        with self.connect(dbname) as conn, conn.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def counters(self) -> dict[str, int]:
        """The global status counters of :data:`COUNTERS`."""
        placeholders = ", ".join(["%s"] * len(COUNTERS))
        rows = self.query(None, f"SHOW GLOBAL STATUS WHERE Variable_name IN ({placeholders})", COUNTERS)
        return {str(name): int(value) for name, value in rows}

    def version(self) -> str:
        """The server version with its durability settings."""
        (row,) = self.query(None, "SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@innodb_doublewrite, @@log_bin")
        version, flush, doublewrite, log_bin = row
        return (
            f"{version} (innodb_flush_log_at_trx_commit={flush}, innodb_doublewrite={doublewrite}, log_bin={log_bin})"
        )


class Databases(FreshDatabases):
    """Fresh MariaDB databases."""

    def __init__(self, server: MysqlServer) -> None:
        super().__init__()
        self.server = server

    def _create(self, name: str) -> None:
        with self.server.connect() as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cursor.execute(f"CREATE DATABASE `{name}`")

    def _drop(self, name: str) -> None:
        with self.server.connect() as conn, conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")


def server_from_args(url: str | None) -> MysqlServer:
    """The server from --mysql-url, else from FENCEMIGRATE_TEST_MYSQL_URL; a URL without a database.

    ValueError explains what is wrong with it.
    """
    text = url or os.environ.get(URL_VAR, "").strip()
    if not text:
        raise ValueError(
            f"no MariaDB server: pass --mysql-url or set {URL_VAR} "
            "(or run `bash bench/run --mariadb`, which starts a throwaway server)"
        )
    try:
        parsed = make_url(text)
    except ArgumentError as error:
        raise ValueError(f"{text!r} is not a SQLAlchemy URL: {error}") from None
    if parsed.get_backend_name() not in ("mysql", "mariadb") or parsed.get_driver_name() != "pymysql":
        raise ValueError(f"{text!r} must be a mysql+pymysql:// or mariadb+pymysql:// URL")
    if parsed.database:
        raise ValueError(f"{text!r} names a database: give the server only (every run gets its own database)")
    return MysqlServer(parsed)


# -- database state checks ------------------------------------------------------------------


def table_names(server: MysqlServer, db: str, pattern: str) -> list[str]:
    """Tables of ``db`` whose name is LIKE ``pattern``."""
    rows = server.query(
        db,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND table_name LIKE %s",
        (db, pattern),
    )
    return sorted(str(row[0]) for row in rows)


def versions(server: MysqlServer, db: str) -> list[str] | None:
    """Rows of alembic_version, None if the table does not exist."""
    if not table_names(server, db, "alembic\\_version"):
        return None
    return sorted(str(row[0]) for row in server.query(db, "SELECT version_num FROM alembic_version"))


def fence_token(server: MysqlServer, db: str) -> int | None:
    """The fence token of db/migrations, None without a row."""
    rows = server.query(db, f"SELECT token FROM {FENCE_PREFIX}_agent_fence WHERE resource = %s", (RESOURCE,))
    return int(rows[0][0]) if rows else None


def verify_chain(server: MysqlServer, db: str, project: Project, series: str, result: Run) -> None:
    """Check that a chain run really migrated everything, so a broken run cannot look fast."""
    expect(result, 0)
    count = len(project.revisions)
    check(versions(server, db) == [project.head], f"alembic_version is not [{project.head}]", result)
    tables = len(table_names(server, db, "t\\_%"))
    check(tables == count, f"{tables} chain tables instead of {count}", result)
    fence_tables = table_names(server, db, f"{FENCE_PREFIX}\\_%")
    if series == ALEMBIC:
        check(not fence_tables, f"plain alembic created fence tables {fence_tables}", result)
        return
    check(PRECHECK_LINE in result.stdout, f"{PRECHECK_LINE!r} not printed", result)
    check(fence_token(server, db) == 1, "fence token of db/migrations is not 1", result)
    ((rows, settled),) = server.query(
        db,
        f"SELECT count(*), COALESCE(SUM(state = 'applied' AND applied_token = 1), 0) "
        f"FROM {FENCE_PREFIX}_applied_revision",
    )
    check(rows == count, f"{rows} ledger rows instead of {count}", result)
    check(settled == count, f"{count - settled} ledger rows not 'applied' under token 1", result)
    applies = server.query(db, f"SELECT count(*) FROM {FENCE_PREFIX}_fence_event WHERE kind = 'APPLY' AND token = 1")[
        0
    ][0]
    check(applies == count, f"{applies} APPLY events instead of {count}", result)
    if series == FM_LEASE:
        check(OWN_LEASE_LINE in result.stdout, f"{OWN_LEASE_LINE!r} not printed", result)
        lease = server.query(db, f"SELECT token, holder FROM {FENCE_PREFIX}_lease WHERE resource = %s", (RESOURCE,))
        check(lease == [(1, None)], f"lease row {lease} instead of token 1, released", result)
    else:
        installed = INSTALLED_LINE in result.stdout
        check(installed == (series == FM_COLD), f"{INSTALLED_LINE!r} printed: {installed}", result)


# -- measuring ------------------------------------------------------------------------------


@dataclass
class Counts:
    """Server counter differences over the runs of one series (one entry per run)."""

    runs: dict[str, list[int]] = field(default_factory=lambda: {name: [] for name in COUNTERS})

    def add(self, before: Mapping[str, int], after: Mapping[str, int]) -> None:
        """Record one run's differences; the SHOW GLOBAL STATUS that read ``after`` is not counted."""
        for name in COUNTERS:
            self.runs[name].append(after[name] - before[name] - (1 if name == "Questions" else 0))

    def median(self, name: str) -> float:
        """Median difference of counter ``name`` per run."""
        return statistics.median(self.runs[name])


def chain_run(server: MysqlServer, dbs: Databases, project: Project, series: str, counts: Counts) -> Run:
    """One run of ``series`` on a fresh database; creating (and preinstalling) is not timed."""
    with dbs.fresh() as db:
        project.set_url(server.database_url(db))
        if series == FM_WARM:
            expect(project.fencemigrate("install"), 0)
        before = server.counters()
        if series == ALEMBIC:
            result = project.alembic("upgrade", "head")
        elif series == FM_LEASE:
            result = project.fencemigrate("upgrade", "head")
        else:
            result = project.fencemigrate("upgrade", "head", "--token", "1")
        counts.add(before, server.counters())
        verify_chain(server, db, project, series, result)
    return result


def measure(
    server: MysqlServer, dbs: Databases, project: Project, rounds: int, counts: dict[str, Counts]
) -> ModeResult:
    """``rounds`` runs of each series, interleaved; the order rotates every round."""
    result = ModeResult(MODE, {name: Series(name) for name in SERIES})
    for number in range(rounds):
        shift = number % len(SERIES)
        for name in SERIES[shift:] + SERIES[:shift]:
            run_result = chain_run(server, dbs, project, name, counts[name])
            result.series[name].seconds.append(run_result.seconds)
            result.series[name].cpu.append(run_result.cpu)
            print(
                f"  round {number + 1}/{rounds}  {name:<46} {run_result.seconds:6.3f} s "
                f"(cpu {run_result.cpu:5.3f} s)  ok",
                flush=True,
            )
    return result


def warm_up(server: MysqlServer, dbs: Databases, project: Project) -> float:
    """Untimed runs of every series (writes bytecode caches); returns a warm alembic run's time."""
    for name in SERIES:
        chain_run(server, dbs, project, name, Counts())
    seconds = chain_run(server, dbs, project, ALEMBIC, Counts()).seconds
    print(f"  warm-up done (warm alembic run: {seconds:.3f} s)", flush=True)
    return seconds


# -- report -------------------------------------------------------------------------------------


def machine_line(server: MysqlServer) -> str:
    """nproc, CPU, Python, MariaDB and library versions."""
    return (
        f"{host_line()}, MariaDB/MySQL {server.version()}, alembic {metadata.version('alembic')}, "
        f"SQLAlchemy {metadata.version('SQLAlchemy')}, PyMySQL {metadata.version('PyMySQL')}, "
        f"fencemigrate {metadata.version('fencemigrate')}"
    )


def verdict(ratio: float) -> str:
    """PASS/FAIL against the target ratio."""
    return "PASS" if ratio <= TARGET_RATIO else "FAIL"


def print_details(result: ModeResult, counts: dict[str, Counts], revisions: int) -> None:
    """Per-series medians, spread, overhead per revision, the ratios and verdicts, server counters."""
    base = result.series[ALEMBIC].median
    print()
    print(
        f"{'command':<46} {'median':>8} {'min':>8} {'max':>8} {'ratio':>6} {'paired':>6} "
        f"{'cpu':>7} {'cpu ratio':>9} {'ms/rev':>7} {'stmts':>6} {'log writes':>10} {'data fsyncs':>11}"
    )
    for name in SERIES:
        series = result.series[name]
        extra = "" if name == ALEMBIC else f"{(series.median - base) * 1000 / revisions:+.2f}"
        count = counts[name]
        print(
            f"{name:<46} {series.median:7.3f}s {min(series.seconds):7.3f}s {max(series.seconds):7.3f}s "
            f"{result.ratio(name):6.3f} {result.paired_ratio(name):6.3f} {series.cpu_median:6.3f}s "
            f"{result.cpu_ratio(name):9.3f} {extra:>7} {count.median('Questions'):6.0f} "
            f"{count.median('Innodb_log_writes'):10.0f} {count.median('Innodb_data_fsyncs'):11.0f}"
        )
    print(
        "  median/min/max: wall time of the whole command; ratio = median / median(alembic); paired = median "
        "over rounds of the\n  ratio to the alembic run of the same round; cpu = median user+sys CPU of the "
        "command (not the server's);\n  ms/rev = (median - median(alembic)) / revisions; stmts, log writes, "
        "data fsyncs = median per run of the server's\n  Questions, Innodb_log_writes, Innodb_data_fsyncs "
        "(global counters: exact only when nothing else uses the server)"
    )
    print()
    for name in FENCED_SERIES:
        ratio = result.ratio(name)
        print(f"{verdict(ratio)}  {name} / alembic = {ratio:.3f} (target <= {TARGET_RATIO:.2f})")
    if result.spread() > NOISE_LIMIT:
        print(f"WARNING  {noise_warning(result)}")


def summary(machine: str, result: ModeResult, counts: dict[str, Counts], revisions: int, rounds: int, note: str) -> str:
    """The copy-pasteable Markdown block for the README."""
    base = result.series[ALEMBIC]
    lines = [
        "### fencemigrate upgrade overhead on MariaDB, pre-check mode (bench/mariadb_overhead.py)",
        "",
        f"Machine: {machine}.",
        "",
        f"Chain of {revisions} revisions (one `CREATE TABLE` each), generic env.py, every run on a fresh "
        f"database, whole-command wall time (interpreter start included), median of {rounds} interleaved "
        f'runs.{note} "first run" = the fence schema is installed by the run itself; "schema '
        'preinstalled" = `fencemigrate install` ran beforehand, untimed; "own lease" = no `--token`: '
        "the run takes the lease itself (on a bare database). Ratio = median / median(alembic); paired = "
        "median of the per-round ratios; CPU = the command's own user+sys time (not the server's); "
        "statements and redo-log writes = the server's `Questions` and `Innodb_log_writes` per run.",
        "",
        f"| command | median | ratio (paired, CPU) | ms/rev | statements | log writes "
        f"| target ratio <= {TARGET_RATIO:.2f} |",
        "|---|---:|---:|---:|---:|---:|---|",
        f"| `alembic upgrade head` | {base.median:.2f} s | 1.00 | | "
        f"{counts[ALEMBIC].median('Questions'):.0f} | {counts[ALEMBIC].median('Innodb_log_writes'):.0f} | |",
    ]
    labels = {
        FM_COLD: "`fencemigrate upgrade head --token 1`, first run",
        FM_WARM: "`fencemigrate upgrade head --token 1`, schema preinstalled",
        FM_LEASE: "`fencemigrate upgrade head`, own lease",
    }
    for name in FENCED_SERIES:
        series, ratio = result.series[name], result.ratio(name)
        lines.append(
            f"| {labels[name]} | {series.median:.2f} s | {ratio:.2f} ({result.paired_ratio(name):.2f}, "
            f"{result.cpu_ratio(name):.2f}) | {(series.median - base.median) * 1000 / revisions:+.2f} "
            f"| {counts[name].median('Questions'):.0f} | {counts[name].median('Innodb_log_writes'):.0f} "
            f"| {verdict(ratio)} |"
        )
    if result.spread() > NOISE_LIMIT:
        lines += ["", f"Warning: {noise_warning(result)}"]
    return "\n".join(lines)


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--mysql-url",
        help=f"server URL without a database, mysql+pymysql://user:password@host:port (default ${URL_VAR})",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help=f"runs per command (default {DEFAULT_ROUNDS}, or {REDUCED_ROUNDS} when one alembic run "
        f"takes over {SLOW_ALEMBIC_SECONDS:g} s)",
    )
    parser.add_argument("--revisions", type=int, default=200, help="length of the revision chain (default 200)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary project (databases are dropped)")
    args = parser.parse_args(argv)
    for name in ("rounds", "revisions"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1")
    try:
        args.server = server_from_args(args.mysql_url)
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print the tables; 0 unless a run failed."""
    args = parse_args(argv)
    server: MysqlServer = args.server
    workdir = Path(tempfile.mkdtemp(prefix="fm-bench-mariadb-"))
    dbs = Databases(server)
    started = time.perf_counter()
    try:
        machine = machine_line(server)
        print(f"machine: {machine}")
        print(f"server: {server.url.host}:{server.url.port}")
        project = chain_project(workdir / "project", child_env(), args.revisions, False)
        print(f"project: `alembic init -t generic` in {workdir}, {args.revisions} revisions")
        print()
        print("alembic upgrade head vs fencemigrate upgrade head (pre-check mode), fresh database per run")
        warm = warm_up(server, dbs, project)
        rounds: int = args.rounds or DEFAULT_ROUNDS
        note = ""
        if args.rounds is None and warm > SLOW_ALEMBIC_SECONDS:
            rounds = REDUCED_ROUNDS
            note = (
                f" Rounds reduced to {REDUCED_ROUNDS}: one alembic run took {warm:.2f} s"
                f" (> {SLOW_ALEMBIC_SECONDS:g} s)."
            )
            print(f"  note:{note}", flush=True)
        counts = {name: Counts() for name in SERIES}
        result = measure(server, dbs, project, rounds, counts)
        print_details(result, counts, args.revisions)
        print()
        print("----- summary (Markdown, for the README) -----")
        print(summary(machine, result, counts, args.revisions, rounds, note))
        print("----- end of summary -----")
        print(f"\ntotal benchmark time: {time.perf_counter() - started:.0f} s")
        return 0
    except (BenchError, subprocess.TimeoutExpired, pymysql.Error) as error:
        print(f"\nbenchmark error: {error}", file=sys.stderr)
        return 1
    finally:
        dbs.drop_all()
        if args.keep:
            print(f"project kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
