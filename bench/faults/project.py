"""The Alembic project every schedule runs: a short chain whose revisions record their commits.

Made once per harness run with the real ``alembic init`` (generic template, env.py untouched),
copied for each schedule and each checkout. Every revision's ``upgrade()`` / ``downgrade()``
writes its DDL, then a row into ``faults_history`` in the same transaction (the token is the
one its run claimed, read back from the fence row, or ``FAULTS_TOKEN`` for runs that name
their token), can sleep while the transaction is open, and stops its own process
(``SIGSTOP``) at the point ``FAULTS_STOP_AT`` names, for the harness to resume it later:
``rNN:start`` / ``rNN:start-down`` first thing in ``upgrade()`` / ``downgrade()`` (after
fencemigrate's claim, before the DDL), ``rNN:ddl`` / ``rNN:downgrade`` after the DDL and the
history row, ``rNN:autocommit`` inside an ``autocommit_block()``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SCRIPT_DIR = "migrations"

_HOOKS = '''
import os
import signal
import time

import sqlalchemy as sa
from alembic import op

FENCE_TABLE = {fence_table!r}


def _point(name):
    """Stop this process here when the harness asked for it (it sends SIGCONT later)."""
    if os.environ.get("FAULTS_STOP_AT") == name:
        os.kill(os.getpid(), signal.SIGSTOP)


def _record(kind, change):
    """The history row, in the revision's own transaction."""
    bind = op.get_bind()
    token = os.environ.get("FAULTS_TOKEN")
    if token is None:
        token = bind.execute(sa.text(f"SELECT token FROM {{FENCE_TABLE}} WHERE resource = :r"),
                             {{"r": os.environ["FAULTS_RESOURCE"]}}).scalar()
    elif token == "none":
        token = None
    bind.execute(sa.text("INSERT INTO faults_history (kind, token, holder, revision, change_id) "
                         "VALUES (:k, :t, :h, :r, :c)"),
                 {{"k": kind, "t": token, "h": os.environ.get("FAULTS_HOLDER", "?"), "r": revision, "c": change}})
