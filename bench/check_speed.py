"""Benchmark: is ``fencemigrate check`` fast enough to run on every commit?

Times ``fencemigrate check --no-db`` (the lint alone: no database) as a subprocess, interpreter start and imports
included, on a generated directory of revisions (default 300), median of N rounds; in the same
rounds, for scale, ``alembic heads`` on the same directory (which imports every revision file)
and ``fencemigrate --help`` (interpreter start and fencemigrate's imports, nothing else).
Target from the issue: ``check`` under 2 s (PASS/FAIL).

Usage (see bench/README.md)::

    bash bench/run --check [--revisions N] [--rounds N] [--keep]
    .venv/bin/python bench/check_speed.py [--revisions N] [--rounds N] [--keep]

Needs no database server. Exit status 0 whatever the verdict (this is a benchmark, not a test);
1 if a run failed or printed something else than a clean check; 2 on bad usage.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from common import host_line

TARGET_SECONDS = 2.0
DEFAULT_REVISIONS = 300
DEFAULT_ROUNDS = 7
COMMAND_TIMEOUT = 120.0
BIN = Path(sys.executable).parent

CHECK = "fencemigrate check --no-db"
HEADS = "alembic heads"
START = "fencemigrate --help"
SERIES = (CHECK, HEADS, START)
NO_DB_NOTE = "--no-db: neither the database nor the models compared (FM408, what alembic check does)"


class BenchError(RuntimeError):
    """A run failed or printed the wrong thing: its time must not count."""


@dataclass
class Series:
    """Wall and CPU seconds of one command's timed runs."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


def revision_source(number: int) -> str:
    """Revision ``number`` as ``alembic revision`` writes one: a table with an index, and its downgrade."""
    revision = f"{number:04d}"
    down = None if number == 1 else f"{number - 1:04d}"
    return textwrap.dedent(f'''\
        """create table t_{revision}

        Revision ID: {revision}
        Revises: {down or ""}
        Create Date: 2026-11-29 14:26:00.000000

        """
        from typing import Sequence, Union

        from alembic import op
        import sqlalchemy as sa


        # revision identifiers, used by Alembic.
        revision: str = {revision!r}
        down_revision: Union[str, Sequence[str], None] = {down!r}
        branch_labels: Union[str, Sequence[str], None] = None
        depends_on: Union[str, Sequence[str], None] = None


        def upgrade() -> None:
            """Upgrade schema."""
            op.create_table(
                "t_{revision}",
                sa.Column("id", sa.Integer(), nullable=False),
                sa.Column("name", sa.Text(), nullable=False),
                sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()")),
                sa.PrimaryKeyConstraint("id"),
            )
            op.create_index("ix_t_{revision}_name", "t_{revision}", ["name"])


        def downgrade() -> None:
            """Downgrade schema."""
            op.drop_index("ix_t_{revision}_name", table_name="t_{revision}")
            op.drop_table("t_{revision}")
        ''')


def make_project(directory: Path, revisions: int) -> None:
    """A real ``alembic init -t generic`` project with a chain of ``revisions`` revision files."""
    run([str(BIN / "alembic"), "init", "-t", "generic", "migrations"], directory)
    versions = directory / "migrations" / "versions"
    for number in range(1, revisions + 1):
        (versions / f"{number:04d}_create_table_t_{number:04d}.py").write_text(revision_source(number))


