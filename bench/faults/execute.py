"""Run one schedule for one system (fencemigrate or the control) and inject its faults.

Each runner is a real process: the ``fencemigrate`` CLI (through :mod:`faults.launch`) or the
control (:mod:`faults.control`, plain Alembic in-process), started in a session of its own. Faults
are signals to that process (``SIGSTOP`` then ``SIGCONT``, ``SIGKILL``, ``SIGTERM``), the end of
the database's sessions (``pg_terminate_backend``, ``KILL CONNECTION``), a server restart or a
failover (:mod:`faults.failover`: such a schedule runs on a primary of its own with a streaming
standby). A runner that stopped itself at a point is found stopped in ``/proc`` and resumed after
the fault's duration. When every runner is done, the history is read and checked.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from faults import project
from faults.backends import Backend
from faults.checker import Violation, check, stale_usage_refusals
from faults.failover import FailoverServers, failover_servers
from faults.history import Outcome, Run
from faults.schedule import Action, Fault, Schedule, Step
from faults.zygote import Process, spawn

BENCH = Path(__file__).resolve().parents[1]
#: A schedule's processes are killed (and counted as hung) this long after its start.
SCHEDULE_DEADLINE_S = 120.0
#: What a loaded 2-core machine needs, beyond --wait and the revisions' sleeps, to start
#: Python, import Alembic and connect.
STARTUP_SLACK_S = 12.0
#: The statement after which the stop point "lease" stops a fencemigrate process (faults.launch):
#: the grant's UPDATE of the lease row, inside the grant's transaction.
SQL_POINTS = {"lease": r"lease\s+SET holder ="}


@dataclass
class Result:
    """One schedule for one system: the outcome, its violations and the faults that landed."""

    outcome: Outcome
    violations: list[Violation]
    injected: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    #: The schedule's element (faults.elements), for ``--verbose``: its runs, grants, writes and history.
    element_trace: list[str] = field(default_factory=list)
    #: How long the schedule's runners took, and its element (0 without one), in seconds.
    runners_s: float = 0.0
    element_s: float = 0.0


class Cancelled(Exception):
    """The schedule was interrupted (SIGINT, SIGTERM): start no more runners."""


class Processes:
    """The runners in flight, by step, and the pauses the harness owes them a SIGCONT for."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.current: dict[str, tuple[Process, Run]] = {}
        self.resume_at: dict[int, tuple[float, float, Run]] = {}
        self.cancelled = False

    def start(self, step: str, run: Run, argv: list[str], cwd: Path, env: dict[str, str]) -> Process:
        """Start a runner in a session of its own, unless the schedule was cancelled."""
        with self.lock:
            if self.cancelled:
                raise Cancelled
            process = spawn(argv, cwd, env)
            self.current[step] = (process, run)
        return process

    def cancel(self) -> None:
        """Kill every runner's session (a stopped one too) and refuse new ones."""
        with self.lock:
            self.cancelled = True
            pids = [process.pid for process, _ in self.current.values() if process.poll() is None]
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def target(self, step: str | None) -> tuple[Process, Run] | None:
        with self.lock:
            entry = self.current.get(step or "")
        if entry is None or entry[0].poll() is not None:
            return None
        return entry

    def pause(self, process: Process, run: Run, duration: float, already_stopped: bool) -> None:
        if not already_stopped:
            os.kill(process.pid, signal.SIGSTOP)
        with self.lock:
            self.resume_at[process.pid] = (time.monotonic() + duration, time.monotonic(), run)
        run.signals.append("STOP")

    def resume_due(self, force: bool = False) -> None:
        now = time.monotonic()
        with self.lock:
            due = [(pid, entry) for pid, entry in self.resume_at.items() if force or entry[0] <= now]
            for pid, _ in due:
                del self.resume_at[pid]
        for pid, (_, since, run) in due:
            run.stopped_s += now - since
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def is_stopped(pid: int) -> bool:
    """The process is in state T (stopped), per /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "T"


class ScheduleRun:
    """One schedule, one system, one fresh database."""

    def __init__(
        self,
        backend: Backend,
        system: str,
        schedule: Schedule,
        template: Path,
        workdir: Path,
        failover: FailoverServers | None = None,
    ) -> None:
        self.backend = backend
        self.failover = failover
        self.system = system
        self.schedule = schedule
        self.workdir = workdir / f"s{schedule.index:04d}-{system}"
        self.workdir.mkdir(parents=True)
        self.resource = f"faults/s{schedule.index}-{system}-{os.getpid()}"
        self.url = backend.create_database(self.workdir)
        self.processes = Processes()
        self.runs: list[Run] = []
        self.injected: Counter[str] = Counter()
        self.connection_faults = 0
        self.watch_error: BaseException | None = None
        self.moving = threading.Lock()
        self.pending_points: dict[str, Fault] = {f.step or "": f for f in schedule.faults if f.kind == "stop_at"}
        self.chain = project.chain(schedule.sleeps, schedule.autocommit_block and backend.has_autocommit_block)
        self.copy = project.renumbered_copy(self.chain[1], "r04", "r03")
        lease_url = backend.lease_url if system == "fencemigrate" else None
        self.checkouts = {
            name: project.checkout(
                template,
                self.workdir / directory,
                self.url,
                self.resource,
                self.chain,
                backend.fence_table,
                lease_url,
                schedule.per_migration,
            )
            for name, directory in (("main", "main"), ("S", "agent-S"))
        }
        backend.prepare(self.url, self.resource)
        if system == "fencemigrate":
            self.install_fence()

    # -- set-up -----------------------------------------------------------------------------------

    def install_fence(self) -> None:
        """``fencemigrate install``, then the trigger that copies grants into the history."""
        process = spawn([sys.executable, "-m", "faults.launch", "install"], self.checkouts["main"], self.env("setup"))
        output, _ = process.communicate(timeout=120)
        if process.returncode != 0:
            raise RuntimeError(f"fencemigrate install failed: {output}")
        self.backend.log_grants(self.url)

    def env(self, holder: str, token: int | None = None, point: str | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            PYTHONPATH=str(BENCH),
            PYTHONDONTWRITEBYTECODE="1",
            PYTHONUNBUFFERED="1",
            FAULTS_RESOURCE=self.resource,
            FAULTS_HOLDER=holder,
        )
        env.pop("FAULTS_TOKEN", None)
        if token is not None:
            env["FAULTS_TOKEN"] = str(token)
        if point in SQL_POINTS and self.system == "fencemigrate":
            env["FAULTS_STOP_SQL"] = SQL_POINTS[point]
        elif point:
            env["FAULTS_STOP_AT"] = point
        return env

    # -- commands -----------------------------------------------------------------------------------

    def argv(self, action: Action, holder: str, token: int | None) -> list[str]:
        ttl, wait = f"{self.schedule.ttl_s:g}s", f"{self.schedule.wait_s:g}s"
        if action.verb == "tokenless":
            return [str(Path(sys.executable).parent / "alembic"), *action.command.split()]
        if self.system == "fencemigrate":
            base = [sys.executable, "-m", "faults.launch"]
            if action.verb == "acquire":
                return [*base, "lease", "acquire", "--holder", holder, "--ttl", ttl, "--json"]
            options = ["--token", str(token)] if token is not None else ["--ttl", ttl, "--wait", wait]
            if action.preempt:
                options.append("--preempt")
            return [*base, *action.command.split(), "--holder", holder, *options]
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
        if self.backend.lease_url:
            base += ["--lease-url", self.backend.lease_url]
        if action.verb == "acquire":
            return [*base, "--ttl", f"{self.schedule.ttl_s}", "--acquire-only"]
        options = (
            ["--token", str(token)]
            if token is not None
            else ["--ttl", f"{self.schedule.ttl_s}", "--wait", f"{self.schedule.wait_s}"]
        )
        commands = ["downgrade r01", "upgrade head"] if action.command == "reapply r02" else [action.command]
        return [*base, *options, *(arg for command in commands for arg in ("--command", command))]

    def launch(self, step: Step, action: Action, token: int | None, expect_fenced: bool) -> Run:
        holder = f"agent-{step.name}"
        fault = self.pending_points.get(step.name)
        point = fault.point if fault else None
        argv = self.argv(action, holder, token if not action.leased else None)
        run_token = token if action.verb == "write" and not action.leased else None
        env_token = run_token if action.verb != "tokenless" else None
        env = self.env(holder, env_token, point)
        if action.verb == "tokenless":
            env["FAULTS_TOKEN"] = "none"
        run = Run(
            step.name,
            tuple(argv),
            holder,
            token=run_token,
            wait_s=self.schedule.wait_s if action.leased else None,
            expect_fenced=expect_fenced,
            tokenless=action.verb == "tokenless",
        )
        cwd = self.checkouts["S" if step.name == "S" else "main"]
        started = time.monotonic()
        process = self.processes.start(step.name, run, argv, cwd, env)
        self.runs.append(run)
        remaining = max(1.0, self.deadline - time.monotonic())
        try:
            run.output, _ = process.communicate(timeout=remaining)
        except subprocess.TimeoutExpired:
            run.hung = True
            self.processes.resume_due(force=True)
            os.kill(process.pid, signal.SIGKILL)
            run.output, _ = process.communicate()
        run.exit_code = process.returncode
        run.elapsed_s = time.monotonic() - started
        return run

    def run_step(self, step: Step) -> None:
        try:
            self.run_actions(step)
        except Cancelled:
            return

    def run_actions(self, step: Step) -> None:
        token: int | None = None
        self.sleep_until(step.start_s)
        for number, action in enumerate(step.actions):
            if number == len(step.actions) - 1 and step.pause_before_last_s:
                time.sleep(step.pause_before_last_s)
            if step.name == "S" and action.verb == "write" and token is None:
                return  # S never got its lease
            if step.name == "S" and number == 2 and self.schedule.follow_up == "renumbered":
                project.checkout_add(self.checkouts["S"], self.copy, self.backend.fence_table)
            with self.moving:  # not while a failover moves the database
                expect_fenced = (
                    step.name == "S" and number == 2 and token is not None and self.backend.max_grant(self.url) > token
                )
            run = self.launch(step, action, token, expect_fenced)
            if action.verb == "acquire":
                token = run.granted = parse_token(run.output) if run.exit_code == 0 else None

    def sleep_until(self, offset: float) -> None:
        delay = self.started + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    # -- faults ---------------------------------------------------------------------------------------

    def inject(self, fault: Fault) -> None:
        if fault.kind == "terminate_backend":
            killed = self.backend.kill_connections(self.url)
            if killed:
                self.injected[fault.kind] += 1
                self.connection_faults += 1
            return
        if fault.kind == "restart":
            self.backend.restart_server()
            self.injected[fault.kind] += 1
            self.connection_faults += 1
            return
        if fault.kind == "hold_wal":
            assert self.failover is not None
            self.failover.hold_wal()
            return
        if fault.kind == "failover":
            self.fail_over()
            return
        entry = self.processes.target(fault.step)
        if entry is None:
            return
        process, run = entry
        try:
            if fault.kind == "stop":
                self.processes.pause(process, run, fault.duration_s, already_stopped=False)
            else:
                os.kill(process.pid, signal.SIGKILL if fault.kind == "kill" else signal.SIGTERM)
                run.signals.append("KILL" if fault.kind == "kill" else "TERM")
        except ProcessLookupError:
            return
        self.injected[fault.kind] += 1

    def fail_over(self) -> None:
        """Primary down, standby promoted: the database, the checkouts and the control's URL move to it."""
        assert self.failover is not None
        with self.moving:
            self.url = self.failover.fail_over(self.url)
            for checkout in self.checkouts.values():
                project.repoint(checkout, self.url)
        self.injected["failover"] += 1
        self.connection_faults += 1

    def watch(self, done: threading.Event) -> None:
        """Run :meth:`watch_faults`; an error (a failover that failed) is raised by :meth:`execute`."""
        try:
            self.watch_faults(done)
        except BaseException as error:
            self.watch_error = error
            self.processes.resume_due(force=True)

    def watch_faults(self, done: threading.Event) -> None:
        """Apply the timed faults, resume pauses that are due, and catch self-stopped runners."""
        timed = [fault for fault in sorted(timed_faults(self.schedule), key=lambda f: f.at_s) if not at_start(fault)]
        while not done.is_set():
            now = time.monotonic() - self.started
            while timed and timed[0].at_s <= now:
                self.inject(timed.pop(0))
            for step, fault in list(self.pending_points.items()):
                entry = self.processes.target(step)
                if entry and entry[0].pid not in self.processes.resume_at and is_stopped(entry[0].pid):
                    self.processes.pause(entry[0], entry[1], fault.duration_s, already_stopped=True)
                    self.injected[f"stop_at {fault.point}"] += 1
            self.processes.resume_due()
            time.sleep(0.02)
        self.processes.resume_due(force=True)

    # -- the whole schedule ---------------------------------------------------------------------------

    def execute(self) -> Result:
        for fault in timed_faults(self.schedule):
            if at_start(fault):
                self.inject(fault)
        self.started = time.monotonic()
        self.deadline = self.started + SCHEDULE_DEADLINE_S
        done = threading.Event()
        watcher = threading.Thread(target=self.watch, args=(done,), daemon=True)
        watcher.start()
        threads = [threading.Thread(target=self.run_step, args=(step,), daemon=True) for step in self.schedule.steps]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                thread.join()
        except BaseException:
            self.processes.cancel()
            raise
        finally:
            done.set()
        watcher.join()
        self.processes.resume_due(force=True)
        if self.watch_error is not None:
            raise self.watch_error
        chain = {revision.rev: revision.down for revision in [*self.chain, self.copy]}
        outcome = Outcome(
            self.system,
            self.backend.events(self.url),
            self.runs,
            self.backend.version_heads(self.url),
            self.backend.ledger(self.url) if self.system == "fencemigrate" else None,
            chain,
            self.connection_faults + sum(a.preempt for s in self.schedule.steps for a in s.actions),
        )
        longest_pause = max((f.duration_s for f in self.schedule.faults), default=0.0)
        work_bound = sum(self.schedule.sleeps) * 3 + longest_pause + STARTUP_SLACK_S
        return Result(outcome, check(outcome, work_bound), self.injected, stale_usage_refusals(self.runs))

    def close(self) -> None:
        if self.failover is None:  # a failover's servers go with their directories
            self.backend.drop_database(self.url)


