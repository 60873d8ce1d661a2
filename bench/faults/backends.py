"""The databases a schedule runs against, and the SQL the harness itself needs on each.

The harness's own tables live next to the application's: ``faults_history`` (what committed,
in commit order), ``faults_control_lease`` (the control's hand-rolled lease). A trigger on
fencemigrate's event log copies every ``GRANT`` into ``faults_history`` in the grant's own
transaction, so grants and writes are ordered by one clock: PostgreSQL's commit timestamps
(``track_commit_timestamp``), SQLite's single writer (row ids are given in commit order), and
MariaDB's insertion order (the event log's order; grants and writers take the named lock).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from faults.history import Event

REPO = Path(__file__).resolve().parents[2]
_numbers = itertools.count(1)

HISTORY_COLUMNS = "kind, token, holder, revision, change_id"


@dataclass
class Backend:
    """One kind of database. ``server_url`` has no database; ``pgdata`` allows server restarts."""

    name: str
    server_url: str = ""
    pgdata: str | None = None
    lease_url: str | None = None
    commit_timestamps: bool = False

    # -- what the backend allows -------------------------------------------------------------

    @property
    def dialect(self) -> str:
        """``postgresql``, ``sqlite`` or ``mysql`` (the Redis backend keeps its fence in PostgreSQL)."""
        return {"redis": "postgresql", "mariadb": "mysql"}.get(self.name, self.name)

    @property
    def can_preempt(self) -> bool:
        """``--preempt`` is refused on SQLite."""
        return self.dialect != "sqlite"

    @property
    def can_kill_connections(self) -> bool:
        """``pg_terminate_backend`` / ``KILL CONNECTION``: servers only."""
        return self.dialect != "sqlite"

    @property
    def can_restart(self) -> bool:
        """Server restarts: PostgreSQL through ``.ci/postgres restart``, when its data directory is known."""
        return self.dialect == "postgresql" and self.pgdata is not None

    @property
    def can_fail_over(self) -> bool:
        """A failover to a streaming standby (faults.failover): the built-in lease service on PostgreSQL."""
        return self.name == "postgresql"

    @property
    def has_autocommit_block(self) -> bool:
        """A revision with ``autocommit_block()`` (``CREATE INDEX CONCURRENTLY``): PostgreSQL."""
        return self.dialect == "postgresql"

    @property
    def elements(self) -> tuple[str, ...]:
        """The schedule elements (faults.elements) the backend runs: two roles, ``pg_dump`` and
        ``hashtext()`` need PostgreSQL, mixed token sources a Redis lease."""
        if self.name == "redis":
            return ("mixed-sources",)
        if self.name == "postgresql":
            return ("mcp-writers", "sql-attack", "colliding-names", "dump-restore")
        return ("mcp-writers",)

    @property
    def fence_table(self) -> str:
        """Where a revision reads the token its run claimed."""
        return "fencemigrate.agent_fence" if self.dialect == "postgresql" else "fencemigrate_agent_fence"

    # -- databases ------------------------------------------------------------------------------

    def create_database(self, workdir: Path) -> str:
        """A fresh, empty database; its SQLAlchemy URL."""
        name = f"faults_{os.getpid()}_{next(_numbers)}"
        if self.dialect == "sqlite":
            return f"sqlite:///{workdir / (name + '.db')}"
        with self._server_engine().connect() as conn:
            conn.execute(text(f"CREATE DATABASE {name}"))
        return str(make_url(self.server_url).set(database=name).render_as_string(hide_password=False))

    def drop_database(self, url: str) -> None:
        """Drop a database made by :meth:`create_database`, ending its sessions first."""
        if self.dialect == "sqlite":
            Path(make_url(url).database or "").unlink(missing_ok=True)
            return
        name = make_url(url).database
        self.kill_connections(url)
        with self._server_engine().connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))

    def _server_engine(self) -> Engine:
        base = make_url(self.server_url)
        if self.dialect == "postgresql":
            base = base.set(database="postgres")
        return create_engine(base, poolclass=NullPool, isolation_level="AUTOCOMMIT")

    def engine(self, url: str) -> Engine:
        """An engine on ``url`` without pooling (every connection is closed after use)."""
        options = {"connect_args": {"timeout": 60}} if self.dialect == "sqlite" else {}
        return create_engine(url, poolclass=NullPool, **options)

    # -- the harness's tables -------------------------------------------------------------------

    def prepare(self, url: str, resource: str) -> None:
        """Create ``faults_history`` and the control's lease row."""
        key = {
            "postgresql": "BIGSERIAL PRIMARY KEY",
            "sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT",
            "mysql": "BIGINT AUTO_INCREMENT PRIMARY KEY",
        }[self.dialect]
        textual = "VARCHAR(255)" if self.dialect == "mysql" else "TEXT"
        engine_clause = " ENGINE=InnoDB" if self.dialect == "mysql" else ""
        with self.engine(url).begin() as conn:
            conn.execute(
                text(
                    f"CREATE TABLE faults_history (id {key}, kind {textual} NOT NULL, token BIGINT, "
                    f"holder {textual}, revision {textual}, change_id {textual}){engine_clause}"
                )
            )
            conn.execute(
                text(
                    f"CREATE TABLE faults_control_lease (resource {textual} PRIMARY KEY, holder {textual}, "
                    f"token BIGINT NOT NULL, expires_at DOUBLE PRECISION NOT NULL){engine_clause}"
                )
            )
            conn.execute(text("INSERT INTO faults_control_lease VALUES (:r, NULL, 0, 0)"), {"r": resource})

    def log_grants(self, url: str) -> None:
        """After ``fencemigrate install``: copy each GRANT of the event log into ``faults_history``."""
        statements = {
            "postgresql": [
                "CREATE FUNCTION public.faults_log_grant() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF NEW.kind = 'GRANT' THEN INSERT INTO public.faults_history (kind, token, holder) "
                "VALUES ('grant', NEW.token, NEW.holder); END IF; RETURN NEW; END $$",
                "CREATE TRIGGER faults_log_grant AFTER INSERT ON fencemigrate.fence_event "
                "FOR EACH ROW EXECUTE FUNCTION public.faults_log_grant()",
            ],
            "sqlite": [
                "CREATE TRIGGER faults_log_grant AFTER INSERT ON fencemigrate_fence_event WHEN NEW.kind = 'GRANT' "
                "BEGIN INSERT INTO faults_history (kind, token, holder) VALUES ('grant', NEW.token, NEW.holder); END",
            ],
            "mysql": [
                "CREATE TRIGGER faults_log_grant AFTER INSERT ON fencemigrate_fence_event FOR EACH ROW "
                "INSERT INTO faults_history (kind, token, holder) SELECT 'grant', NEW.token, NEW.holder "
                "FROM DUAL WHERE NEW.kind = 'GRANT'",
            ],
        }[self.dialect]
        with self.engine(url).begin() as conn:
            for statement in statements:
                conn.execute(text(statement))

    def now_sql(self) -> str:
        """The database's clock in seconds since the epoch, for the control's lease."""
        return {
            "postgresql": "extract(epoch from clock_timestamp())",
            "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
            "mysql": "UNIX_TIMESTAMP(NOW(6))",
        }[self.dialect]

    # -- reading what happened ------------------------------------------------------------------

    def events(self, url: str) -> list[Event]:
        """``faults_history`` in commit order."""
        order = "id"
        if self.dialect == "postgresql" and self.commit_timestamps:
            order = "pg_xact_commit_timestamp(xmin), id"
        with self.engine(url).connect() as conn:
            rows = conn.execute(text(f"SELECT {HISTORY_COLUMNS} FROM faults_history ORDER BY {order}")).all()
        return [
            Event(kind, None if token is None else int(token), holder or "", revision, change)
            for kind, token, holder, revision, change in rows
        ]

    def version_heads(self, url: str) -> list[str]:
        """Alembic's version table (empty when it does not exist)."""
        with self.engine(url).connect() as conn:
            try:
                return sorted(row[0] for row in conn.execute(text("SELECT version_num FROM alembic_version")))
            except Exception:  # noqa: BLE001 - no version table: nothing was ever applied
                return []

    def ledger(self, url: str) -> dict[str, str]:
        """fencemigrate's ledger: each revision it holds, with its row's state."""
        table = "fencemigrate.applied_revision" if self.dialect == "postgresql" else "fencemigrate_applied_revision"
        state = "'applied'" if self.dialect == "sqlite" else "state"  # SQLite commits each run whole: no state
        with self.engine(url).connect() as conn:
            try:
                rows = conn.execute(
                    text(f"SELECT revision, {state} FROM {table} WHERE version_table = 'alembic_version'")
                ).all()
            except Exception:  # noqa: BLE001 - no fence schema: nothing was ever fenced
                return {}
        return {row[0]: row[1] for row in rows}

    def max_grant(self, url: str) -> int:
        """The highest token granted (committed) so far."""
        with self.engine(url).connect() as conn:
            value = conn.execute(text("SELECT max(token) FROM faults_history WHERE kind = 'grant'")).scalar()
        return int(value or 0)

    # -- faults ---------------------------------------------------------------------------------

    def kill_connections(self, url: str) -> int:
        """``pg_terminate_backend`` / ``KILL CONNECTION`` every other session on the database."""
        name = make_url(url).database
        if self.dialect == "postgresql":
            with self._server_engine().connect() as conn:
                return len(
                    conn.execute(
                        text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = :d AND pid <> pg_backend_pid()"
                        ),
                        {"d": name},
                    ).all()
                )
        if self.dialect == "mysql":
            killed = 0
            with self._server_engine().connect() as conn:
                ids = [
                    row[0]
                    for row in conn.execute(
                        text("SELECT id FROM information_schema.processlist WHERE db = :d AND id <> CONNECTION_ID()"),
                        {"d": name},
                    )
                ]
                for session in ids:
                    try:
                        conn.execute(text(f"KILL CONNECTION {int(session)}"))
                        killed += 1
                    except Exception:  # noqa: BLE001 - the session ended by itself meanwhile
                        pass
            return killed
        return 0

    def restart_server(self) -> None:
        """Restart PostgreSQL (fast shutdown: every session ends, in-flight transactions roll back)."""
        assert self.pgdata is not None
        subprocess.run(
            ["bash", str(REPO / ".ci" / "postgres"), "restart", self.pgdata],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )

    def enable_commit_timestamps(self) -> None:
        """Make sure ``track_commit_timestamp`` is on (a restart when it is not and the server may restart)."""
        if self.dialect != "postgresql":
            return
        with self._server_engine().connect() as conn:
            self.commit_timestamps = conn.execute(text("SHOW track_commit_timestamp")).scalar() == "on"
            if not self.commit_timestamps and self.pgdata is None:
                self.pgdata = str(conn.execute(text("SHOW data_directory")).scalar())
            if not self.commit_timestamps:
                conn.execute(text("ALTER SYSTEM SET track_commit_timestamp = on"))
        if not self.commit_timestamps:
            self.restart_server()
            self.commit_timestamps = True


def workdir() -> Path:
    """A scratch directory for SQLite files and projects."""
    return Path(tempfile.mkdtemp(prefix="fm-faults-"))
