"""A PostgreSQL primary and its streaming standby on 127.0.0.1, and the faults of a failover.

Both servers come from ``.ci/postgres`` (``start``, then ``standby PORT``: ``pg_basebackup -R``),
with PostgreSQL's own durability settings (``PG_DURABLE=1``): ``synchronous_commit=on``, as an
operator runs a replicated server. :func:`streaming_pair` yields a :class:`StreamingPair` and
always stops and deletes both servers afterwards; :func:`own_server` yields one server alone.

The failover of the issue: :meth:`StreamingPair.hold_wal` stops (SIGSTOP) the primary's walsender,
so the WAL of what commits next never leaves the primary (stopping the standby's walreceiver
would not do: the bytes are already in its socket buffer); :meth:`StreamingPair.crash_primary`
stops the primary immediately; :meth:`StreamingPair.promote` makes the standby the primary, and
:meth:`StreamingPair.url` points at it from then on. Every wait is bounded. Nothing here imports
pytest or fencemigrate: the fault-injection harness (bench/faults) uses it too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .db import query
from .pg import PgServer

CI_POSTGRES = Path(__file__).resolve().parents[2] / ".ci" / "postgres"
#: Seconds any single wait of this module may take.
WAIT_S = 30.0
_SIGQUIT_MASK = 1 << (signal.SIGQUIT - 1)


class ReplicationError(RuntimeError):
    """A server did not start, replicate, stop or promote as asked."""


@dataclass(frozen=True)
class Server:
    """One server started by ``.ci/postgres``: its port and data directory."""

    port: int
    pgdata: Path

    def url(self, dbname: str = "postgres") -> str:
        """SQLAlchemy URL of ``dbname`` on this server."""
        return PgServer("127.0.0.1", self.port).url(dbname)


def _ci_postgres(*args: str, options: str = "", durable: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``.ci/postgres ARGS`` with the server ``options`` (``PG_EXTRA_OPTIONS``), with PostgreSQL's
    durability defaults when ``durable``; ReplicationError on failure."""
    done = subprocess.run(
        ["bash", str(CI_POSTGRES), *args],
        env={**os.environ, "PG_DURABLE": "1" if durable else "", "PG_EXTRA_OPTIONS": options},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise ReplicationError(f".ci/postgres {' '.join(args)} failed (exit {done.returncode}):\n{done.stderr}")
    return done


def _start(*args: str, options: str, durable: bool = True) -> Server:
    """``.ci/postgres start`` or ``standby PORT``: the server it printed."""
    values = dict(line.split("=", 1) for line in _ci_postgres(*args, options=options, durable=durable).stdout.split())
    return Server(int(values["PGPORT"]), Path(values["PGDATA"]))


def _stop(server: Server) -> None:
    """``.ci/postgres stop``: the server stopped (fast, else immediate) and its directory deleted."""
    subprocess.run(
        ["bash", str(CI_POSTGRES), "stop", str(server.pgdata)], capture_output=True, timeout=120, check=False
    )


def wait_for(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    """Poll ``condition`` every 50 ms; ReplicationError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise ReplicationError(f"timed out after {timeout:g}s waiting until {what}")
        time.sleep(0.05)


def _scalar(url: str, sql: str) -> object:
    """The single value ``sql`` returns on ``url``."""
    return query(url, sql)[0][0]


class StreamingPair:
    """A primary and a standby streaming from it (asynchronous until :meth:`make_synchronous`)."""

    def __init__(self, primary: Server, standby: Server, dbname: str) -> None:
        self.primary = primary
        self.standby: Server | None = standby
        self.dbname = dbname
        self.old_primary: Server | None = None
        self._held_walsender: int | None = None

    def url(self) -> str:
        """SQLAlchemy URL of the database on the current primary (the promoted standby after :meth:`promote`)."""
        return self.primary.url(self.dbname)

    # -- replication state -----------------------------------------------------------------

    def walsender_pid(self) -> int:
        """PID of the primary's walsender serving the standby (ReplicationError until it streams)."""
        rows = query(self.primary.url(), "SELECT pid FROM pg_stat_replication WHERE state = 'streaming'")
        if len(rows) != 1:
            raise ReplicationError(f"expected one streaming walsender on the primary, found {len(rows)}")
        return int(rows[0][0])

    def wait_streaming(self) -> None:
        """Wait until the standby streams from the primary."""
        wait_for(
            lambda: bool(query(self.primary.url(), "SELECT 1 FROM pg_stat_replication WHERE state = 'streaming'")),
            "the standby streams from the primary",
        )

    def wait_replayed(self) -> None:
        """Wait until the standby has replayed all the WAL the primary has flushed so far: every commit
        (``synchronous_commit=on``). Not the insert position: the walsender sends only flushed WAL, and
        a background record (a standby snapshot) can wait many seconds for the next flush."""
        assert self.standby is not None, "the standby was promoted"
        target = str(_scalar(self.primary.url(), "SELECT pg_current_wal_flush_lsn()"))
        standby = self.standby.url()
        wait_for(
            lambda: bool(_scalar(standby, f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn")),
            f"the standby replayed the primary's WAL up to {target}",
        )

    def make_synchronous(self) -> None:
        """``synchronous_standby_names = '*'`` on the primary (reloaded); wait until the standby is ``sync``."""
        url = self.primary.url()
        query(url, "ALTER SYSTEM SET synchronous_standby_names = '*'")
        query(url, "SELECT pg_reload_conf()")
        wait_for(
            lambda: bool(query(url, "SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync'")),
            "the standby is synchronous",
        )

    # -- the faults --------------------------------------------------------------------------

    def hold_wal(self) -> None:
        """Stop (SIGSTOP) the walsender once the standby is caught up: nothing written from now on
        reaches the standby until :meth:`release_wal`, and a synchronous commit waits."""
        self.wait_replayed()
        self._held_walsender = self.walsender_pid()
        os.kill(self._held_walsender, signal.SIGSTOP)

    def release_wal(self) -> None:
        """Resume (SIGCONT) the held walsender, if any and still alive."""
        pid, self._held_walsender = self._held_walsender, None
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass

    def crash_primary(self) -> None:
        """``.ci/postgres crash``: ``pg_ctl stop -m immediate`` on the primary (every session killed, no
        checkpoint), the held walsender (if any) killed without running again, so it sends nothing more."""
        stopping = subprocess.Popen(
            ["bash", str(CI_POSTGRES), "crash", str(self.primary.pgdata)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        held = self._held_walsender
        if held is not None:
            # The postmaster sends its children SIGQUIT and SIGKILLs the ones left after 5 s: a
            # stopped walsender would take that long. It never runs again: SIGKILL once it is told.
            wait_for(lambda: _signal_pending(held, _SIGQUIT_MASK), "the postmaster told the held walsender to quit")
            try:
                os.kill(held, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._held_walsender = None
        _, errors = stopping.communicate(timeout=WAIT_S + 10)
        if stopping.returncode != 0:
            raise ReplicationError(f".ci/postgres crash failed:\n{errors}")
        self.old_primary = self.primary

    def promote(self) -> None:
        """Promote the standby (``pg_promote()``, waiting for it): it is the primary from now on."""
        standby = self.standby
        assert standby is not None, "the standby was promoted already"
        if _scalar(standby.url(), f"SELECT pg_promote(true, {int(WAIT_S)})") is not True:
            raise ReplicationError(f"the standby on port {standby.port} was not promoted within {WAIT_S:g}s")
        self.primary, self.standby = standby, None

    def failover(self) -> None:
        """Crash the primary and promote the standby."""
        self.crash_primary()
        self.promote()

    def close(self) -> None:
        """Resume a held walsender, stop both servers and delete their directories."""
        self.release_wal()
        for server in {self.primary, self.standby, self.old_primary}:
            if server is not None:
                _stop(server)


def _signal_pending(pid: int, mask: int) -> bool:
    """True when a signal of ``mask`` is pending for process ``pid`` (per thread or process-wide), or
    when the process is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    pending = 0
    for line in status.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")):
            pending |= int(line.split()[1], 16)
    return bool(pending & mask)


@contextmanager
def own_server(options: str = "") -> Iterator[Server]:
    """A server of the caller's own (tuned for speed, started with ``options``), for a test that
    restarts it or changes its settings while other tests use the shared one; stopped and deleted
    afterwards."""
    server = _start("start", options=options, durable=False)
    try:
        yield server
    finally:
        _stop(server)


@contextmanager
def streaming_pair(dbname: str = "failover", options: str = "") -> Iterator[StreamingPair]:
    """A new primary with database ``dbname`` and a standby streaming it, both started with the server
    ``options`` (``-c track_commit_timestamp=on``); both stopped and deleted afterwards, whatever
    happens (also when the standby fails to start)."""
    primary = _start("start", options=options)
    servers = [primary]
    try:
        query(primary.url(), f'CREATE DATABASE "{dbname}"')
        standby = _start("standby", str(primary.port), options=options)
        servers.append(standby)
        pair = StreamingPair(primary, standby, dbname)
        pair.wait_streaming()
    except BaseException:
        for server in servers:
            _stop(server)
        raise
    try:
        yield pair
    finally:
        pair.close()
