"""Start the harness's Python processes by fork from one that has imported their libraries already.

A schedule starts about twenty Python processes per system (runners, the control, the element's
calls, a tokenless ``alembic``), and each spends about half a CPU second importing SQLAlchemy,
Alembic and fencemigrate before it does anything: on a 2-core machine that is a third of what a
schedule costs. ``python -m faults.zygote`` imports them once, then forks a child for each process
the harness asks for; the child becomes that program (``faults.launch``, ``faults.control`` or
Alembic's console script) in a session of its own, with the argv, working directory, environment
and output pipe of the request, and exits the way that program would (its exit status, atexit
handlers, non-daemon threads joined). It is a process of its own, so every fault still applies to
it: SIGSTOP, SIGKILL, SIGTERM, its session killed. Only the import is shared: nothing is connected
or configured before the fork (the libraries are imported, not used).

:func:`spawn` is the harness's ``subprocess.Popen`` for its argv: one of :data:`PROGRAMS` goes to the
zygote (one per harness process, started on first use), anything else to ``subprocess.Popen``.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

#: argv[:3] (``python -m MODULE``) or argv[0]'s name -> the ``module:function`` the child calls.
PROGRAMS = {
    "faults.launch": "faults.launch:main",
    "faults.control": "faults.control:main",
    "alembic": "alembic.config:main",
}
#: What the zygote imports before it forks: what every child would import first.
PRELOAD = (
    "sqlalchemy",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.mysql.pymysql",
    "sqlalchemy.dialects.sqlite.pysqlite",
    "psycopg",
    "pymysql",
    "redis",
    "alembic.command",
    "alembic.config",
    "alembic.runtime.migration",
    "fencemigrate.cli",
)
_HEADER = struct.Struct("!I")


def entry_point(argv: list[str]) -> tuple[str, list[str]] | None:
    """The ``module:function`` for ``argv`` and the child's ``sys.argv`` (the program's name, then
    its arguments), or None when the zygote does not run it."""
    if len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m" and argv[2] in PROGRAMS:
        return PROGRAMS[argv[2]], [argv[2], *argv[3:]]
    if argv and Path(argv[0]).name == "alembic" and Path(argv[0]).parent == Path(sys.executable).parent:
        return PROGRAMS["alembic"], argv
    return None


def _send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    payload = _HEADER.pack(len(data)) + data
    if fds:
        socket.send_fds(sock, [payload], fds)
    else:
        sock.sendall(payload)


def _receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors sent with it; (None, []) when the other end has closed."""
    head, fds, _, _ = socket.recv_fds(sock, _HEADER.size, 4)
    if not head:
        return None, []
    while len(head) < _HEADER.size:
        head += sock.recv(_HEADER.size - len(head))
    (size,) = _HEADER.unpack(head)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None, fds
        data += chunk
    return json.loads(data), fds


# -- the harness's side ---------------------------------------------------------------------------------


