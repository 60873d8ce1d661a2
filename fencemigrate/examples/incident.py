"""``fencemigrate demo``: replay the design notes' incident, fenced and unfenced, with zero setup.

Agent A takes the lease on db/migrations and applies its migration 0042, then pauses (rate-limit
backoff, a slow test suite, a context compaction) past its short TTL. Agent B takes the lease,
reads the state and replaces A's 0042 with its own. A wakes up still believing it holds the
lease: its ``reapply 0042`` and its renumbered copy 0043 are FENCED, it reads the state and stops
because its goal is met. The same script with plain Alembic destroys B's work. Both stories are
printed as timelines; the demo exits 0 only if fencing kept B's schema and plain Alembic did not.

By default everything runs on two fresh SQLite files in a temporary directory; ``--url`` names a
PostgreSQL server instead, where two scratch databases are made and dropped.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from alembic import command as alembic_command
from alembic.config import Config
from sqlalchemy import inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from .. import api
from ..config import load_config
from ..connections import one_off_connection
from ..dialects import dialect_named
from ..errors import Fenced, UsageError
from ..fence.state import State
from ..fence.timeline import timeline_lines

_BASE = '''"""0041 create invoice"""
from alembic import op

revision = "0041"
down_revision = None


def upgrade():
    op.execute("CREATE TABLE invoice (id integer PRIMARY KEY, amount numeric NOT NULL)")


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
A_TTL = "1s"  # short, so that A's pause outlasts it within the demo's few seconds
B_TTL = "5m"

Say = Callable[[str], None]


@dataclass
class DemoResult:
    """What the two replays left behind."""

    fenced_kept_b: bool
    control_lost_b: bool

    @property
    def ok(self) -> bool:
        """True when fencing protected B's work and plain Alembic did not."""
        return self.fenced_kept_b and self.control_lost_b


def run_demo(url: str | None, say: Say) -> DemoResult:
    """Replay the incident fenced and unfenced, on fresh SQLite files or scratch PostgreSQL databases."""
    with (
        tempfile.TemporaryDirectory(prefix="fencemigrate-demo-") as workdir,
        _databases(url, Path(workdir)) as (
            fenced_url,
            control_url,
        ),
    ):
        say(f"== fenced: fencemigrate with leases and tokens ({make_url(fenced_url).get_backend_name()}) ==")
        fenced = _Project(Path(workdir) / "fenced", fenced_url)
        _replay_fenced(fenced, _Story(say))
        fenced_columns = fenced.invoice_columns()
        say(f"   invoice columns now: {', '.join(fenced_columns)}")
        say("")
        say("   timeline (fencemigrate timeline, from the event log in the database):")
        for line in timeline_lines(api.timeline(fenced.config())):
            say(f"   {line}")
        say("")
        say("== control: the same script with plain alembic, no leases, no fencing ==")
        control = _Project(Path(workdir) / "control", control_url)
        story = _Story(say, echo=False)
        _replay_control(control, story)
        say("   timeline (rebuilt from the script's own log: plain Alembic keeps none):")
        for line in story.lines:
            say(f"   {line}")
        control_columns = control.invoice_columns()
        say(f"   invoice columns now: {', '.join(control_columns)}")
    return DemoResult(
        fenced_kept_b=B_COLUMN in fenced_columns and A_COLUMN not in fenced_columns,
        control_lost_b=B_COLUMN not in control_columns,
    )


class _Story:
    """Narrates each step as it happens and keeps a timestamped copy of it."""

    def __init__(self, say: Say, echo: bool = True) -> None:
        self._say = say
        self._echo = echo
        self.lines: list[str] = []

    def __call__(self, actor: str, what: str) -> None:
        if self._echo:
            self._say(f"{actor:<9} {what}")
        stamp = datetime.now(UTC).strftime("%H:%M:%S")
        self.lines.append(f"{stamp}  {actor:<9} {what}")