def run(argv: list[str], directory: Path) -> tuple[float, float, str]:
    """Run ``argv`` in ``directory``: wall seconds, CPU seconds (user + sys of the child), stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    completed = subprocess.run(
        argv,
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
        env={"PATH": str(BIN), "HOME": str(directory)},
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise BenchError(f"{' '.join(argv)} exited {completed.returncode}:\n{completed.stdout}{completed.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, completed.stdout


def timed(name: str, directory: Path, revisions: int) -> tuple[float, float]:
    """One run of command ``name``, its output checked."""
    argv = {
        CHECK: [str(BIN / "fencemigrate"), "check", "--no-db"],
        HEADS: [str(BIN / "alembic"), "heads"],
        START: [str(BIN / "fencemigrate"), "--help"],
    }[name]
    wall, cpu, stdout = run(argv, directory)
    expected = {
        CHECK: f"no problems found in {revisions} revision files; {NO_DB_NOTE}\n",
        HEADS: f"{revisions:04d} (head)\n",
    }.get(name)
    if expected is not None and stdout != expected:
        raise BenchError(f"{name} printed {stdout!r}, expected {expected!r}")
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--revisions", type=int, default=DEFAULT_REVISIONS, help="revision files (default 300)")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="timed rounds (default 7)")
    parser.add_argument("--keep", action="store_true", help="keep the generated project")
    options = parser.parse_args()
    if options.revisions < 1 or options.rounds < 1:
        parser.error("--revisions and --rounds must be at least 1")

    directory = Path(tempfile.mkdtemp(prefix="fm_check_bench_"))
    try:
        make_project(directory, options.revisions)
        print(f"project: {directory} ({options.revisions} revisions)")
        results = {name: Series() for name in SERIES}
        for name in SERIES:  # warm-up, untimed: alembic heads writes the revisions' __pycache__
            timed(name, directory, options.revisions)
        for round_number in range(options.rounds):
            order = SERIES[round_number % len(SERIES) :] + SERIES[: round_number % len(SERIES)]
            for name in order:
                wall, cpu = timed(name, directory, options.revisions)
                results[name].wall.append(wall)
                results[name].cpu.append(cpu)
            print(
                f"round {round_number + 1}: " + ", ".join(f"{name} {results[name].wall[-1]:.3f} s" for name in SERIES)
            )
    except BenchError as error:
        print(f"FAILED: {error}", file=sys.stderr)
        return 1
    finally:
        if options.keep:
            print(f"kept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)
    report(results, options)
    return 0


def report(results: dict[str, Series], options: argparse.Namespace) -> None:
    """The table, the ratio and the verdict, then a Markdown summary for the README."""
    median = {name: statistics.median(series.wall) for name, series in results.items()}
    cpu = {name: statistics.median(series.cpu) for name, series in results.items()}
    ratio = median[CHECK] / median[HEADS]
    verdict = "PASS" if median[CHECK] < TARGET_SECONDS else "FAIL"
    print()
    print(f"{'command':<22} {'median':>8} {'min':>8} {'max':>8} {'cpu':>8}")
    for name, series in results.items():
        print(
            f"{name:<22} {median[name]:>7.3f}s {min(series.wall):>7.3f}s {max(series.wall):>7.3f}s {cpu[name]:>7.3f}s"
        )
    print(f"\n{CHECK} / {HEADS}: {ratio:.2f}")
    print(
        f"{CHECK} on {options.revisions} revisions: {median[CHECK]:.2f} s, target < {TARGET_SECONDS:.0f} s: {verdict}"
    )
    versions = ", ".join(f"{name} {metadata.version(name)}" for name in ("fencemigrate", "alembic", "SQLAlchemy"))
    print("\n----- summary (Markdown, for the README) -----")
    print(f"Machine: {host_line()}; {versions}. Median of {options.rounds} rounds.\n")
    print(f"| {options.revisions} revisions | median | CPU | target < {TARGET_SECONDS:.0f} s |")
    print("|---|---:|---:|---|")
    print(f"| `fencemigrate check` | {median[CHECK]:.2f} s | {cpu[CHECK]:.2f} s | {verdict.lower()} |")
    print(f"| `alembic heads` (for scale) | {median[HEADS]:.2f} s | {cpu[HEADS]:.2f} s | |")
    print(f"| `fencemigrate --help` (start and imports) | {median[START]:.2f} s | {cpu[START]:.2f} s | |")
    print(f"\nratio check / heads: {ratio:.2f}")
    print("----- end of summary -----")


if __name__ == "__main__":
    sys.exit(main())
