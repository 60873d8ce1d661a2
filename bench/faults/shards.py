"""``--jobs N``: the schedules in N shards at once, each ``bash bench/faults/run --shard K/N``.

Faults restart PostgreSQL and end every session on a database, so shards share no server: each
starts its own PostgreSQL, MariaDB and Redis (and stops them when it ends) and has its own scratch
directory. Shard K runs the schedules i with i % N == K (on backend i % len(backends), as a serial
run), prints its progress lines (relayed here prefixed ``[K/N]``) and writes its figures as JSON.
The parent merges them (:func:`faults.summary.merge`) and gives the serial run's verdict. A shard
that fails (non-zero exit, servers that did not start, no figures) stops the others and fails the
run. SIGINT or SIGTERM stops every shard, each of which stops its servers.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from faults.summary import Summary, merge, verdict

RUN = Path(__file__).resolve().with_name("run")
#: The line ``run --shard`` prints once its servers are up (and their stop is on its EXIT trap).
READY = "shard servers up:"
#: How long a shard may take to stop its three servers after SIGTERM.
STOP_GRACE_S = 120.0
#: The exit status of a run that did not complete (a shard failed or was interrupted).
INCOMPLETE = 2


@dataclass
class Shard:
    """One ``run --shard K/N`` process, in a session of its own."""

    number: int
    jobs: int
    process: subprocess.Popen[str]
    result: Path
    ready: threading.Event = field(default_factory=threading.Event)

    @property
    def name(self) -> str:
        return f"{self.number}/{self.jobs}"

    def relay(self, lock: threading.Lock) -> None:
        """Print the shard's output, each line prefixed with its number."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(READY):
                self.ready.set()
            with lock:
                print(f"[{self.name}] {line.rstrip()}", flush=True)


def start(
    number: int, jobs: int, argv: list[str], scratch: Path, lock: threading.Lock
) -> tuple[Shard, threading.Thread]:
    """Start shard ``number`` and the thread relaying its output."""
    result = scratch / f"shard-{number}.json"
    command = ["bash", str(RUN), *argv, "--shard", f"{number}/{jobs}", "--summary-json", str(result)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    shard = Shard(number, jobs, process, result)
    relay = threading.Thread(target=shard.relay, args=(lock,), daemon=True)
    relay.start()
    return shard, relay


def stop(shards: list[Shard]) -> None:
    """Stop every shard still running and wait for it (and its servers) to end.

    SIGTERM goes to a shard's session (its bash and harness) only once its servers are up, so that
    no server is left half-started; SIGINT and SIGTERM of the parent are ignored meanwhile.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    deadline = time.monotonic() + STOP_GRACE_S
    pending = [shard for shard in shards if shard.process.poll() is None]
    while pending and time.monotonic() < deadline:
        for shard in [s for s in pending if s.process.poll() is not None or s.ready.is_set()]:
            pending.remove(shard)
            if shard.process.poll() is None:
                os.killpg(shard.process.pid, signal.SIGTERM)
        time.sleep(0.2)
    for shard in shards:
        try:
            shard.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(shard.process.pid, signal.SIGKILL)
            shard.process.wait()
            print(
                f"shard {shard.name} did not stop within {STOP_GRACE_S:g} s: killed, its servers may be left "
                "running (/tmp/fm-pg-*, /tmp/fm-mariadb-*, /tmp/fm-redis-*)",
                file=sys.stderr,
                flush=True,
            )


def failure(shard: Shard) -> str | None:
    """Why the shard's figures cannot be counted, or None."""
    if shard.process.returncode != 0:
        return f"shard {shard.name} exited with status {shard.process.returncode} (see its [{shard.name}] lines)"
    if not shard.result.exists():
        return f"shard {shard.name} wrote no figures to {shard.result}"
    return None


def run_shards(argv: list[str], jobs: int) -> int:
    """Run ``argv`` as ``jobs`` shards, print the merged figures and the verdict; the exit status."""
    scratch = Path(tempfile.mkdtemp(prefix="fm-faults-shards-"))
    lock = threading.Lock()
    started = time.monotonic()
    shards: list[Shard] = []
    relays: list[threading.Thread] = []
    try:
        for number in range(jobs):
            shard, relay = start(number, jobs, argv, scratch, lock)
            shards.append(shard)
            relays.append(relay)
        problem = None
        while problem is None and any(shard.process.poll() is None for shard in shards):
            time.sleep(0.5)
            problem = next((failure(s) for s in shards if s.process.poll() is not None and failure(s)), None)
        if problem is None:
            problem = next((failure(s) for s in shards if failure(s)), None)
        if problem is not None:
            print(f"FAIL: {problem}: stopping the other shards", flush=True)
            stop(shards)
            return INCOMPLETE
        for relay in relays:
            relay.join()
        summary = merge([Summary.from_json(json.loads(shard.result.read_text())) for shard in shards])
    except KeyboardInterrupt:
        print("interrupted: stopping every shard and its servers", flush=True)
        stop(shards)
        return 130
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for line in summary.lines():
        print(line)
    passed, message = verdict(summary)
    print(message)
    print(f"{sum(summary.schedules.values())} schedules in {jobs} shards, {time.monotonic() - started:.0f} s wall time")
    return 0 if passed else 1
