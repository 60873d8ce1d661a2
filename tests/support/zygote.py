"""The ``alembic`` and ``fencemigrate`` console scripts started by fork from a process that imported
their libraries already: what :func:`support.project.run_command` runs them with.

A Python process spends most of a CPU second importing SQLAlchemy, Alembic and fencemigrate before it
does anything; the suite starts hundreds. ``python tests/support/zygote.py FD MODULE...`` imports the
MODULEs once, then forks a child for each request: the child takes the request's working directory,
environment, argv and standard streams (files of the caller's), and becomes the console script
(``alembic.config:main``, ``fencemigrate.cli:run``): its exit status, atexit handlers and teardown
are the program's own. Nothing is connected or configured before the fork, only imported. There is
one zygote per program and test process: plain ``alembic``'s imports only Alembic, SQLAlchemy and
the drivers, never fencemigrate (the control stays plain).

A program another program starts (the MCP SDK's ``stdio_client`` starting ``fencemigrate mcp``) goes
through the zygote too: :meth:`Zygote.launcher` is a command, ``python zygote.py launch SOCKET
ARGV...``, that hands its own working directory, environment and standard streams to the zygote on
its launch socket, forwards SIGTERM, SIGINT, SIGHUP and SIGQUIT to the forked child, and exits as
the child did (its status, or the signal that ended it).

What is fixed when an interpreter starts cannot differ from the zygote's: a request whose
environment changes a ``PYTHON*``, ``LD_*``, ``LC_*``, ``LANG`` or ``TZ`` variable (a hash seed, a
search path, a preloaded library) gets a process of its own (:func:`fork_safe`). This module uses
the standard library only: it is the zygote's script too.
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
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: What plain ``alembic`` imports first: Alembic, SQLAlchemy and the drivers of the test databases.
_ALEMBIC_IMPORTS = (
    "sqlalchemy",
    "sqlalchemy.dialects.postgresql.psycopg",
    "sqlalchemy.dialects.mysql.pymysql",
    "sqlalchemy.dialects.sqlite.pysqlite",
    "psycopg",
    "pymysql",
    "alembic.config",
    "alembic.command",
    "alembic.runtime.environment",
    "alembic.runtime.migration",
    "alembic.autogenerate",
)
#: The console script -> the function it calls, and what its zygote imports before forking.
PROGRAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "alembic": ("alembic.config:main", _ALEMBIC_IMPORTS),
    "fencemigrate": (
        "fencemigrate.cli:run",
        (*_ALEMBIC_IMPORTS, "redis", "fencemigrate.cli", "fencemigrate.agent_server.server"),
    ),
}

#: Environment variables an interpreter reads when it starts (by prefix or name).
_STARTUP_PREFIXES = ("PYTHON", "LD_", "LC_")
_STARTUP_NAMES = ("LANG", "LANGUAGE", "TZ")
_HEADER = struct.Struct("!I")
#: The signals a launcher passes on to its child.
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def program(argv: Sequence[str]) -> str | None:
    """The console script of this environment that ``argv`` runs (a key of :data:`PROGRAMS`), or None."""
    if not argv:
        return None
    path = Path(argv[0])
    if path.name in PROGRAMS and path.parent == Path(sys.executable).parent:
        return path.name
    return None


def fork_safe(env: Mapping[str, str], started: Mapping[str, str]) -> bool:
    """True when ``env`` sets every variable an interpreter reads at start-up as ``started`` (the
    zygote's) does."""
    names = {name for name in {*env, *started} if name.startswith(_STARTUP_PREFIXES) or name in _STARTUP_NAMES}
    return all(env.get(name) == started.get(name) for name in names)


def _send(sock: socket.socket, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(message).encode()
    payload = _HEADER.pack(len(data)) + data
    if fds:
        socket.send_fds(sock, [payload], list(fds))
    else:
        sock.sendall(payload)


def _receive(sock: socket.socket) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors sent with it; (None, []) when the other end has closed."""
    head, fds, _, _ = socket.recv_fds(sock, _HEADER.size, 3)
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


# -- the caller's side ----------------------------------------------------------------------------------


class Zygote:
    """A test process's connection to the zygote of one program."""

    def __init__(self, name: str, env: Mapping[str, str]) -> None:
        self.name = name
        self.env = dict(env)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.directory = tempfile.mkdtemp(prefix="zygote-")
        self.address = os.path.join(self.directory, "launch")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.address)
        listener.listen(64)
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(theirs.fileno()), name, str(listener.fileno())],
            pass_fds=[theirs.fileno(), listener.fileno()],
            stdin=subprocess.DEVNULL,
            cwd="/",
            env=self.env,
        )
        theirs.close()
        listener.close()
        self.sock = ours
        self.lock = threading.Lock()  # one request or read of exits at a time
        self.exits: dict[int, int] = {}

    def run(
        self, argv: Sequence[str], cwd: Path, env: Mapping[str, str], input: str, timeout: float
    ) -> tuple[int, str, str]:
        """Run ``argv`` as :func:`subprocess.run` would (stdin ``input``, text output, killed and
        :class:`subprocess.TimeoutExpired` after ``timeout`` seconds): its exit status, stdout, stderr."""
        with (
            tempfile.TemporaryFile() as stdin,
            tempfile.TemporaryFile() as stdout,
            tempfile.TemporaryFile() as stderr,
        ):
            stdin.write(input.encode())
            stdin.seek(0)
            pid = self._start(argv, cwd, env, [stdin.fileno(), stdout.fileno(), stderr.fileno()])
            status = self._wait(pid, time.monotonic() + timeout)
            outputs = []
            for stream in (stdout, stderr):
                stream.seek(0)
                outputs.append(stream.read().decode().replace("\r\n", "\n").replace("\r", "\n"))
        if status is None:
            raise subprocess.TimeoutExpired(list(argv), timeout, outputs[0], outputs[1])
        return status, outputs[0], outputs[1]

    def popen(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> ForkedPopen:
        """Start ``argv`` with stdin empty and stdout and stderr into pipes of the caller's."""
        stdout, stdout_child = os.pipe()
        stderr, stderr_child = os.pipe()
        stdin = os.open(os.devnull, os.O_RDONLY)
        try:
            pid = self._start(argv, cwd, env, [stdin, stdout_child, stderr_child])
        finally:
            for fd in (stdin, stdout_child, stderr_child):
                os.close(fd)
        return ForkedPopen(self, list(argv), pid, stdout, stderr)

    def launcher(self, argv: Sequence[str]) -> list[str]:
        """A command that runs ``argv`` (this zygote's program) as a child of the zygote, on the
        command's own working directory, environment and standard streams; a process of its own when
        that environment changes what an interpreter reads at start-up."""
        return [sys.executable, "-I", __file__, "launch", self.address, *argv]

    def _start(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str], fds: list[int]) -> int:
        """Ask for a child with standard streams ``fds``: its pid."""
        with self.lock:
            _send(self.sock, {"argv": list(argv), "cwd": str(cwd), "env": dict(env)}, fds)
            return self._started()

    def _started(self) -> int:
        """Read messages until the pid of the child just asked for (exits that come first are kept)."""
        while True:
            message, _ = _receive(self.sock)
            if message is None:
                raise RuntimeError(f"the {self.name} zygote exited (status {self.process.poll()})")
            if "started" in message:
                return int(message["started"])
            self.exits[int(message["exited"])] = int(message["status"])

    def _wait(self, pid: int, deadline: float) -> int | None:
        """The child's exit status (negative for a signal); None if it was killed at ``deadline``."""
        killed = False
        while (status := self.exit_status(pid, 0.05)) is None:
            if not killed and time.monotonic() >= deadline:
                os.kill(pid, signal.SIGKILL)
                killed = True
        return None if killed else status

    def exit_status(self, pid: int, timeout: float) -> int | None:
        """Child ``pid``'s exit status once the zygote has reported it, waiting at most ``timeout``
        seconds for a report; None before."""
        with self.lock:
            wait = timeout
            while pid not in self.exits and select.select([self.sock], [], [], wait)[0]:
                message, _ = _receive(self.sock)
                if message is None:
                    raise RuntimeError(f"the {self.name} zygote exited (status {self.process.poll()})")
                self.exits[int(message["exited"])] = int(message["status"])
                wait = 0
            return self.exits.pop(pid, None)

    def close(self) -> None:
        """Close the connection: the zygote exits."""
        self.sock.close()
        self.process.wait(timeout=30)
        os.unlink(self.address)
        os.rmdir(self.directory)


