"""The epoch note's eight traces and its three open counterexamples, mapped onto migrations.

design-notes/001: a planner sends ``tool_call(7, epoch=1)``; a deadline fires, bumps the fence to
epoch 2 and opens compensation; results arrive late. Here the tool call is revision ``r07``:

* ``fence_and_send`` -- agent A is granted the lease (epoch 1 = its token);
* ``on_timeout`` -- A's lease expires and the next agent is granted it (a new, higher token);
* ``on_result(success)`` -- the epoch's holder runs ``upgrade head --token T`` (r07 lands);
* ``on_result(compensate_ok)`` -- the epoch's holder runs ``downgrade base --token T``.

A result under an epoch that is no longer the newest is a **ghost** (the late success of the
note). The property is the note's: no commit under an epoch after a newer one was opened (the
checker's ``stale-commit``, which also refuses a commit that names no epoch), and the change is
applied at most once. fencemigrate runs the real CLI; the naive control is plain Alembic behind
the hand-rolled lease (:mod:`faults.control`), which hands the token to nobody who checks it.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from faults import project
from faults.backends import Backend
from faults.checker import Violation, double_applies, stale_commits
from faults.execute import BENCH, SQL_POINTS, is_stopped, parse_token
from faults.zygote import Process, spawn

TTL_S = 1.0
CALL = project.Revision("r07", None, "c07", "t07")


@dataclass(frozen=True)
class Op:
    """One event of a trace: ``grant``, ``expire``, ``write``, ``tokenless``, ``stopped`` (wait until an
    asynchronous process has stopped itself), ``resume``, ``join``, ``sleep``.

    ``holder`` names the agent; ``label`` names an asynchronous process (``run_async``) for
    ``resume`` / ``join``; ``stop`` is a point where it stops itself; ``forge`` writes under the
    token the pending grant will issue (the last one plus one) instead of a granted one.
    """

    kind: str
    holder: str = ""
    command: str = ""
    label: str = ""
    run_async: bool = False
    stop: str | None = None
    wait_s: float = 0.0
    preempt: bool = False
    forge: bool = False
    seconds: float = 0.0
    if_no_token: bool = False


def grant(holder: str, **options: object) -> Op:
    return Op("grant", holder, **options)  # type: ignore[arg-type]


def success(holder: str) -> Op:
    return Op("write", holder, "upgrade head")


def compensate(holder: str, **options: object) -> Op:
    return Op("write", holder, "downgrade base", **options)  # type: ignore[arg-type]


EXPIRE = Op("expire")


@dataclass(frozen=True)
class Trace:
    """A trace and whether it contains a ghost (a result under a superseded epoch)."""

    ops: tuple[Op, ...]
    ghost: bool
    backends: tuple[str, ...] = ("postgresql", "sqlite")


TRACES: dict[str, Trace] = {
    "happy_success": Trace((grant("A"), success("A")), ghost=False),
    "timeout_then_compensate": Trace((grant("A"), EXPIRE, grant("B"), compensate("B")), ghost=False),
    "late_success_after_compensate": Trace((grant("A"), EXPIRE, grant("B"), success("A"), compensate("B")), ghost=True),
    "duplicate_success_same_epoch": Trace((grant("A"), success("A"), success("A")), ghost=False),
    "compensate_then_late_success": Trace((grant("A"), EXPIRE, grant("B"), compensate("B"), success("A")), ghost=True),
    "timeout_without_compensate_result": Trace((grant("A"), EXPIRE, grant("B")), ghost=False),
    "ghost_then_duplicate_compensate": Trace(
        (grant("A"), EXPIRE, grant("B"), success("A"), compensate("B"), compensate("B")), ghost=True
    ),
    "success_before_timeout_ignored": Trace((grant("A"), success("A"), EXPIRE, grant("B")), ghost=False),
}

COUNTEREXAMPLES: dict[str, Trace] = {
    # A compensation that arrives before the timeout's bump is durable: B's grant stops inside its
    # lease transaction, B's compensation is sent meanwhile under the token that grant will issue,
    # then the grant commits and A's success arrives late.
    "compensate_before_bump_durable": Trace(
        (
            grant("A"),
            success("A"),
            EXPIRE,
            grant("B", label="grant-B", run_async=True, stop="lease"),
            Op("stopped", label="grant-B"),
            compensate("B", label="comp-B", run_async=True, forge=True),
            Op("sleep", seconds=1.0),
            Op("resume", label="grant-B"),
            Op("join", label="grant-B"),
            Op("join", label="comp-B"),
            success("A"),
        ),
        ghost=True,
    ),
    # A success that echoes no epoch: plain `alembic upgrade head` after the timeout.
    "success_without_epoch": Trace((grant("A"), EXPIRE, grant("B"), Op("tokenless", "A", "upgrade head")), ghost=True),
    # A second timeout opens epoch 3 while epoch 2's compensation is in flight (stopped in its
    # transaction, right after its claim); C's grant waits at most 1 s, then epoch 2's write resumes;
    # C is granted after it.
    "second_timeout_while_epoch2_inflight": Trace(
        (
            grant("A"),
            success("A"),
            EXPIRE,
            grant("B"),
            compensate("B", label="comp-B", run_async=True, stop="r07:start-down"),
            Op("stopped", label="comp-B"),
            EXPIRE,
            grant("C", wait_s=1.0),
            Op("resume", label="comp-B"),
            Op("join", label="comp-B"),
            grant("C", if_no_token=True),
            compensate("C"),
        ),
        ghost=True,
    ),
    # The same with --preempt: C's grant ends epoch 2's in-flight transaction.
    "second_timeout_preempts_epoch2": Trace(
        (
            grant("A"),
            success("A"),
            EXPIRE,
            grant("B"),
            compensate("B", label="comp-B", run_async=True, stop="r07:start-down"),
            Op("stopped", label="comp-B"),
            EXPIRE,
            grant("C", wait_s=1.0, preempt=True),
            Op("resume", label="comp-B"),
            Op("join", label="comp-B"),
            grant("C", if_no_token=True),
            compensate("C"),
        ),
        ghost=True,
        backends=("postgresql",),
    ),
}


@dataclass
class TraceResult:
    """What one trace left behind for one system."""

    name: str
    system: str
    violations: list[Violation]
    log: list[str] = field(default_factory=list)

    @property
    def broken(self) -> bool:
        return bool(self.violations)


class TraceRun:
    """One trace, one system, one fresh database; events in the trace's order."""

    def __init__(
        self, backend: Backend, system: str, template: Path, workdir: Path, name: str, env_template: Path | None = None
    ) -> None:
        self.backend, self.system, self.name = backend, system, name
        self.dir = Path(tempfile.mkdtemp(prefix=f"{backend.name}-{name}-{system}-", dir=workdir))
        self.url = backend.create_database(self.dir)
        self.resource = f"calls/7-{os.getpid()}-{name}"
        self.checkout = project.checkout(
            env_template or template, self.dir / "checkout", self.url, self.resource, [CALL], backend.fence_table
        )
        backend.prepare(self.url, self.resource)
        if system == "fencemigrate":
            self.run(["install"], "setup")
            backend.log_grants(self.url)
        self.tokens: dict[str, int] = {}
        self.last_token = 0
        self.expires = 0.0
        self.pending: dict[str, tuple[Process, Op]] = {}
        self.log: list[str] = []

    def env(self, holder: str, token: int | None, stop: str | None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            PYTHONPATH=str(BENCH),
            PYTHONDONTWRITEBYTECODE="1",
            FAULTS_RESOURCE=self.resource,
            FAULTS_HOLDER=f"agent-{holder}",
        )
        env.pop("FAULTS_TOKEN", None)
        if token is not None:
            env["FAULTS_TOKEN"] = str(token)
        if stop in SQL_POINTS and self.system == "fencemigrate":
            env["FAULTS_STOP_SQL"] = SQL_POINTS[stop]
        elif stop:
            env["FAULTS_STOP_AT"] = stop
        return env

    def argv(self, op: Op, token: int | None) -> list[str]:
        holder = f"agent-{op.holder}"
        if op.kind == "tokenless":
            return [str(Path(sys.executable).parent / "alembic"), *op.command.split()]
        if self.system == "fencemigrate":
            base = [sys.executable, "-m", "faults.launch"]
            if op.kind == "grant":
                extra = ["--wait", f"{op.wait_s:g}s"] + (["--preempt"] if op.preempt else [])
                return [*base, "lease", "acquire", "--holder", holder, "--ttl", f"{TTL_S:g}s", "--json", *extra]
            return [*base, *op.command.split(), "--token", str(token), "--holder", holder]
        base = [
            sys.executable,
            "-m",
            "faults.control",
            "--url",
            self.url,
            "--resource",
            self.resource,
            "--holder",
            holder,
        ]
        if op.kind == "grant":
            return [*base, "--ttl", str(TTL_S), "--wait", str(op.wait_s), "--acquire-only"]
        return [*base, "--token", str(token), "--command", op.command]

    def run(self, args: list[str], holder: str) -> None:
        """``python -m faults.launch ARGS``, to its end."""
        spawn([sys.executable, "-m", "faults.launch", *args], self.checkout, self.env(holder, None, None)).communicate(
            timeout=120
        )

    def start(self, op: Op) -> Process:
        token = None
        if op.kind == "write":
            token = self.last_token + 1 if op.forge else self.tokens.get(op.holder)
        argv = self.argv(op, token)
        env = self.env(op.holder, token, op.stop)
        if op.kind == "tokenless":
            env["FAULTS_TOKEN"] = "none"
        return spawn(argv, self.checkout, env)

    def finish(self, process: Process, op: Op) -> None:
        output, _ = process.communicate(timeout=120)
        self.log.append(
            f"{op.kind} {op.holder} {op.command} -> {process.returncode}: "
            + " | ".join(output.strip().splitlines()[-2:])
        )
        if op.kind == "grant" and process.returncode == 0:
            token = parse_token(output)
            if token is not None:
                self.tokens[op.holder] = token
                self.last_token = max(self.last_token, token)
                self.expires = time.monotonic() + TTL_S

    def step(self, op: Op) -> None:
        if op.kind == "expire":
            time.sleep(max(0.0, self.expires - time.monotonic()) + 0.3)
        elif op.kind == "sleep":
            time.sleep(op.seconds)
        elif op.kind == "stopped":
            self.log.append(f"{op.label} stopped: {self.await_stop(self.pending[op.label][0])}")
        elif op.kind == "resume":
            process, _ = self.pending[op.label]
            if self.await_stop(process):
                os.kill(process.pid, signal.SIGCONT)
        elif op.kind == "join":
            self.finish(*self.pending.pop(op.label))
        elif op.if_no_token and op.holder in self.tokens:
            return
        elif op.run_async:
            self.pending[op.label] = (self.start(op), op)
        else:
            self.finish(self.start(op), op)

    @staticmethod
    def await_stop(process: Process) -> bool:
        """Wait (at most 60 s) until ``process`` has stopped itself; False if it ended instead."""
        deadline = time.monotonic() + 60
        while process.poll() is None and time.monotonic() < deadline:
            if is_stopped(process.pid):
                return True
            time.sleep(0.02)
        return False

    def execute(self, trace: Trace) -> TraceResult:
        try:
            for op in trace.ops:
                self.step(op)
        finally:
            for process, _ in self.pending.values():
                os.kill(process.pid, signal.SIGCONT)
                process.kill()
        events = self.backend.events(self.url)
        self.log += [f"event {e.kind} token={e.token} {e.holder} {e.revision or ''}" for e in events]
        return TraceResult(self.name, self.system, stale_commits(events) + double_applies(events), self.log)

    def close(self) -> None:
        self.backend.drop_database(self.url)


def run_trace(
    backend: Backend, system: str, name: str, template: Path, workdir: Path, env_template: Path | None = None
) -> TraceResult:
    """Run trace ``name`` (of TRACES or COUNTEREXAMPLES) for ``system`` on a fresh database."""
    trace = {**TRACES, **COUNTEREXAMPLES}[name]
    runner = TraceRun(backend, system, template, workdir, name, env_template)
    try:
        return runner.execute(trace)
    finally:
        runner.close()
