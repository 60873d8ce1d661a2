"""``fencemigrate demo``: replay the design notes' incident, fenced and unfenced, on a real database.

Agent A applies its migration 0042 under token 33, then pauses (rate-limit backoff, a slow test
suite, a context compaction) past its lease. Agent B gets token 34, rolls A's 0042 back and
applies its own. A wakes up still believing it holds the lease: its ``reapply 0042`` and its
renumbered copy 0043 are FENCED, it reads the state and stops because the goal is met. The same
script with plain Alembic destroys B's work. The demo exits 0 only if both happened.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from alembic import command as alembic_command
from alembic.config import Config
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import URL, make_url

from . import api
from .config import load_config
from .errors import Fenced, UsageError

_BASE = '''"""0041 create invoice"""
from alembic import op

revision = "0041"
down_revision = None


def upgrade():
    op.execute("CREATE TABLE invoice (id serial PRIMARY KEY, amount numeric NOT NULL)")


def downgrade():
    op.execute("DROP TABLE invoice")
'''

_INVOICE_CURRENCY = '''"""{revision} add invoice currency ({author}'s version)"""
from alembic import op

revision = "{revision}"
down_revision = "{down}"


def upgrade():
    op.execute("ALTER TABLE invoice ADD COLUMN {column} {ddl}")


def downgrade():
    op.execute("ALTER TABLE invoice DROP COLUMN {column}")
'''

A_COLUMN, A_DDL = "currency", "text"
B_COLUMN, B_DDL = "currency_code", "char(3) NOT NULL DEFAULT 'EUR'"


@dataclass
class DemoResult:
    """What the two replays left behind."""

    fenced_kept_b: bool
    control_lost_b: bool

    @property
    def ok(self) -> bool:
        """True when fencing protected B's work and plain Alembic did not."""
        return self.fenced_kept_b and self.control_lost_b


def run_demo(url: str, say: Callable[[str], None]) -> DemoResult:
    """Replay the incident on two scratch databases next to ``url``; they are dropped afterwards."""
    base = make_url(url)
    if not base.drivername.startswith("postgresql"):
        raise UsageError("the demo needs a PostgreSQL URL (postgresql+psycopg://...)")
    suffix = f"{os.getpid()}"
    with _scratch_database(base, f"fm_demo_fenced_{suffix}") as fenced_url, _scratch_database(
        base, f"fm_demo_control_{suffix}"
    ) as control_url, tempfile.TemporaryDirectory(prefix="fencemigrate-demo-") as workdir:
        say("== fenced: fencemigrate with tokens ==")
        fenced = _Project(Path(workdir) / "fenced", fenced_url)
        _replay_fenced(fenced, say)
        fenced_columns = fenced.invoice_columns()
        say(f"   invoice columns now: {', '.join(fenced_columns)}")
        say("")
        say("== control: the same script with plain alembic ==")
        control = _Project(Path(workdir) / "control", control_url)
        _replay_control(control, say)
        control_columns = control.invoice_columns()
        say(f"   invoice columns now: {', '.join(control_columns)}")
    return DemoResult(
        fenced_kept_b=B_COLUMN in fenced_columns and A_COLUMN not in fenced_columns,
        control_lost_b=B_COLUMN not in control_columns,
    )


def _replay_fenced(project: _Project, say: Callable[[str], None]) -> None:
    config = project.config()
    api.upgrade(config, "head", token=32, holder="setup")
    say("setup     token=32 applied 0041 (create invoice)")
    project.write_0042("agent-A", A_COLUMN, A_DDL)
    api.upgrade(config, "head", token=33, holder="agent-A")
    say("agent-A   token=33 applied 0042 (adds invoice.currency)")
    say("agent-A   model call -> 429, backing off; then a 6-minute test suite; then compaction")
    say("lease     EXPIRE agent-A; GRANT agent-B token=34")
    state = api.state(config)
    say(f"agent-B   read state: heads={state.heads}, "
        f"0042 applied under token {state.ledger[-1].applied_token} by {state.ledger[-1].holder}")
    api.downgrade(config, "0041", token=34, holder="agent-B")
    project.write_0042("agent-B", B_COLUMN, B_DDL)
    api.upgrade(config, "head", token=34, holder="agent-B")
    say("agent-B   token=34 rolled back A's 0042 and applied its own (adds invoice.currency_code)")
    say("agent-A   wakes up: 'I hold the lock on db/migrations/0042, continuing.'")
    project.write_0042("agent-A", A_COLUMN, A_DDL)
    _expect_fenced(say, "agent-A   reapply 0042 --token 33",
                   lambda: api.reapply(config, "0042", token=33, holder="agent-A"))
    project.write_0042("agent-B", B_COLUMN, B_DDL)
    project.write_renumbered_0043()
    _expect_fenced(say, "agent-A   renumbered its copy to 0043, upgrade head --token 33",
                   lambda: api.upgrade(config, "head", token=33, holder="agent-A"))
    project.remove_0043()
    state = api.state(config)
    say(f"agent-A   read state: heads={state.heads}, 0042 applied under token "
        f"{state.ledger[-1].applied_token} by {state.ledger[-1].holder}; invoice already has a "
        "currency column: goal met, stopping")


def _replay_control(project: _Project, say: Callable[[str], None]) -> None:
    config = project.config()
    alembic_command.upgrade(config, "head")
    say("setup     applied 0041 (create invoice)")
    project.write_0042("agent-A", A_COLUMN, A_DDL)
    alembic_command.upgrade(config, "head")
    say("agent-A   applied 0042 (adds invoice.currency), then pauses past its lease")
    alembic_command.downgrade(config, "0041")
    project.write_0042("agent-B", B_COLUMN, B_DDL)
    alembic_command.upgrade(config, "head")
    say("agent-B   rolled back A's 0042 and applied its own (adds invoice.currency_code)")
    alembic_command.downgrade(config, "0041")
    project.write_0042("agent-A", A_COLUMN, A_DDL)
    alembic_command.upgrade(config, "head")
    say("agent-A   wakes up, re-applies 0042 (rolled back B's, applied its own) -- nothing stopped it")


def _expect_fenced(say: Callable[[str], None], label: str, call: Callable[[], object]) -> None:
    try:
        call()
    except Fenced as fenced:
        say(f"{label}: FENCED ({fenced.reason})")
        return
    raise RuntimeError(f"{label} was not fenced")


class _Project:
    """A throwaway Alembic project made by ``alembic init`` with the generic template."""

    def __init__(self, path: Path, url: str) -> None:
        self.path = path
        path.mkdir(parents=True)
        ini = path / "alembic.ini"
        with redirect_stdout(io.StringIO()):  # alembic init narrates every file it writes
            alembic_command.init(Config(str(ini)), str(path / "migrations"))
        text_ = ini.read_text(encoding="utf-8")
        text_ = text_.replace("level = INFO", "level = WARNING")
        lines = [
            f"sqlalchemy.url = {url.replace('%', '%%')}" if line.startswith("sqlalchemy.url") else line
            for line in text_.splitlines()
        ]
        ini.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.ini = ini
        self.url = url
        self.versions = path / "migrations" / "versions"
        (self.versions / "0041_create_invoice.py").write_text(_BASE, encoding="utf-8")

    def config(self) -> Config:
        return load_config([str(self.ini)])

    def write_0042(self, author: str, column: str, ddl: str) -> None:
        self._write("0042_add_invoice_currency.py", "0042", "0041", author, column, ddl)

    def write_renumbered_0043(self) -> None:
        self._write("0043_add_invoice_currency.py", "0043", "0042", "agent-A", A_COLUMN, A_DDL)

    def remove_0043(self) -> None:
        (self.versions / "0043_add_invoice_currency.py").unlink()

    def _write(self, name: str, revision: str, down: str, author: str, column: str, ddl: str) -> None:
        source = _INVOICE_CURRENCY.format(revision=revision, down=down, author=author, column=column, ddl=ddl)
        (self.versions / name).write_text(source, encoding="utf-8")
        shutil.rmtree(self.versions / "__pycache__", ignore_errors=True)  # never run a stale .pyc

    def invoice_columns(self) -> list[str]:
        engine = create_engine(self.url)
        try:
            return [column["name"] for column in inspect(engine).get_columns("invoice")]
        finally:
            engine.dispose()


@contextmanager
def _scratch_database(base: URL, name: str) -> Iterator[str]:
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