class ForkedProcess:
    """What the harness uses of ``subprocess.Popen`` (text output, stderr into stdout), for a child
    of the zygote: its exit status comes from the zygote, which reaps it."""

    def __init__(self, zygote: Zygote, pid: int, output: int) -> None:
        self.zygote, self.pid = zygote, pid
        self.returncode: int | None = None
        self._output: int | None = output  # the read end of the child's stdout and stderr, until EOF
        self._read: list[bytes] = []

    def poll(self) -> int | None:
        """The exit status once the zygote has reported it. Several threads poll one process (its
        runner waits, the fault injector looks for it): only the one that takes the status sets it."""
        if self.returncode is None:
            status = self.zygote.exit_status(self.pid)
            if status is not None:
                self.returncode = status
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            self.zygote.wait_for_exits(0.05)
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, None]:
        """The whole output once the child has exited (TimeoutExpired after ``timeout``; call again)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._output is not None:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._output], [], [], left)[0]:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            chunk = os.read(self._output, 65536)
            if chunk:
                self._read.append(chunk)
            else:
                os.close(self._output)
                self._output = None
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return b"".join(self._read).decode("utf-8", errors="replace"), None

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Zygote:
    """The harness's connection to its ``python -m faults.zygote`` (one per harness process)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "faults.zygote", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            # As the runners' own start-up would have them (both are read once, at start-up).
            env={
                **os.environ,
                "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
                "PYTHONUNBUFFERED": "1",
                "PYTHONDONTWRITEBYTECODE": "1",
            },
        )
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()  # one request or read of exits at a time
        self.exits: dict[int, int] = {}

    def start(self, function: str, argv: list[str], cwd: Path, env: dict[str, str]) -> ForkedProcess:
        read, write = os.pipe()
        with self.lock:
            try:
                _send(self.sock, {"function": function, "argv": argv, "cwd": str(cwd), "env": env}, [write])
                pid = self._reply_pid()
            finally:
                os.close(write)
        return ForkedProcess(self, pid, read)

    def _reply_pid(self) -> int:
        """Read messages until the pid of the child just asked for (exits that come first are kept)."""
        while True:
            message, _ = _receive(self.sock)
            if message is None:
                raise RuntimeError(f"the zygote exited (status {self.process.poll()})")
            if "error" in message:
                raise RuntimeError(f"the zygote could not start a child: {message['error']}")
            if "started" in message:
                return int(message["started"])
            self.exits[int(message["exited"])] = int(message["status"])

    def exit_status(self, pid: int) -> int | None:
        self.wait_for_exits(0)
        with self.lock:
            return self.exits.pop(pid, None)

    def wait_for_exits(self, timeout: float) -> None:
        """Take in the exits the zygote has reported, waiting at most ``timeout`` for one."""
        if not self.lock.acquire(timeout=max(timeout, 0.01)):
            return
        try:
            wait = timeout
            while select.select([self.sock], [], [], wait)[0]:
                message, _ = _receive(self.sock)
                if message is None:
                    raise RuntimeError(f"the zygote exited (status {self.process.poll()})")
                self.exits[int(message["exited"])] = int(message["status"])
                wait = 0
        finally:
            self.lock.release()

    def close(self) -> None:
        self.sock.close()
        self.process.wait(timeout=30)


Process = subprocess.Popen[str] | ForkedProcess
"""A process :func:`spawn` started."""

_zygote: Zygote | None = None
_zygote_lock = threading.Lock()


def spawn(argv: list[str], cwd: Path, env: dict[str, str]) -> Process:
    """Start ``argv`` in a session of its own, stdout and stderr into one text pipe, stdin empty."""
    found = entry_point(argv)
    if found is None:
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    global _zygote
    with _zygote_lock:
        if _zygote is None:
            _zygote = Zygote()
            atexit.register(_zygote.close)  # reaped, so its children's CPU time counts as the harness's
    return _zygote.start(found[0], found[1], cwd, env)


# -- the zygote's side --------------------------------------------------------------------------------


def serve(sock: socket.socket) -> tuple[str, list[str]] | None:
    """Fork a child per request and report its pid and, once reaped, its exit status (as Popen's
    returncode: negative for a signal). Returns in a child: what it is to run. None when the harness
    has gone."""
    children: set[int] = set()
    while True:
        readable = select.select([sock], [], [], 0.02)[0]
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            _send(sock, {"exited": pid, "status": os.waitstatus_to_exitcode(status)})
        if not readable:
            continue
        request, fds = _receive(sock)
        if request is None:
            return None
        try:
            pid = os.fork()
        except OSError as error:
            for fd in fds:
                os.close(fd)
            _send(sock, {"error": str(error)})
            continue
        if pid == 0:
            sock.close()
            os.setsid()
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(fds[0], 1)
            os.dup2(fds[0], 2)
            for fd in (null, *fds):
                os.close(fd)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            return request["function"], request["argv"]
        for fd in fds:
            os.close(fd)
        children.add(pid)
        _send(sock, {"started": pid})


def main() -> None:
    """``python -m faults.zygote FD``: import, then serve the harness on socket FD until it goes (a
    Ctrl-C is the harness's to handle: it stops every child's session, then closes the socket)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for module in PRELOAD:
        importlib.import_module(module)
    child = serve(socket.socket(fileno=int(sys.argv[1])))
    if child is None:
        return
    function, sys.argv = child
    module, name = function.split(":")
    sys.exit(getattr(importlib.import_module(module), name)())


if __name__ == "__main__":
    main()
