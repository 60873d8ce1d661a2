"""The schedule elements: writers and attacks beyond the runners, each on a database of its own.

A schedule drawn with elements (faults.schedule.draw_element) runs one of these after its runners
(with ``--elements-beside``, at the same time), for fencemigrate and for the control, and checks it
with :func:`faults.checker.check_element`:

* ``mcp-writers``: two real ``fencemigrate mcp`` servers (agent-A, agent-B; the MCP SDK's stdio
  client), each in its own clone of one git remote, on one database. A is granted, writes
  ``notes.md`` (``write_file``), pushes (``push_branch``) and upgrades, then is away past its TTL; B
  is granted and writes. ``stale-grant``: A wakes and writes the file and pushes under its old grant
  (B did not push). ``fresh-grant``: B pushed; A takes a fresh lease and pushes its branch, which
  lacks B's commit. The control: plain file writes and ``git push --force`` behind the hand-rolled lease.
* ``sql-attack``: a two-role PostgreSQL database (``install --grant-to``). Once A's lease expired, the
  migration role writes, by plain SQL: a forged grant on the lease row and the fence
  (``forge-lease``), a raised fence (``raise-fence``), a forged GRANT event (``forge-event``), each
  followed by a write under the forged token; or ``alembic_version`` after claiming by
  ``set_config('fencemigrate.claimed_xact', ...)`` and the claim's shared lock (``pretend-claim``),
  or after dropping the version table's guard trigger on a version table the migration role created
  before ``install --grant-to`` (``drop-guard``). Then B is granted and writes. Or
  (``rewrite-incarnation``) B is granted, the database copied as a template, the copy's fence
  incarnation set to the copy's own, C granted in the copy and D in the original, and D writes to
  the copy. The control: the same forgery of its lease row, or a plain write.
* ``mixed-sources`` (Redis): R holds a Redis lease and writes; meanwhile W takes the built-in
  service's lease (``builtin-beside-redis``), or runs ``lease detach`` without ``--lease-url`` and writes
  under ``--token 50``, which no source issued (``detach-beside-redis``). The control: its Redis lease
  and its lease row, and a write under any token.
* ``colliding-names``: ``svc-32835`` and ``svc-62004`` (equal ``hashtext()``) in one database: V
  migrates the first (a 4 s revision) while P takes the second's lease with ``--preempt``. The
  control: its lease behind a shared advisory lock keyed by ``hashtext(resource)``, and a preempt that
  ends the sessions holding the key.
* ``dump-restore`` (PostgreSQL): A is granted and upgrades, is away past its TTL; B is granted and
  downgrades; the database is dumped (``pg_dump``) and restored into a new one, where A, stale,
  then B write. The history is the old database's followed by what the new one added. The fence is
  installed by the runner (``runner-installed``) or by ``CREATE EXTENSION fencemigrate``
  (``extension-installed``: pg_dump writes the extension's ``CREATE EXTENSION`` and its tables' rows).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from sqlalchemy import text
from sqlalchemy.engine import make_url

from faults import project
from faults.backends import HISTORY_COLUMNS, Backend
from faults.checker import Violation, check_element
from faults.execute import BENCH, parse_token
from faults.history import ElementOutcome, Event, Grant, Run, SideWrite
from faults.schedule import Element
from faults.zygote import Process, spawn

#: Two resource names whose ``hashtext()`` is equal (PostgreSQL's, on every platform).
COLLIDING = ("svc-32835", "svc-62004")
#: The branch the MCP writers push.
BRANCH = "feat/x"
#: What a run of a step may take before it is killed.
RUN_TIMEOUT_S = 120.0
#: The largest token (2^62); a forged grant takes it, or the next token, by the element's ``big_token``.
MAX_TOKEN = 4611686018427387904
#: The advisory-lock class of fencemigrate's claim lock (sql/advisory_locks.conf).
CLAIM_LOCK_CLASS = 1718503789


def released_grant(
    answer: dict[str, Any], holder: str, started: float, ttl_s: float, source: str, resource: str
) -> Grant | None:
    """The grant a lease call reported as ``grant released`` (``answer``: its JSON, or the MCP tool's
    error): it committed, then what the call does after it failed, so the call released it and said
    so with its token. Live only until the call ended; for its TTL when the release failed too
    (``expires_at``). None for any other answer."""
    if answer.get("status") != "grant released" or not isinstance(answer.get("token"), int):
        return None
    live_s = ttl_s if answer.get("expires_at") else 0.0
    return Grant(holder, answer["token"], source, started, time.monotonic(), live_s, resource)


def pg_url(url: str) -> str:
    """A SQLAlchemy URL as libpq takes it (pg_dump, psql)."""
    return str(make_url(url).set(drivername="postgresql").render_as_string(hide_password=False))


class SetupRefused(Exception):
    """``fencemigrate install`` refused the element's set-up."""


