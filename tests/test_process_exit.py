"""How the ``fencemigrate`` command ends: without the interpreter's teardown, but with everything
an orderly exit does that anyone can see (connections closed, atexit handlers, output flushed,
other threads waited for).

Each case has env.py do something at or around exit; plain ``alembic`` is the control that shows
what an ordinary exit does with it. The process's exit is what is under test, so every command here
runs in a process of its own (``run_cli_process``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.project import Project


def _env_with(project: Project, code: str) -> None:
    """Put ``code`` at the top of env.py, after its imports."""
    project.edit_env("from alembic import context\n", "from alembic import context\n" + code, count=1)


@pytest.fixture
def one(project: Project) -> Project:
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    return project


def test_atexit_handlers_of_env_py_run_and_output_is_complete(one: Project, tmp_path: Path) -> None:
    """An atexit handler env.py registers runs once, as with plain alembic; stdout (a pipe here)
    carries the whole JSON document."""
    marks = tmp_path / "atexit.txt"
    _env_with(one, f"import atexit\natexit.register(lambda: open({str(marks)!r}, 'a').write('ran\\n'))\n")
    result = one.run_cli_process("upgrade", "head", "--token", "1", "--json").check(0)
    assert json.loads(result.stdout)["status"] == "ok"
    assert marks.read_text() == "ran\n"
    one.run_alembic("current").check(0)
    assert marks.read_text() == "ran\nran\n"


def test_pooled_connection_left_by_env_py_is_closed_before_exit(one: Project, tmp_path: Path) -> None:
    """env.py with a connection pool (no NullPool): the connection it returned to the pool is
    closed, not dropped, before the process ends."""
    closed = tmp_path / "closed.txt"
    one.edit_env("        poolclass=pool.NullPool,\n", "", count=1)
    one.edit_env(
        "    with connectable.connect() as connection:",
        "    from sqlalchemy import event\n"
        f"    event.listen(connectable.pool, 'close', lambda *_: open({str(closed)!r}, 'a').write('closed\\n'))\n"
        "    with connectable.connect() as connection:",
        count=1,
    )
    one.run_cli_process("upgrade", "head", "--token", "1").check(0)
    assert closed.read_text() == "closed\n"


def test_sys_exit_with_a_message_in_env_py(one: Project) -> None:
    """env.py that stops with sys.exit("...") exits 1 with the message on stderr, as with alembic."""
    _env_with(one, "import sys\nsys.exit('DATABASE_URL is not set')\n")
    result = one.run_cli_process("current")
    control = one.run_alembic("current")
    assert (result.code, control.code) == (1, 1)
    assert result.stderr.rstrip().endswith("DATABASE_URL is not set")
    assert control.stderr.rstrip().endswith("DATABASE_URL is not set")


def test_a_thread_env_py_started_is_waited_for(one: Project, tmp_path: Path) -> None:
    """A (non-daemon) thread env.py started finishes before the process exits, as with alembic."""
    done = tmp_path / "thread.txt"
    _env_with(
        one,
        "import threading, time\n"
        f"threading.Thread(target=lambda: (time.sleep(0.5), open({str(done)!r}, 'w').write('done'))).start()\n",
    )
    one.run_cli_process("upgrade", "head", "--token", "1").check(0)
    assert done.read_text() == "done"
    done.unlink()
    one.run_alembic("current").check(0)
    assert done.read_text() == "done"
