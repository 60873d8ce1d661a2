"""The fault harness's zygote (bench/faults/zygote.py): a forked child behaves as the process it replaces.

Each case runs the same argv through ``subprocess.Popen`` and through the zygote where it matters:
the output and exit status, the working directory and environment of the request, a stop point's
SIGSTOP, SIGKILL's negative status, and a session of its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from faults.execute import BENCH, is_stopped  # noqa: E402
from faults.zygote import ForkedProcess, Zygote, entry_point, spawn  # noqa: E402


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fencemigrate project on a SQLite file (``fencemigrate init``)."""
    subprocess.run(
        [str(Path(sys.executable).parent / "fencemigrate"), "init", "migrations"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    return tmp_path


@pytest.fixture
def zygote() -> Zygote:
    return Zygote()


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(BENCH), **extra}


def test_which_argv_the_zygote_runs() -> None:
    python = sys.executable
    assert entry_point([python, "-m", "faults.launch", "state"]) == ("faults.launch:main", ["faults.launch", "state"])
    assert entry_point([python, "-m", "faults.control", "--url", "u"])[0] == "faults.control:main"  # type: ignore[index]
    alembic = str(Path(python).parent / "alembic")
    assert entry_point([alembic, "downgrade", "-1"]) == ("alembic.config:main", [alembic, "downgrade", "-1"])
    assert entry_point(["git", "status"]) is None
    assert entry_point([python, "-c", "pass"]) is None
    assert entry_point(["/usr/bin/alembic", "current"]) is None  # another installation's


@pytest.mark.parametrize("args", [["state"], ["history"], ["upgrade", "nowhere", "--token", "1"], ["--no-such"]])
def test_the_same_output_and_status_as_a_process(project: Path, zygote: Zygote, args: list[str]) -> None:
    argv = [sys.executable, "-m", "faults.launch", *args]
    plain = subprocess.run(argv, cwd=project, env=env(), capture_output=True, text=True, stdin=subprocess.DEVNULL)
    found = entry_point(argv)
    assert found is not None
    forked = zygote.start(*found, project, env())
    output, _ = forked.communicate(timeout=60)
    assert (forked.returncode, output) == (plain.returncode, plain.stdout + plain.stderr)


def test_a_stop_point_stops_the_child_and_sigkill_ends_it(project: Path, zygote: Zygote) -> None:
    found = entry_point([sys.executable, "-m", "faults.launch", "upgrade", "head", "--token", "1"])
    assert found is not None
    child = zygote.start(*found, project, env(FAULTS_STOP_SQL="."))
    deadline = time.monotonic() + 30
    while not is_stopped(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert is_stopped(child.pid)
    assert child.poll() is None
    assert os.getsid(child.pid) == child.pid  # a session of its own, as start_new_session gives
    os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL
    with pytest.raises(subprocess.TimeoutExpired):
        zygote.start(*found, project, env(FAULTS_STOP_SQL=".")).communicate(timeout=0.5)


def test_spawn_runs_other_programs_as_processes(tmp_path: Path) -> None:
    process = spawn(["sh", "-c", "pwd; echo $FAULTS_X"], tmp_path, {"PATH": os.environ["PATH"], "FAULTS_X": "x"})
    assert isinstance(process, subprocess.Popen)
    assert process.communicate(timeout=30) == (f"{tmp_path}\nx\n", None)


def test_every_exit_reaches_its_runner_while_other_threads_poll(project: Path, zygote: Zygote) -> None:
    """The harness polls a runner from its fault injector while the runner's own thread waits for it:
    the status is taken once, and neither thread may lose it (every runner here would hang)."""
    found = entry_point([sys.executable, "-m", "faults.launch", "--version"])
    assert found is not None
    started: list[ForkedProcess] = []
    statuses: list[int | None] = []
    done = threading.Event()

    def runner() -> None:
        for _ in range(4):
            child = zygote.start(*found, project, env())
            started.append(child)
            child.communicate(timeout=30)
            statuses.append(child.returncode)

    def injector() -> None:
        while not done.is_set():
            for child in list(started):
                child.poll()

    runners = [threading.Thread(target=runner) for _ in range(4)]
    pollers = [threading.Thread(target=injector) for _ in range(2)]
    for thread in (*runners, *pollers):
        thread.start()
    for thread in runners:
        thread.join()
    done.set()
    for thread in pollers:
        thread.join()
    assert statuses == [0] * 16