class ElementRun:
    """One element, one system, on databases of its own."""

    def __init__(
        self, backend: Backend, system: str, element: Element, template: Path, workdir: Path, index: int
    ) -> None:
        self.backend, self.system, self.element, self.template = backend, system, element, template
        self.dir = workdir / f"s{index:04d}-{system}-{element.kind}"
        self.dir.mkdir(parents=True)
        self.resource = f"faults/e{index}-{system}-{os.getpid()}"
        self.outcome = ElementOutcome(system, element.kind)
        self.databases: list[str] = []
        self.roles: list[str] = []
        self.chain = project.chain((0.0, 0.0, 0.0), False)
        self.notes: list[str] = []

    # -- set-up ---------------------------------------------------------------------------------------

    def database(self, resources: tuple[str, ...] = ()) -> str:
        """A fresh database with the harness's tables (and the control's lease rows for ``resources``)."""
        url = self.backend.create_database(self.dir)
        self.databases.append(url)
        self.backend.prepare(url, self.resource)
        with self.backend.engine(url).begin() as conn:
            for resource in resources:
                conn.execute(text("INSERT INTO faults_control_lease VALUES (:r, NULL, 0, 0)"), {"r": resource})
        return url

    def checkout(
        self, name: str, url: str, *, resource: str | None = None, chain: list[project.Revision] | None = None
    ) -> Path:
        """A checkout of the project (r01-r03 without sleeps unless ``chain``) on ``url``; no lease URL in it."""
        return project.checkout(
            self.template,
            self.dir / name,
            url,
            resource or self.resource,
            chain or self.chain,
            self.backend.fence_table,
        )

    def install(self, checkout: Path, url: str, *grant_to: str) -> None:
        """``fencemigrate install`` (``--grant-to ROLE``), then the trigger copying grants into the history;
        :class:`SetupRefused` when install fails (its run is not counted)."""
        run = self.cli("setup", checkout, ["install", *(("--grant-to", *grant_to) if grant_to else ())], "setup")
        if run.exit_code != 0:
            self.outcome.runs.remove(run)
            raise SetupRefused(f"install exited {run.exit_code}: {run.output.strip().splitlines()[-1:]}")
        self.backend.log_grants(url)

    def env(self, holder: str, token: int | None = None, resource: str | None = None) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            PYTHONPATH=str(BENCH),
            PYTHONDONTWRITEBYTECODE="1",
            FAULTS_RESOURCE=resource or self.resource,
            FAULTS_HOLDER=holder,
        )
        env.pop("FAULTS_TOKEN", None)
        env.pop("FAULTS_STOP_AT", None)
        env.pop("FAULTS_STOP_SQL", None)
        if token is not None:
            env["FAULTS_TOKEN"] = str(token)
        return env

    # -- runs -------------------------------------------------------------------------------------------

    def process(
        self, cwd: Path, argv: list[str], holder: str, token: int | None = None, resource: str | None = None
    ) -> Process:
        """Start one run (recorded once :meth:`finish` has waited for it)."""
        return spawn(argv, cwd, self.env(holder, token, resource))

    def finish(self, step: str, process: Process, argv: list[str], started: float, **facts: Any) -> Run:
        """Wait for ``process`` (killed after RUN_TIMEOUT_S); the Run, recorded (``facts``: holder, token,
        expect_fenced)."""
        run = Run(step, tuple(argv), **facts)
        try:
            run.output, _ = process.communicate(timeout=max(1.0, started + RUN_TIMEOUT_S - time.monotonic()))
        except subprocess.TimeoutExpired:
            run.hung = True
            process.kill()
            run.output, _ = process.communicate()
        run.exit_code = process.returncode
        run.elapsed_s = time.monotonic() - started
        self.outcome.runs.append(run)
        return run

    def command(self, url: str, holder: str, resource: str | None = None) -> list[str]:
        """The start of a fencemigrate (``faults.launch``) or control command line."""
        if self.system == "fencemigrate":
            return [sys.executable, "-m", "faults.launch"]
        return [
            sys.executable,
            "-m",
            "faults.control",
            "--url",
            url,
            "--resource",
            resource or self.resource,
            "--holder",
            holder,
        ]

    def cli(
        self,
        step: str,
        cwd: Path,
        args: list[str],
        holder: str,
        token: int | None = None,
        *,
        url: str = "",
        resource: str | None = None,
        expect_fenced: bool = False,
    ) -> Run:
        """One run to its end: ``args`` after :meth:`command`."""
        started = time.monotonic()
        argv = [*self.command(url, holder, resource), *args]
        process = self.process(cwd, argv, holder, token, resource)
        return self.finish(step, process, argv, started, holder=holder, token=token, expect_fenced=expect_fenced)

    def grant(
        self, step: str, cwd: Path, url: str, holder: str, ttl_s: float, *, lease_url: str | None = None, **extra: Any
    ) -> int | None:
        """A lease (``lease acquire --json``, or the control's ``--acquire-only``); the token, recorded as a Grant."""
        wait_s: float = extra.get("wait_s", 0.0)
        resource: str | None = extra.get("resource")
        if self.system == "fencemigrate":
            args = ["lease", "acquire", "--holder", holder, "--ttl", f"{ttl_s:g}s", "--wait", f"{wait_s:g}s", "--json"]
            args += ["--lease-url", lease_url] if lease_url else []
            args += ["--resource", resource] if resource else []
            args += ["--preempt"] if extra.get("preempt") else []
            source = "redis" if lease_url else "lease service"
        else:
            args = ["--ttl", str(ttl_s), "--wait", str(wait_s), "--acquire-only"]
            args += ["--lease-url", lease_url] if lease_url else []
            args += ["--preempt"] if extra.get("preempt") else []
            source = "control redis" if lease_url else "control"
        started = time.monotonic()
        run = self.cli(step, cwd, args, holder, url=url, resource=resource)
        token = parse_token(run.output) if run.exit_code == 0 else None
        if token is None and self.system == "fencemigrate":
            for line in run.output.splitlines():
                released = released_grant(
                    json.loads(line) if line.startswith("{") else {},
                    holder,
                    started,
                    ttl_s,
                    source,
                    resource or self.resource,
                )
                self.outcome.grants += [released] if released is not None else []
        if token is not None:
            run.granted = token
            self.outcome.grants.append(
                Grant(holder, token, source, started, time.monotonic(), ttl_s, resource or self.resource)
            )
        return token

    def write(
        self, step: str, cwd: Path, url: str, holder: str, token: int, command: str, *, stale: bool = False
    ) -> Run:
        """``command`` under ``token`` (``--token``, or the control's ``--token ... --command``)."""
        if self.system == "fencemigrate":
            args = [*command.split(), "--token", str(token), "--holder", holder]
        else:
            args = ["--token", str(token), "--command", command]
        return self.cli(step, cwd, args, holder, token, url=url, expect_fenced=stale)

    def away(self, ttl_s: float) -> None:
        """A writer is away past its lease's TTL."""
        time.sleep(ttl_s + self.element.pause_s)

    # -- reading what happened -------------------------------------------------------------------------

    def history(self, url: str) -> list[Event]:
        """``faults_history`` in commit order."""
        return self.backend.events(url)

    def moved_history(self, old: str, new: str, copied_id: int) -> list[Event]:
        """The history of a database that moved (PostgreSQL, one server): the old database's rows and the
        new one's above ``copied_id`` (what it did not copy), in commit order."""
        rows: list[Any] = []
        for url, after_id in ((old, 0), (new, copied_id)):
            with self.backend.engine(url).connect() as conn:
                rows += conn.execute(
                    text(
                        f"SELECT pg_xact_commit_timestamp(xmin) AS at, id, {HISTORY_COLUMNS} FROM faults_history "
                        "WHERE id > :i"
                    ),
                    {"i": after_id},
                ).all()
        rows.sort(key=lambda row: (row[0], row[1]))
        return [
            Event(kind, None if token is None else int(token), holder or "", rev, ch)
            for _, _, kind, token, holder, rev, ch in rows
        ]

    def last_history_id(self, url: str) -> int:
        with self.backend.engine(url).connect() as conn:
            return int(conn.execute(text("SELECT coalesce(max(id), 0) FROM faults_history")).scalar_one())

    def close(self) -> None:
        for url in self.databases:
            self.backend.drop_database(url)
        if self.roles:
            with self.backend.engine(self.backend.server_url.rstrip("/") + "/postgres").connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                for role in self.roles:
                    conn.execute(text(f'DROP ROLE IF EXISTS "{role}"'))


