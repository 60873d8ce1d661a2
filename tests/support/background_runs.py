"""``fencemigrate`` runs in the background and the named lock they hold on MySQL/MariaDB, for the
tests of two writers at once (``test_mysql_precheck``, ``test_mysql_leases``, ``test_pg_precheck``)."""

from __future__ import annotations

import os
import subprocess
import time

from support.mysql_server import mysql_rows
from support.project import Project, Result, script_command

SLOW_UPGRADE = "import time\ntime.sleep({seconds})\nop.execute('CREATE TABLE {table} (id int PRIMARY KEY)')"


def start(project: Project, *args: str) -> subprocess.Popen[str]:
    """``fencemigrate ARGS`` in the background."""
    return subprocess.Popen(
        script_command("fencemigrate") + list(args),
        cwd=project.path,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )


def lock_holder(url: str, resource: str = "db/migrations") -> int | None:
    """The connection id holding the resource's named lock in ``url``'s database."""
    database = url.rsplit("/", 1)[1]
    value = mysql_rows(url, "SELECT IS_USED_LOCK(%s)", (f"fencemigrate:{database}/{resource}",))[0][0]
    return None if value is None else int(value)


def wait_for(condition: object, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def finish(process: subprocess.Popen[str]) -> Result:
    stdout, stderr = process.communicate(timeout=120)
    return Result(tuple(process.args), process.returncode, stdout, stderr)  # type: ignore[arg-type]