def timed_faults(schedule: Schedule) -> Iterator[Fault]:
    """The faults placed by time; a failover is preceded by holding the WAL back for its ``duration_s``."""
    for fault in schedule.faults:
        if fault.kind == "failover":
            yield Fault("hold_wal", max(0.0, fault.at_s - fault.duration_s))
        if fault.kind != "stop_at":
            yield fault


def at_start(fault: Fault) -> bool:
    """A WAL hold from the schedule's first instant: in place before the first runner starts (by the
    fault watcher it would race the first grant, which a forked runner makes within 0.1 s)."""
    return fault.kind == "hold_wal" and fault.at_s == 0.0


def parse_token(output: str) -> int | None:
    """The token of ``lease acquire --json`` or of the control's ``token N`` line."""
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                return int(json.loads(line)["lease"]["token"])
            except (ValueError, KeyError, TypeError):
                continue
        if line.startswith("token "):
            return int(line.split()[1])
    return None


#: An element's violations, notes, trace and duration.
ElementResult = tuple[list[Violation], list[str], list[str], float]


class Beside(threading.Thread):
    """Work run in a thread beside the schedule's runners; :meth:`result` re-raises its error."""

    def __init__(self, work: Callable[[], ElementResult]) -> None:
        super().__init__(daemon=True)
        self.work = work
        self.value: ElementResult | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.value = self.work()
        except BaseException as error:  # re-raised by result()
            self.error = error

    def result(self) -> ElementResult:
        self.join()
        if self.error is not None:
            raise self.error
        assert self.value is not None
        return self.value