# -- dump and restore ---------------------------------------------------------------------------------------


def create_extension(run: ElementRun, url: str) -> None:
    """The fence by ``CREATE EXTENSION fencemigrate`` (its files put in the server's SHAREDIR first,
    :func:`extension_files`), then the trigger copying grants into the history."""
    engine = run.backend.engine(url)
    with engine.begin() as conn:
        sharedir = conn.execute(text("SELECT setting FROM pg_config WHERE name = 'SHAREDIR'")).scalar_one()
        extension_files(Path(sharedir) / "extension")
        conn.execute(text("CREATE SCHEMA fencemigrate"))
        conn.execute(text("CREATE EXTENSION fencemigrate SCHEMA fencemigrate"))
    run.backend.log_grants(url)


def extension_files(directory: Path) -> None:
    """Put this checkout's extension files (``sql/fencemigrate.control``, ``sql/fencemigrate--*.sql``) in
    the server's extension directory, as ``make install`` of an extension does, where they differ; each
    by a rename, so a shard reading one meanwhile sees the old or the new file whole. They stay there
    (tests/test_extension.py puts back what it found). An extension directory the harness cannot write
    is a RuntimeError naming it."""
    if not os.access(directory, os.W_OK):
        raise RuntimeError(f"dump-restore: the server's extension directory {directory} is not writable")
    for source in sorted((BENCH.parent / "sql").glob("fencemigrate*")):
        if source.suffix not in (".control", ".sql"):
            continue
        target = directory / source.name
        if target.exists() and target.read_bytes() == source.read_bytes():
            continue
        partial = directory / f".{source.name}.{os.getpid()}"
        shutil.copyfile(source, partial)
        partial.replace(target)


