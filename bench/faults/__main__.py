"""``python -m faults --seed S --schedules N --budget SECONDS [--backend ...] [--jobs N]``: the harness's command line.

Server addresses come from the same variables as the tests (``FENCEMIGRATE_TEST_PG_HOST`` /
``_PG_PORT``, ``FENCEMIGRATE_TEST_MYSQL_URL``, ``FENCEMIGRATE_TEST_REDIS_URL``); ``bash bench/faults/run``
starts throwaway servers and sets them. With ``--jobs N`` the schedules run in N shards
(:mod:`faults.shards`), each ``bash bench/faults/run --shard K/N`` with servers of its own. Exit
status 0 only when fencemigrate kept every property and the control broke at least one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from faults import schedule as schedules
from faults.backends import Backend, workdir
from faults.execute import Result, run_schedule
from faults.project import alembic_template
from faults.schedule import ELEMENTS
from faults.shards import run_shards
from faults.summary import Summary, describe, verdict

BACKENDS = ("postgresql", "sqlite", "mariadb", "redis")


def make_backend(name: str, pgdata: str | None) -> Backend:
    """The backend ``name``, pointed at the servers of the environment."""
    pg = (
        f"postgresql+psycopg://postgres@{os.environ.get('FENCEMIGRATE_TEST_PG_HOST', '127.0.0.1')}:"
        f"{os.environ.get('FENCEMIGRATE_TEST_PG_PORT', '5432')}"
    )
    if name == "sqlite":
        return Backend("sqlite")
    if name == "mariadb":
        return Backend("mariadb", server_url=os.environ["FENCEMIGRATE_TEST_MYSQL_URL"])
    backend = Backend(
        name,
        server_url=pg,
        pgdata=pgdata,
        lease_url=os.environ["FENCEMIGRATE_TEST_REDIS_URL"] if name == "redis" else None,
    )
    backend.enable_commit_timestamps()
    return backend


def print_trace(system: str, result: Result) -> None:
    """Every run and every committed event of one schedule (``--verbose``)."""
    print(f"--- {system}")
    for run in result.outcome.runs:
        print(
            f"  {run.step} {' '.join(run.argv[3:])} -> {run.exit_code} in {run.elapsed_s:.1f}s "
            f"(stopped {run.stopped_s:.1f}s, {','.join(run.signals) or 'no signal'})"
        )
        print("    " + "\n    ".join(run.output.strip().splitlines()[-3:]))
    for event in result.outcome.events:
        print(f"  event {event.kind} token={event.token} {event.holder} {event.revision or ''}")
    print(f"  heads {result.outcome.version_heads} ledger {result.outcome.ledger}")
    for line in result.element_trace:
        print(line)
    for violation in result.violations:
        print(f"  VIOLATION {violation.prop}: {violation.detail}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/faults/run", description=__doc__)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--schedules", type=int, default=20, help="schedules per run (each on one backend)")
    parser.add_argument("--start", type=int, default=0, help="number of the first schedule (to replay one)")
    parser.add_argument("--budget", type=float, default=0, help="stop starting schedules after SECONDS (0: none)")
    parser.add_argument(
        "--backend", default="postgresql,sqlite", help="comma-separated, or all: " + ", ".join(BACKENDS)
    )
    parser.add_argument(
        "--with-tokenless", action="store_true", help="add a plain `alembic downgrade -1` (no token) to every schedule"
    )
    parser.add_argument(
        "--elements",
        type=element_list,
        default=(),
        help="add one of these schedule elements to every schedule (comma-separated, or all: "
        + ", ".join(ELEMENTS)
        + "; each where its backend runs it)",
    )
    parser.add_argument(
        "--elements-beside",
        action="store_true",
        help="run each element at the same time as the schedule's runners (not beside a server restart)",
    )
    parser.add_argument("--restarts", action="store_true", help="also restart the PostgreSQL server as a fault")
    parser.add_argument(
        "--failovers",
        action="store_true",
        help="also fail PostgreSQL over to a streaming standby that missed the last commits",
    )
    parser.add_argument("--pgdata", help="PostgreSQL's data directory (default: asked from the server)")
    parser.add_argument("--keep", action="store_true", help="keep every schedule's databases and projects")
    parser.add_argument("--verbose", action="store_true", help="print each failing run's output")
    parser.add_argument(
        "--jobs", type=int, default=1, help="run the schedules in N shards at once, each with servers of its own"
    )
    parser.add_argument(
        "--shard", type=shard_of, help="K/N: run only the schedules i with i %% N == K (what --jobs starts)"
    )
    parser.add_argument("--summary-json", type=Path, help="write the figures to this file as JSON (a shard's result)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    if args.jobs > 1 and args.shard is None and args.pgdata:
        parser.error("--pgdata cannot be given with --jobs: each shard starts a PostgreSQL server of its own")
    return args


def element_list(value: str) -> tuple[str, ...]:
    """``all`` or comma-separated names of faults.schedule.ELEMENTS."""
    names = tuple(ELEMENTS) if value == "all" else tuple(name for name in value.split(",") if name)
    unknown = [name for name in names if name not in ELEMENTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown element {', '.join(unknown)}: choose from {', '.join(ELEMENTS)}")
    return names


def shard_of(value: str) -> tuple[int, int]:
    """``K/N`` with 0 <= K < N."""
    try:
        number, count = (int(part) for part in value.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected K/N, got {value!r}") from None
    if not 0 <= number < count:
        raise argparse.ArgumentTypeError(f"expected 0 <= K < N, got {value!r}")
    return number, count


def shard_indices(start: int, count: int, shard: tuple[int, int] | None) -> range:
    """The schedules i of ``[start, start + count)`` with i % N == K for shard (K, N); all of them for None."""
    if shard is None:
        return range(start, start + count)
    number, shards = shard
    return range(start + (number - start) % shards, start + count, shards)


def run_harness(args: argparse.Namespace, backends: list[Backend]) -> Summary:
    """Run the schedules (round robin over ``backends``) until ``--schedules`` or ``--budget`` runs out."""
    scratch = workdir()
    template = alembic_template(scratch)
    summary = Summary()
    started = time.monotonic()
    try:
        for ran, index in enumerate(shard_indices(args.start, args.schedules, args.shard)):
            if args.budget and time.monotonic() - started > args.budget:
                print(f"budget of {args.budget:g} s spent after {ran} schedules")
                break
            backend = backends[index % len(backends)]
            plan = schedules.generate(
                args.seed,
                index,
                preempt=backend.can_preempt,
                kill_connections=backend.can_kill_connections,
                restart=args.restarts and backend.can_restart,
                autocommit_block=backend.has_autocommit_block,
                tokenless=args.with_tokenless,
                failover=args.failovers and backend.can_fail_over,
                elements=tuple(name for name in args.elements if name in backend.elements),
            )
            line = [
                f"#{index} {backend.name} ttl={plan.ttl_s:g}s follow-up={plan.follow_up} "
                + ("per-migration " if plan.per_migration else "")
                + f"faults={','.join(f.kind + (':' + f.point if f.point else '') for f in plan.faults)}"
                + (f" element={plan.element.kind}:{plan.element.variant}" if plan.element else "")
            ]
            for system in ("fencemigrate", "control"):
                result = run_schedule(
                    backend, system, plan, template, scratch, keep=args.keep, beside=args.elements_beside
                )
                summary.add(backend.name, index, system, result)
                took = f"{result.runners_s:.0f}s" + (f"+{result.element_s:.0f}s" if plan.element else "")
                line.append(f"{system} ({took}): {describe(result.violations)}")
                if args.verbose:
                    print_trace(system, result)
            print("  ".join(line), flush=True)
    finally:  # also when interrupted
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    print(f"--- seed {args.seed}, {time.monotonic() - started:.0f} s")
    return summary


def interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM as SIGINT: unwind, so that the runners in flight are killed (and a shard's servers stopped)."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """The command: run, print the figures, exit 0 only on fencemigrate clean and the control broken."""
    raw = sys.argv[1:] if argv is None else argv
    args = parse_args(raw)
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored (`&`)
    if args.jobs > 1 and args.shard is None:
        return run_shards(raw, min(args.jobs, max(args.schedules, 1)))  # no shard without a schedule
    names = BACKENDS if args.backend == "all" else tuple(args.backend.split(","))
    summary = run_harness(args, [make_backend(name, args.pgdata) for name in names])
    if args.summary_json:
        args.summary_json.write_text(json.dumps(summary.to_json()))
    if args.shard is not None:
        return 0  # the parent merges the shards and gives the verdict
    for text_line in summary.lines():
        print(text_line)
    passed, message = verdict(summary)
    print(message)
    return 0 if passed else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