class ForkedPopen:
    """What the tests use of ``subprocess.Popen(argv, stdout=PIPE, stderr=PIPE, text=True)``, for a child
    of a zygote (stdin empty): the zygote reaps it and reports its exit status."""

    def __init__(self, zygote: Zygote, args: list[str], pid: int, stdout: int, stderr: int) -> None:
        self.zygote, self.args, self.pid = zygote, args, pid
        self.returncode: int | None = None
        self.stdout = open(stdout, encoding="utf-8")  # noqa: SIM115 (closed by communicate)
        self.stderr = open(stderr, encoding="utf-8")  # noqa: SIM115
        self._read: dict[int, list[bytes]] = {stdout: [], stderr: []}

    def poll(self) -> int | None:
        """The exit status once the child has exited, else None."""
        if self.returncode is None:
            self.returncode = self.zygote.exit_status(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit status; :class:`subprocess.TimeoutExpired` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self.returncode = self.zygote.exit_status(self.pid, 0.05)
        return self.returncode

    def communicate(self, input: None = None, timeout: float | None = None) -> tuple[str, str]:
        """stdout and stderr once the child has exited (:class:`subprocess.TimeoutExpired` after
        ``timeout`` seconds; call again for the rest), as ``Popen.communicate`` reads them."""
        deadline = None if timeout is None else time.monotonic() + timeout
        open_fds = [stream.fileno() for stream in (self.stdout, self.stderr) if not stream.closed]
        while open_fds:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = select.select(open_fds, [], [], left)[0]
            if not ready:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            for fd in ready:
                chunk = os.read(fd, 65536)
                if chunk:
                    self._read[fd].append(chunk)
                else:
                    open_fds.remove(fd)
        outputs = []
        for stream in (self.stdout, self.stderr):
            if not stream.closed:
                data = b"".join(self._read[stream.fileno()])
                outputs.append(data.decode().replace("\r\n", "\n").replace("\r", "\n"))
                stream.close()
            else:
                outputs.append("")
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return outputs[0], outputs[1]

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to the child unless it has exited."""
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


Process = subprocess.Popen[str] | ForkedPopen
"""A process :func:`popen` started."""


_zygotes: dict[str, Zygote] = {}
_zygotes_lock = threading.Lock()


def _zygote_for(argv: Sequence[str], env: Mapping[str, str], base_env: Mapping[str, str]) -> Zygote | None:
    """The zygote of console script ``argv`` (started on first use with ``base_env``); None when
    ``argv`` is no console script of :data:`PROGRAMS` or ``env`` needs an interpreter start of its own."""
    name = program(argv)
    if name is None:
        return None
    with _zygotes_lock:
        zygote = _zygotes.get(name)
        if zygote is None:
            zygote = _zygotes[name] = Zygote(name, base_env)
            atexit.register(zygote.close)
    return zygote if fork_safe(env, zygote.env) else None


def launcher(argv: Sequence[str], base_env: Mapping[str, str]) -> list[str]:
    """A command that runs console script ``argv`` through its zygote (see :meth:`Zygote.launcher`)
    for a program that starts it; ``argv`` itself when it is no console script of :data:`PROGRAMS`."""
    zygote = _zygote_for(argv, base_env, base_env)
    return list(argv) if zygote is None else zygote.launcher(argv)


def run(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str], input: str, timeout: float, base_env: Mapping[str, str]
) -> tuple[int, str, str] | None:
    """Run console script ``argv`` through its zygote (see :meth:`Zygote.run`): its exit status, stdout
    and stderr; None when it needs a process of its own (see :func:`_zygote_for`)."""
    zygote = _zygote_for(argv, env, base_env)
    return None if zygote is None else zygote.run(argv, cwd, env, input, timeout)


def popen(argv: Sequence[str], cwd: Path, env: Mapping[str, str], base_env: Mapping[str, str]) -> Process:
    """Start ``argv`` in the background as ``subprocess.Popen(argv, stdout=PIPE, stderr=PIPE,
    text=True)`` would (stdin empty): through its zygote when it is a console script of
    :data:`PROGRAMS` and ``env`` allows (see :func:`_zygote_for`)."""
    zygote = _zygote_for(argv, env, base_env)
    if zygote is not None:
        return zygote.popen(argv, cwd, env)
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# -- the zygote's side ----------------------------------------------------------------------------------


def serve(sock: socket.socket, listener: socket.socket) -> dict[str, Any] | None:
    """Fork a child per request, from the caller on ``sock`` or a launcher connecting to ``listener``;
    report its pid and, once reaped, its exit status (as Popen's returncode) to whoever asked. Returns
    in a child: its request. None when the caller has gone."""
    started = dict(os.environ)
    children: dict[int, socket.socket] = {}
    while True:
        readable = select.select([sock, listener], [], [], 0.01)[0]
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            _report(children.pop(pid), {"exited": pid, "status": os.waitstatus_to_exitcode(status)}, sock)
        for ready in readable:
            asker = ready if ready is sock else listener.accept()[0]
            request, fds = _receive(asker)
            if request is None:
                if asker is sock:
                    return None
                asker.close()
                continue
            if asker is not sock and not fork_safe(request["env"], started):
                _report(asker, {"refused": True}, sock)
                for fd in fds:
                    os.close(fd)
                continue
            pid = os.fork()
            if pid == 0:
                for held in {sock, listener, asker, *children.values()}:
                    held.close()
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                    os.close(fd)
                return request
            for fd in fds:
                os.close(fd)
            children[pid] = asker
            _send(asker, {"started": pid})


def _report(asker: socket.socket, message: dict[str, Any], sock: socket.socket) -> None:
    """Send ``message`` to the caller or to a launcher (which then goes: a launcher that has gone
    already is no error)."""
    if asker is sock:
        _send(sock, message)
        return
    try:
        _send(asker, message)
    except OSError:
        pass
    asker.close()


def launch(address: str, argv: list[str]) -> None:
    """``python zygote.py launch SOCKET ARGV...``: run ARGV as a child of the zygote listening on
    SOCKET, with this process's working directory, environment and standard streams; pass on the
    signals of :data:`_FORWARDED`; exit as the child did. ARGV runs in this process instead when the
    zygote refuses (an environment that changes what an interpreter reads at start-up)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    _send(sock, {"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}, [0, 1, 2])
    message, _ = _receive(sock)
    if message is None:
        raise SystemExit(f"the zygote at {address} went before starting {argv}")
    if "refused" in message:
        sock.close()
        os.execv(argv[0], argv)
    pid = int(message["started"])

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in _FORWARDED:
        signal.signal(signum, forward)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the child's ends only: its stdout's reader sees the end when the child goes
        os.dup2(null, fd)
    os.close(null)
    message, _ = _receive(sock)
    status = 1 if message is None else int(message["status"])
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


def main() -> None:
    """``python zygote.py FD PROGRAM LISTENER``: import what PROGRAM imports, then serve the caller on
    socket FD and launchers on listening socket LISTENER until the caller goes; in a child, become
    PROGRAM. ``python zygote.py launch ...``: see :func:`launch`."""
    if sys.argv[1] == "launch":
        launch(sys.argv[2], sys.argv[3:])
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the test run's to handle
    sys.path[0] = str(Path(sys.executable).parent)  # as a console script's own start puts it, not this directory
    function, preload = PROGRAMS[sys.argv[2]]
    for module in preload:
        importlib.import_module(module)
    request = serve(socket.socket(fileno=int(sys.argv[1])), socket.socket(fileno=int(sys.argv[3])))
    if request is None:
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = request["argv"]
    module, name = function.split(":")
    sys.exit(getattr(importlib.import_module(module), name)())


if __name__ == "__main__":
    main()