def dump_restore(run: ElementRun) -> None:
    """A, B, a dump restored into a new database, then A (stale) and B write there."""
    ttl = run.element.ttl_s
    url = run.database()
    checkout = run.checkout("main", url)
    if run.system == "fencemigrate" and run.element.variant == "extension-installed":
        create_extension(run, url)
    elif run.system == "fencemigrate":
        run.install(checkout, url)
    a = run.grant("A", checkout, url, "agent-A", ttl)
    if a is None:
        raise RuntimeError("dump-restore: agent-A got no lease")
    run.write("A", checkout, url, "agent-A", a, "upgrade head")
    run.away(ttl)
    b = run.grant("B", checkout, url, "agent-B", ttl)
    if b is None:
        raise RuntimeError("dump-restore: agent-B got no lease")
    run.write("B", checkout, url, "agent-B", b, "downgrade r01")
    dumped = run.last_history_id(url)
    restored = run.backend.create_database(run.dir)
    run.databases.append(restored)
    dump = subprocess.run(["pg_dump", "--no-owner", pg_url(url)], capture_output=True, text=True, timeout=120)
    if dump.returncode != 0:
        raise RuntimeError(f"pg_dump failed: {dump.stderr}")
    load = subprocess.run(
        ["psql", "-q", "-X", "-v", "ON_ERROR_STOP=1", pg_url(restored)],
        input=dump.stdout,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if load.returncode != 0:
        raise RuntimeError(f"restoring the dump failed: {load.stderr}")
    project.repoint(checkout, restored)
    run.write("A", checkout, restored, "agent-A", a, "upgrade head", stale=True)
    run.write("B", checkout, restored, "agent-B", b, "upgrade head")
    run.outcome.events = run.moved_history(url, restored, dumped)


# -- the migration role attacks by SQL ---------------------------------------------------------------------


def make_roles(run: ElementRun, url: str) -> tuple[str, str]:
    """An owner and a migration role that may use the database (dropped with it)."""
    name = make_url(url).database
    owner, migrator = f"{name}_owner", f"{name}_migrator"
    with run.backend.engine(url).connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        for role in (owner, migrator):
            conn.execute(text(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER NOCREATEROLE NOCREATEDB'))
            run.roles.append(role)
            conn.execute(text(f'GRANT CREATE, CONNECT ON DATABASE "{name}" TO "{role}"'))
            conn.execute(text(f'GRANT ALL ON SCHEMA public TO "{role}"'))
        conn.execute(text(f'GRANT ALL ON faults_history, faults_control_lease TO "{migrator}"'))
        conn.execute(text(f'GRANT ALL ON SEQUENCE faults_history_id_seq TO "{migrator}"'))
    return owner, migrator


def as_role(url: str, role: str) -> str:
    return str(make_url(url).set(username=role).render_as_string(hide_password=False))


#: The migration role's SQL, per variant, one list per transaction (``:r`` the resource, ``:f`` the token).
FORGE_LEASE = (
    "UPDATE fencemigrate.lease SET token = :f, holder = 'mallory', expires_at = 'infinity' WHERE resource = :r"
)
RAISE_FENCE = "UPDATE fencemigrate.agent_fence SET token = :f WHERE resource = :r"
FORGE_EVENT = "INSERT INTO fencemigrate.fence_event (resource, kind, holder, token) VALUES (:r, 'GRANT', 'mallory', :f)"
PRETEND_CLAIM = (
    "SELECT set_config('fencemigrate.claimed_xact', pg_current_xact_id()::text, true)",
    f"SELECT pg_advisory_xact_lock_shared({CLAIM_LOCK_CLASS}, hashtext(:r))",
)
TOKENLESS_ROLLBACK = (
    "UPDATE alembic_version SET version_num = 'r02'",
    "DROP TABLE IF EXISTS t03",
    "INSERT INTO faults_history (kind, token, holder, revision, change_id) "
    "VALUES ('rollback', NULL, 'mallory', 'r03', 'c03')",
)
#: The copy's own incarnation, as a grant computes it (incarnation in sql/queries/postgresql.sql).
REWRITE_INCARNATION = (
    "UPDATE fencemigrate.agent_fence SET incarnation = format('%s/%s/%s', (pg_control_system()).system_identifier, "
    "('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint, "
    "(SELECT oid FROM pg_database WHERE datname = current_database())) WHERE resource = :r"
)
#: Alembic's version table as Alembic creates it.
CREATE_VERSION_TABLE = (
    "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
    "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"
)
ATTACKS: dict[str, list[tuple[str, ...]]] = {
    "drop-guard": [("DROP TRIGGER IF EXISTS fencemigrate_no_tokenless_write ON alembic_version", *TOKENLESS_ROLLBACK)],
    "rewrite-incarnation": [(REWRITE_INCARNATION,)],
    "forge-lease": [(FORGE_LEASE,), (RAISE_FENCE,), (FORGE_EVENT,)],
    "raise-fence": [(RAISE_FENCE,)],
    "forge-event": [(FORGE_EVENT,)],
    "pretend-claim": [(*PRETEND_CLAIM, *TOKENLESS_ROLLBACK)],
}
#: The control's: its lease row forged, or a plain write (it has no fence to raise or event to forge).
CONTROL_ATTACKS: dict[str, list[tuple[str, ...]]] = {
    "forge-lease": [
        ("UPDATE faults_control_lease SET token = :f, holder = 'mallory', expires_at = 1e12 WHERE resource = :r",)
    ],
    "pretend-claim": [TOKENLESS_ROLLBACK],
    "drop-guard": [TOKENLESS_ROLLBACK],
}


def attack(run: ElementRun, url: str, forged: int) -> list[str]:
    """The migration role's plain SQL, each transaction on its own; what was refused."""
    attacks = ATTACKS if run.system == "fencemigrate" else CONTROL_ATTACKS
    refused = []
    engine = run.backend.engine(url)
    for transaction in attacks.get(run.element.variant, []):
        try:
            with engine.begin() as conn:
                for statement in transaction:
                    conn.execute(text(statement), {"f": forged, "r": run.resource})
        except Exception as error:  # noqa: BLE001 - a refusal is the outcome looked for
            refused.append(f"{transaction[-1][:40]}...: {str(error).splitlines()[0][:120]}")
    return refused


def sql_attack(run: ElementRun) -> None:
    """A grants and writes as the migration role; its lease expires; the role forges; B grants and writes."""
    ttl = run.element.ttl_s
    owner_url = url = run.database()
    if run.system == "fencemigrate":
        try:
            url = two_roles(run, url, version_table_first=run.element.variant == "drop-guard")
        except SetupRefused as refused:
            if run.element.variant != "drop-guard":
                raise
            run.notes.append(f"install --grant-to refused a version table the migration role owns: {refused}")
            return
    checkout = run.checkout("main", url)
    a = run.grant("A", checkout, url, "agent-A", ttl)
    if a is None:
        raise RuntimeError("sql-attack: agent-A got no lease")
    run.write("A", checkout, url, "agent-A", a, "upgrade head")
    run.away(ttl)
    if run.element.variant == "rewrite-incarnation":
        rewrite_incarnation(run, owner_url, url, checkout)
        return
    forged = MAX_TOKEN if run.element.big_token else a + 1
    run.notes += [f"refused: {refusal}" for refusal in attack(run, url, forged)]
    if run.element.variant not in ("pretend-claim", "drop-guard"):
        run.write("M", checkout, url, "mallory", forged, "downgrade r01", stale=True)
    b = run.grant("B", checkout, url, "agent-B", ttl)
    if b is not None:
        run.write("B", checkout, url, "agent-B", b, "upgrade head")
    else:
        run.notes.append("agent-B got no lease after the attack")
    run.outcome.events = run.history(owner_url)


def two_roles(run: ElementRun, url: str, version_table_first: bool = False) -> str:
    """The owner installs the fence for the migration role (``install --grant-to``); the migration role's URL.
    ``version_table_first``: the migration role has created Alembic's version table before (it owns it)."""
    owner, migrator = make_roles(run, url)
    if version_table_first:
        with run.backend.engine(as_role(url, migrator)).begin() as conn:
            conn.execute(text(CREATE_VERSION_TABLE))
            conn.execute(text(f'GRANT ALL ON alembic_version TO "{owner}"'))
    owner_checkout = run.checkout("owner", as_role(url, owner))
    run.install(owner_checkout, url, migrator)
    with run.backend.engine(url).begin() as conn:  # the trigger writes as whoever granted
        conn.execute(text("ALTER FUNCTION public.faults_log_grant() SECURITY DEFINER"))
    return as_role(url, migrator)


def rewrite_incarnation(run: ElementRun, owner_url: str, url: str, checkout: Path) -> None:
    """B is granted and writes; the database is copied (``CREATE DATABASE ... TEMPLATE``); in the copy the
    migration role sets the fence's incarnation to the copy's own, so that C's grant there does not
    move epochs; D is granted the same number in the original and then writes to the copy."""
    ttl = run.element.ttl_s
    b = run.grant("B", checkout, url, "agent-B", ttl)
    if b is None:
        raise RuntimeError("sql-attack: agent-B got no lease")
    run.write("B", checkout, url, "agent-B", b, "downgrade r01")
    copied = run.last_history_id(owner_url)
    name = f"{make_url(owner_url).database}_copy"
    with run.backend.engine(run.backend.server_url.rstrip("/") + "/postgres").connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")
        conn.execute(text(f"CREATE DATABASE {name} TEMPLATE {make_url(owner_url).database}"))
    owner_copy = str(make_url(owner_url).set(database=name).render_as_string(hide_password=False))
    run.databases.append(owner_copy)
    copy = str(make_url(url).set(database=name).render_as_string(hide_password=False))
    if run.system == "fencemigrate":
        run.notes += [f"refused: {refusal}" for refusal in attack(run, copy, 0)]
    in_copy = run.checkout("copy", copy)
    c = run.grant("C", in_copy, copy, "agent-C", ttl)
    if c is not None:  # a lease in another database: not a second live holder beside D's
        run.outcome.grants[-1] = dataclasses.replace(run.outcome.grants[-1], resource=f"{run.resource} (copy)")
    d = run.grant("D", checkout, url, "agent-D", ttl)
    if c is not None and d is not None:
        run.write("D", in_copy, copy, "agent-D", d, "upgrade head", stale=d <= c)
    run.outcome.events = run.moved_history(owner_url, owner_copy, copied)


# -- mixed token sources -------------------------------------------------------------------------------------


def mixed_sources(run: ElementRun) -> None:
    """R holds a Redis lease and writes; W takes the built-in lease, or detaches the fence, and writes."""
    ttl, lease_url = run.element.ttl_s, run.backend.lease_url
    assert lease_url is not None
    url = run.database()
    checkout = run.checkout("main", url)
    if run.system == "fencemigrate":
        run.install(checkout, url)
    held = ttl + 10.0  # R's lease stays live through W's calls
    r = run.grant("R", checkout, url, "agent-R", held, lease_url=lease_url)
    if r is None:
        raise RuntimeError("mixed-sources: agent-R got no Redis lease")
    run.write("R", checkout, url, "agent-R", r, "upgrade head")
    if run.element.variant == "builtin-beside-redis":
        w = run.grant("W", checkout, url, "agent-W", ttl)
        if w is not None:
            run.write("W", checkout, url, "agent-W", w, "downgrade r01")
    else:
        if run.system == "fencemigrate":
            run.cli("W", checkout, ["lease", "detach"], "agent-W")
        run.write("W", checkout, url, "agent-W", 50, "downgrade r01", stale=True)
    run.write("R", checkout, url, "agent-R", r, "upgrade head")
    run.outcome.events = run.history(url)


# -- colliding resource names --------------------------------------------------------------------------------


def colliding_names(run: ElementRun) -> None:
    """V migrates svc-32835 (a 3 s revision); P takes svc-62004's lease with ``--preempt`` once V holds its
    claim lock (plus up to 0.75 s, so that P lands in r01, r02 or between them)."""
    victim, other = COLLIDING
    url = run.database(COLLIDING if run.system == "control" else ())
    slow = project.chain((0.0, 3.0, 0.0), False)
    checkout = run.checkout("victim", url, resource=victim, chain=slow)
    other_checkout = run.checkout("other", url, resource=other)
    if run.system == "fencemigrate":
        run.install(checkout, url)
        args = ["upgrade", "head", "--holder", "agent-V", "--ttl", "20s", "--wait", "5s"]
    else:
        args = ["--ttl", "20", "--wait", "5", "--claim-lock", "--command", "upgrade head"]
    started = time.monotonic()
    argv = [*run.command(url, "agent-V", victim), *args]
    process = run.process(checkout, argv, "agent-V", resource=victim)
    if claimed(run, url, victim, process):
        time.sleep(run.element.pause_s / 2)
        run.grant("P", other_checkout, url, "agent-P", run.element.ttl_s, resource=other, preempt=True, wait_s=2.0)
    else:
        run.notes.append("V never held its claim lock: P did not run")
    run.outcome.bystanders.append(run.finish("V", process, argv, started, holder="agent-V"))
    run.outcome.events = run.history(url)


def claimed(run: ElementRun, url: str, resource: str, process: Process) -> bool:
    """Wait (at most RUN_TIMEOUT_S) until a session holds ``resource``'s claim lock (fencemigrate's, or the
    control's); False if ``process`` ended first."""
    classid = CLAIM_LOCK_CLASS if run.system == "fencemigrate" else 1
    # fencemigrate keys the lock by the resource's own key (fence schema 0.10), the control by hashtext().
    key = "fencemigrate.lock_key(:r)" if run.system == "fencemigrate" else "hashtext(:r)"
    probe = text(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = :c "
        f"AND objid = {key}::oid AND objsubid = 2 "
        "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    deadline = time.monotonic() + RUN_TIMEOUT_S
    engine = run.backend.engine(url)
    while process.poll() is None and time.monotonic() < deadline:
        with engine.connect() as conn:
            if conn.execute(probe, {"c": classid, "r": resource}).scalar_one():
                return True
        time.sleep(0.05)
    return False


# -- MCP servers as writers ----------------------------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    """git in ``cwd``; its output (raises on failure)."""
    done = subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def try_git(cwd: Path, *args: str) -> bool:
    """git in ``cwd``; whether it succeeded."""
    done = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    return done.returncode == 0


def repositories(run: ElementRun, url: str) -> tuple[Path, Path, Path]:
    """A bare remote with BRANCH holding the project, and two clones of it (agent-A's, agent-B's)."""
    remote, first = run.dir / "remote.git", run.checkout("agent-A", url)
    git(run.dir, "init", "-q", "--bare", str(remote))
    for command in (
        ["init", "-q", "-b", BRANCH],
        ["config", "user.name", "agent-A"],
        ["config", "user.email", "agent-A@example.com"],
        ["add", "."],
        ["commit", "-q", "-m", "the project"],
        ["remote", "add", "origin", str(remote)],
        ["push", "-q", "origin", BRANCH],
    ):
        git(first, *command)
    second = run.dir / "agent-B"
    git(run.dir, "clone", "-q", "-b", BRANCH, str(remote), str(second))
    git(second, "config", "user.name", "agent-B")
    git(second, "config", "user.email", "agent-B@example.com")
    return remote, first, second


def commit(clone: Path, text_: str) -> str:
    """Commit ``text_`` as CHANGES.md in ``clone``; the commit's SHA."""
    (clone / "CHANGES.md").write_text(text_ + "\n")
    git(clone, "add", "CHANGES.md")
    git(clone, "commit", "-q", "-m", text_)
    return git(clone, "rev-parse", "HEAD")


class McpAgent:
    """One agent: a ``fencemigrate mcp`` server session (fencemigrate), or plain tools behind the
    hand-rolled lease (the control)."""

    def __init__(self, run: ElementRun, name: str, clone: Path, url: str, session: Any = None) -> None:
        self.run, self.name, self.clone, self.url, self.session = run, name, clone, url, session
        self.holder = f"agent-{name}"
        self.token: int | None = None
        self.sha: dict[str, str | None] = {}

    async def call(self, tool: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
        result = await self.session.call_tool(tool, arguments)
        if result.structured_content is None:  # an error answered in text only
            return not result.is_error, {"text": " ".join(getattr(part, "text", "") for part in result.content)}
        return not result.is_error, dict(result.structured_content)

    async def acquire(self, ttl_s: float, wait_s: float = 0.0) -> None:
        started = time.monotonic()
        if self.session is None:
            self.token = self.run.grant(self.name, self.clone, self.url, self.holder, ttl_s, wait_s=wait_s)
            return
        ok, content = await self.call("acquire_lease", ttl=f"{ttl_s:g}s", wait=f"{wait_s:g}s")
        self.token = int(content["server_token"]) if ok and content.get("server_token") is not None else None
        if self.token is None:  # what the server answered, for --verbose (a grant it made but did not report)
            answer = {key: content[key] for key in ("status", "message", "text", "lease") if key in content}
            self.run.notes.append(f"{self.holder}'s acquire_lease gave no token: {answer}"[:2000])
            released = released_grant(content, self.holder, started, ttl_s, "mcp", self.run.resource)
            self.run.outcome.grants += [released] if released is not None else []
        else:
            self.run.outcome.grants.append(
                Grant(self.holder, self.token, "mcp", started, time.monotonic(), ttl_s, self.run.resource)
            )

    async def write_file(self, path: str, content: str) -> None:
        started, target = time.monotonic(), self.clone / path
        if self.session is None:
            target.write_text(content)
            landed = True
        else:
            expected = self.sha.get(path) or "absent"
            landed, result = await self.call("write_file", path=path, content=content, expected_sha256=expected)
            self.sha[path] = result.get("sha256") if landed else self.sha.get(path)
        self.run.outcome.writes.append(SideWrite("file", self.holder, self.token, started, landed))

    async def push(self, message: str) -> None:
        mine = commit(self.clone, message)
        started = time.monotonic()
        if self.session is None:
            landed = try_git(self.clone, "push", "-q", "--force", "origin", BRANCH)
        else:
            landed, _ = await self.call("push_branch", branch=BRANCH)
        self.run.outcome.writes.append(SideWrite("push", self.holder, self.token, started, landed, mine))

    async def migrate(self, command: str) -> None:
        if self.session is not None:
            verb, revision = command.split()
            await self.call(verb, revision=revision)
        elif self.token is not None:
            self.run.write(self.name, self.clone, self.url, self.holder, self.token, command)


async def mcp_story(run: ElementRun, a: McpAgent, b: McpAgent, remote: Path) -> None:
    """The two agents' calls, in the element's order."""
    ttl = run.element.ttl_s
    await a.acquire(ttl)
    await a.write_file("notes.md", "A's notes\n")
    await a.push("A: the plan")
    await a.migrate("upgrade head")
    await anyio.sleep(ttl + run.element.pause_s)  # A is paused: its lease expires
    await b.acquire(ttl)
    git(b.clone, "pull", "-q", "--ff-only", "origin", BRANCH)
    await b.migrate("downgrade r01")
    await b.write_file("notes.md", "B's notes\n")
    if run.element.variant == "fresh-grant":
        await b.push("B: the work")
        await a.acquire(ttl, wait_s=ttl + 2.0)  # a fresh lease, once B's has expired
        await a.push("A: the old plan, pushed under a fresh lease")
    else:
        await a.write_file("notes.md", "A's notes, again\n")
        await a.push("A: more of the old plan")
    run.outcome.remote = set(git(remote, "rev-list", f"refs/heads/{BRANCH}").split())


def mcp_writers(run: ElementRun) -> None:
    """Two agents on one remote and one database: MCP servers (fencemigrate) or plain tools (control)."""
    url = run.database()
    remote, first, second = repositories(run, url)
    if run.system == "fencemigrate":
        run.install(first, url)

    async def scenario() -> None:
        if run.system == "control":
            await mcp_story(run, McpAgent(run, "A", first, url), McpAgent(run, "B", second, url), remote)
            return
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client

        def params(name: str, clone: Path) -> StdioServerParameters:
            args = ["-m", "faults.launch", "-c", "alembic.ini", "mcp", "--holder", f"agent-{name}"]
            args += ["--ttl", f"{run.element.ttl_s:g}s", "--branch", BRANCH]
            return StdioServerParameters(command=sys.executable, args=args, cwd=clone, env=run.env(f"agent-{name}"))

        with (run.dir / "mcp-A.stderr").open("w") as log_a, (run.dir / "mcp-B.stderr").open("w") as log_b:
            async with (
                stdio_client(params("A", first), errlog=log_a) as (read_a, write_a),
                ClientSession(read_a, write_a) as session_a,
                stdio_client(params("B", second), errlog=log_b) as (read_b, write_b),
                ClientSession(read_b, write_b) as session_b,
            ):
                await session_a.initialize()
                await session_b.initialize()
                agents = McpAgent(run, "A", first, url, session_a), McpAgent(run, "B", second, url, session_b)
                await mcp_story(run, *agents, remote)

    async def bounded() -> None:
        with anyio.fail_after(RUN_TIMEOUT_S):  # a server that hangs fails the schedule, it does not hang it
            await scenario()

    anyio.run(bounded)
    run.outcome.events = run.history(url)


ELEMENT_RUNS = {
    "mcp-writers": mcp_writers,
    "sql-attack": sql_attack,
    "mixed-sources": mixed_sources,
    "colliding-names": colliding_names,
    "dump-restore": dump_restore,
}


def run_element(
    backend: Backend, system: str, element: Element, template: Path, workdir: Path, index: int, keep: bool = False
) -> tuple[list[Violation], list[str], list[str]]:
    """Run ``element`` for ``system`` and check it: its violations, notes and trace."""
    runner = ElementRun(backend, system, element, template, workdir, index)
    try:
        ELEMENT_RUNS[element.kind](runner)
        return check_element(runner.outcome), runner.notes, trace(runner.outcome)
    finally:
        if not keep:
            runner.close()
            shutil.rmtree(runner.dir, ignore_errors=True)


def trace(outcome: ElementOutcome) -> list[str]:
    """The element's runs, grants, writes and history (``--verbose``)."""
    lines = [f"  element {outcome.kind}:"]
    for r in outcome.runs:
        last = " | ".join(r.output.strip().splitlines()[-2:])
        lines.append(f"    {r.step} {' '.join(r.argv[3:])} -> {r.exit_code}: {last}")
    lines += [f"    grant {g.token} to {g.holder} ({g.source})" for g in outcome.grants]
    lines += [f"    {w.kind} by {w.holder} under {w.token}: landed={w.landed}" for w in outcome.writes]
    lines += [f"    event {e.kind} token={e.token} {e.holder} {e.revision or ''}" for e in outcome.events]
    return lines