'''


@dataclass(frozen=True)
class Revision:
    """One revision: its id, parent, the change it makes (a renumbered copy shares it), its DDL."""

    rev: str
    down: str | None
    change: str
    table: str
    sleep_s: float = 0.0
    autocommit_block: bool = False
    if_not_exists: bool = False


def chain(sleeps: tuple[float, float, float], autocommit_block: bool) -> list[Revision]:
    """r01 .. r03; r02 sleeps inside its transaction, r03 may run an ``autocommit_block()``."""
    return [
        Revision("r01", None, "c01", "t01", sleeps[0]),
        Revision("r02", "r01", "c02", "t02", sleeps[1]),
        Revision("r03", "r02", "c03", "t03", sleeps[2], autocommit_block=autocommit_block),
    ]


def renumbered_copy(of: Revision, rev: str, down: str) -> Revision:
    """An agent's renumbered copy of ``of``: the same change under a new id, on top of ``down``."""
    return Revision(rev, down, of.change, of.table, of.sleep_s, if_not_exists=True)


def revision_source(revision: Revision, fence_table: str) -> str:
    """The text of the revision file."""
    create = f"CREATE TABLE {'IF NOT EXISTS ' if revision.if_not_exists else ''}{revision.table} (id int)"
    lines = [f"    op.execute({create!r})"]
    if revision.autocommit_block:
        lines = [
            "    with op.get_context().autocommit_block():",
            f"        _point('{revision.rev}:autocommit')",
            "        op.execute('CREATE INDEX CONCURRENTLY IF NOT EXISTS t01_id ON t01 (id)')",
            *lines,
        ]
    lines.insert(0, f"    _point('{revision.rev}:start')")
    lines += [f"    _record('apply', {revision.change!r})", f"    _point('{revision.rev}:ddl')"]
    if revision.sleep_s:
        lines.append(f"    time.sleep({revision.sleep_s!r})")
    down_lines = [
        f"    _point('{revision.rev}:start-down')",
        f"    op.execute('DROP TABLE IF EXISTS {revision.table}')",
        f"    _record('rollback', {revision.change!r})",
        f"    _point('{revision.rev}:downgrade')",
    ]
    if revision.autocommit_block:
        down_lines.append("    op.execute('DROP INDEX IF EXISTS t01_id')")
    return (
        f'"""{revision.change}\n\nRevision ID: {revision.rev}\n"""\n'
        f"revision = {revision.rev!r}\ndown_revision = {revision.down!r}\n"
        "branch_labels = None\ndepends_on = None\n"
        + _HOOKS.format(fence_table=fence_table)
        + "\n\ndef upgrade():\n"
        + "\n".join(lines)
        + "\n\n\ndef downgrade():\n"
        + "\n".join(down_lines)
        + "\n"
    )


def alembic_template(workdir: Path) -> Path:
    """``alembic init`` once, into ``workdir/template``."""
    target = workdir / "template"
    if not target.exists():
        alembic = Path(sys.executable).parent / "alembic"
        target.mkdir(parents=True)
        subprocess.run([str(alembic), "init", "-t", "generic", SCRIPT_DIR], cwd=target, check=True, capture_output=True)
    return target


def fence_aware_template(workdir: Path) -> Path:
    """``fencemigrate init`` once, into ``workdir/fence-aware``: an env.py that refuses tokenless writes."""
    target = workdir / "fence-aware"
    if not target.exists():
        target.mkdir(parents=True)
        subprocess.run(
            [str(Path(sys.executable).parent / "fencemigrate"), "init", SCRIPT_DIR],
            cwd=target,
            check=True,
            capture_output=True,
        )
    return target


def checkout(
    template: Path,
    target: Path,
    url: str,
    resource: str,
    revisions: list[Revision],
    fence_table: str,
    lease_url: str | None = None,
    per_migration: bool = False,
) -> Path:
    """A copy of the template at ``target`` pointing at ``url``, with ``revisions`` written; with
    ``per_migration``, env.py runs each revision in a transaction of its own."""
    shutil.copytree(template, target)
    if per_migration:
        env_py = target / SCRIPT_DIR / "env.py"
        configure = "connection=connection, target_metadata=target_metadata"
        text = env_py.read_text()
        assert text.count(configure) == 1, f"{configure!r} not found once in {env_py}: the generic template changed"
        env_py.write_text(text.replace(configure, configure + ", transaction_per_migration=True"))
    ini = target / "alembic.ini"
    settings = [f"sqlalchemy.url = {url.replace('%', '%%')}", f"fencemigrate_resource = {resource}"]
    if lease_url:
        settings.append(f"fencemigrate_lease_url = {lease_url}")
    lines = [line for line in ini.read_text().splitlines() if not line.startswith("sqlalchemy.url")]
    at = lines.index("[alembic]") + 1
    ini.write_text("\n".join(lines[:at] + settings + lines[at:]) + "\n")
    versions = target / SCRIPT_DIR / "versions"
    for revision in revisions:
        (versions / f"{revision.rev}_{revision.change}.py").write_text(revision_source(revision, fence_table))
    return target


def repoint(target: Path, url: str) -> None:
    """Point a checkout's ``sqlalchemy.url`` at ``url`` (the promoted server), in one rename: a run
    starting meanwhile reads the old file or the new one."""
    ini = target / "alembic.ini"
    lines = [
        f"sqlalchemy.url = {url.replace('%', '%%')}" if line.startswith("sqlalchemy.url") else line
        for line in ini.read_text().splitlines()
    ]
    ini.with_suffix(".new").write_text("\n".join(lines) + "\n")
    ini.with_suffix(".new").replace(ini)


def checkout_add(target: Path, revision: Revision, fence_table: str) -> None:
    """Write one more revision file into a checkout (an agent's renumbered copy)."""
    versions = target / SCRIPT_DIR / "versions"
    (versions / f"{revision.rev}_{revision.change}_copy.py").write_text(revision_source(revision, fence_table))