def run_schedule(
    backend: Backend,
    system: str,
    schedule: Schedule,
    template: Path,
    workdir: Path,
    keep: bool = False,
    beside: bool = False,
) -> Result:
    """Run ``schedule`` for ``system`` on a fresh database of ``backend`` and check it; a schedule with a
    failover on a new primary and standby of its own instead (:mod:`faults.failover`). Its element
    (:mod:`faults.elements`), if it has one, runs on databases of its own: after the runners, or
    with ``beside`` at the same time (unless a fault restarts the server they share)."""
    element = schedule.element

    def run_the_element() -> ElementResult:
        from faults.elements import run_element

        assert element is not None
        started = time.monotonic()
        found = run_element(backend, system, element, template, workdir, schedule.index, keep)
        return (*found, time.monotonic() - started)

    thread = None
    if element is not None and beside and not any(fault.kind == "restart" for fault in schedule.faults):
        thread = Beside(run_the_element)
        thread.start()
    with ExitStack() as servers:
        failover = None
        on = backend
        if any(fault.kind == "failover" for fault in schedule.faults):
            failover = servers.enter_context(failover_servers())
            on = failover.backend
        started = time.monotonic()
        runner = ScheduleRun(on, system, schedule, template, workdir, failover)
        try:
            result = runner.execute()
            result.runners_s = time.monotonic() - started
        finally:
            if not keep:
                runner.close()
    if element is not None:
        violations, notes, trace, result.element_s = thread.result() if thread else run_the_element()
        name = f"{element.kind}:{element.variant}"
        result.violations += [Violation(v.prop, f"element {name}: {v.detail}") for v in violations]
        result.injected[f"element {name}"] += 1
        result.element_trace = [*trace, *(f"    note: {note}" for note in notes)]
    return result
