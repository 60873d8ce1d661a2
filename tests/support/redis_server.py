"""The Redis servers the Redis lease backend's tests run against.

``.ci/test`` starts a throwaway ``redis-server`` (``.ci/redis``) and exports
``FENCEMIGRATE_TEST_REDIS_URL``. There is deliberately no fallback: a missing or unreachable
server is an error. :class:`PrivateRedis` starts a server of a test's own (through the same
``.ci/redis``) for tests that stop and restart it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType

import redis

URL_VAR = "FENCEMIGRATE_TEST_REDIS_URL"
_CI_REDIS = Path(__file__).resolve().parents[2] / ".ci" / "redis"


class RedisUnavailable(RuntimeError):
    """The test Redis server is not configured or not reachable."""


def redis_url_from_env() -> str:
    """The test server's URL; RedisUnavailable with an explanation when it is not set or not reachable."""
    url = os.environ.get(URL_VAR, "").strip()
    if not url:
        raise RedisUnavailable(
            f"{URL_VAR} must point at a redis-server (redis://127.0.0.1:PORT/0). Run the tests with "
            "`bash .ci/test [pytest args]`, which starts a throwaway server and sets it, or start one "
            f'yourself with `eval "$(bash .ci/redis start)"` and export {URL_VAR}=redis://127.0.0.1:$REDIS_PORT/0.'
        )
    wait_until_reachable(url)
    return url


def wait_until_reachable(url: str, attempts: int = 20) -> None:
    """PING ``url`` until it answers; RedisUnavailable after ``attempts`` tries 0.25 s apart."""
    client = redis.Redis.from_url(url)
    try:
        for attempt in range(attempts):
            try:
                client.ping()
                return
            except redis.ConnectionError as error:
                if attempt == attempts - 1:
                    raise RedisUnavailable(f"no redis-server answers at {url}: {error}") from None
                time.sleep(0.25)
    finally:
        client.close()


def flush_all(url: str) -> None:
    """FLUSHALL: every key of every database of the server is gone."""
    with redis.Redis.from_url(url) as client:
        client.flushall()


class PrivateRedis:
    """A redis-server of the test's own (no persistence): ``restart()`` loses every key."""

    def __init__(self) -> None:
        self.port, self._dir = self._start(None)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def restart(self) -> None:
        """Stop the server and start a new one on the same port, with nothing in it."""
        self.stop()
        self.port, self._dir = self._start(self.port)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """The server stopped with SIGSTOP (connections are accepted, nothing is answered), then resumed."""
        pid = int((Path(self._dir) / "redis.pid").read_text())
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server and delete its directory."""
        subprocess.run(["bash", str(_CI_REDIS), "stop", self._dir], check=True, capture_output=True)

    def __enter__(self) -> PrivateRedis:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    @staticmethod
    def _start(port: int | None) -> tuple[int, str]:
        env = dict(os.environ)
        if port is not None:
            env["REDIS_PORT_WANTED"] = str(port)
        started = subprocess.run(
            ["bash", str(_CI_REDIS), "start"], env=env, capture_output=True, text=True, check=False
        )
        assert started.returncode == 0, f".ci/redis start failed:\n{started.stderr}"
        values = dict(line.split("=", 1) for line in started.stdout.splitlines() if "=" in line)
        return int(values["REDIS_PORT"]), values["REDIS_DIR"]