def _replay_fenced(project: _Project, story: _Story) -> None:
    config = project.config()
    api.upgrade(config, "head", holder="setup")
    story("setup", "upgrade head (its own lease) applied 0041: create invoice")

    grant_a, _ = api.lease_acquire(config, holder="agent-A", ttl=A_TTL)
    story("agent-A", f"lease granted: token {grant_a.token}, ttl {A_TTL}")
    project.write_0042("agent-A", A_COLUMN, A_DDL)
    api.upgrade(config, "head", token=grant_a.token, holder="agent-A")
    story("agent-A", f"applied 0042 under token {grant_a.token} (adds invoice.{A_COLUMN})")
    story("agent-A", "model call -> 429, backing off; then the full test suite; then a context compaction")
    _wait_until_expired(config)
    story("lease", "agent-A's lease expired (by the database's clock)")

    grant_b, state = api.lease_acquire(config, holder="agent-B", ttl=B_TTL)
    applied = state.ledger[-1]
    story("agent-B", f"lease granted: token {grant_b.token}; the fence is at {grant_b.token} from now on")
    story(
        "agent-B",
        f"read state: heads {_heads(state)}, 0042 applied by {applied.holder} under token "
        f"{applied.applied_token}: half-done, rewriting it",
    )
    api.downgrade(config, "0041", token=grant_b.token, holder="agent-B")
    project.write_0042("agent-B", B_COLUMN, B_DDL)
    api.upgrade(config, "head", token=grant_b.token, holder="agent-B")
    story("agent-B", f"rolled back A's 0042 and applied its own under token {grant_b.token} (adds invoice.{B_COLUMN})")
    api.lease_release(config, holder="agent-B", token=grant_b.token)
    story("agent-B", "released the lease")

    story("agent-A", "wakes up: 'I hold the lock on db/migrations/0042, continuing.'")
    project.write_0042("agent-A", A_COLUMN, A_DDL)
    _expect_fenced(
        story,
        f"reapply 0042 --token {grant_a.token}",
        lambda: api.reapply(config, "0042", token=grant_a.token, holder="agent-A"),
    )
    project.write_0042("agent-B", B_COLUMN, B_DDL)
    project.write_renumbered_0043()
    _expect_fenced(
        story,
        f"renumbered its copy to 0043: upgrade head --token {grant_a.token}",
        lambda: api.upgrade(config, "head", token=grant_a.token, holder="agent-A"),
    )
    project.remove_0043()
    state = api.state(config)
    applied = state.ledger[-1]
    story(
        "agent-A",
        f"read state: heads {_heads(state)}, 0042 applied by {applied.holder} under token "
        f"{applied.applied_token}; invoice already has a currency column: goal met, stopping",
    )


def _replay_control(project: _Project, story: _Story) -> None:
    config = project.config()
    alembic_command.upgrade(config, "head")
    story("setup", "alembic upgrade head applied 0041: create invoice")
    project.write_0042("agent-A", A_COLUMN, A_DDL)
    alembic_command.upgrade(config, "head")
    story("agent-A", f"applied 0042 (adds invoice.{A_COLUMN}), then pauses past its lease")
    alembic_command.downgrade(config, "0041")
    project.write_0042("agent-B", B_COLUMN, B_DDL)
    alembic_command.upgrade(config, "head")
    story("agent-B", f"rolled back A's 0042 and applied its own (adds invoice.{B_COLUMN})")
    story("agent-A", "wakes up: 'I hold the lock on db/migrations/0042, continuing.'")
    alembic_command.downgrade(config, "0041")
    project.write_0042("agent-A", A_COLUMN, A_DDL)
    alembic_command.upgrade(config, "head")
    story("agent-A", "reapply 0042: rolled back B's 0042, applied its own -- nothing stopped it")


def _wait_until_expired(config: Config, timeout_s: float = 30.0) -> None:
    """A's pause: wait until the lease service says A's lease has run out."""
    deadline = time.monotonic() + timeout_s
    while not api.lease_status(config).expired:
        if time.monotonic() > deadline:
            raise RuntimeError("agent-A's lease did not expire")
        time.sleep(0.1)


def _heads(state: State) -> str:
    """The heads as the CLI prints them."""
    return ", ".join(state.heads) or "(none)"


def _expect_fenced(story: _Story, what: str, call: Callable[[], object]) -> None:
    try:
        call()
    except Fenced as fenced:
        story("agent-A", f"{what}: FENCED ({fenced.reason})")
        return
    raise RuntimeError(f"agent-A's {what} was not fenced")


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
        with one_off_connection(self.url) as connection:
            return [column["name"] for column in inspect(connection).get_columns("invoice")]


@contextmanager
def _databases(url: str | None, workdir: Path) -> Iterator[tuple[str, str]]:
    """Two empty databases: SQLite files in ``workdir``, or scratch databases on the server at ``url``."""
    if url is None:
        yield f"sqlite:///{workdir / 'fenced.db'}", f"sqlite:///{workdir / 'control.db'}"
        return
    try:
        base = make_url(url)
    except ArgumentError:
        base = None
    dialect = None if base is None else dialect_named(base.get_backend_name())
    suffix = f"{os.getpid()}"
    fenced = None if base is None or dialect is None else dialect.scratch_database(base, f"fm_demo_fenced_{suffix}")
    control = None if base is None or dialect is None else dialect.scratch_database(base, f"fm_demo_control_{suffix}")
    if fenced is None or control is None:
        raise UsageError(
            "--url must name a PostgreSQL server (postgresql+psycopg://...); leave it out to run on fresh SQLite files"
        )
    with fenced as fenced_url, control as control_url:
        yield fenced_url, control_url
