"""``fencemigrate`` runs in the background and the named lock they hold on MySQL/MariaDB, for the
tests of two writers at once (``test_mysql_precheck``, ``test_mysql_leases``, ``test_pg_precheck``)."""

from __future__ import annotations

import time

from support.mysql_server import mysql_rows
from support.project import Project, Result, script_command, start_process
from support.zygote import Process

SLOW_UPGRADE = "import time\ntime.sleep({seconds})\nop.execute('CREATE TABLE {table} (id int PRIMARY KEY)')"


def start(project: Project, *args: str) -> Process:
    """``fencemigrate ARGS`` in the background."""
    return start_process(script_command("fencemigrate") + list(args), project.path)


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


def finish(process: Process) -> Result:
    stdout, stderr = process.communicate(timeout=120)
    return Result(tuple(process.args), process.returncode, stdout, stderr)  # type: ignore[arg-type]
