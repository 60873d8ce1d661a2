"""The PostgreSQL offline (``--sql``) script helpers: the real ``psql`` client, the ledger rows, the
two-revision chain the offline tests write scripts for."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from support.db import libpq_url, query, schema_names
from support.project import Project, Result, run_command

RESOURCE = "db/migrations"
HOLDER = "offline-agent"


def psql_binary() -> str:
    """The real psql client (``/usr/bin/psql`` on the CI image)."""
    found = shutil.which("psql") or ("/usr/bin/psql" if Path("/usr/bin/psql").is_file() else None)
    assert found is not None, "psql is required for the offline tests"
    return found


def run_psql(url: str, script: str, cwd: Path, name: str = "script.sql") -> Result:
    """Write ``script`` to a file and run it with ``psql -X -v ON_ERROR_STOP=1 -f file``."""
    path = cwd / name
    path.write_text(script)
    return run_command([psql_binary(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", str(path), libpq_url(url)], cwd)


def ledger(url: str) -> list[tuple[str, int, str, str, str | None]]:
    """(revision, applied_token, holder, method, script_sha256) of every ledger row, by revision."""
    if "fencemigrate" not in schema_names(url):
        return []
    rows = query(
        url,
        "SELECT revision, applied_token, holder, method, script_sha256 "
        "FROM fencemigrate.applied_revision ORDER BY revision",
    )
    return [(str(r[0]), int(r[1]), str(r[2]), str(r[3]), r[4]) for r in rows]


def sha256_of(path: Path) -> str:
    """sha256 of a revision file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def add_chain(project: Project) -> dict[str, Path]:
    """a1: t1 + an index on it; b2: t2 + a column on t1. Returns revision -> file."""
    return {
        "a1": project.add_revision(
            "a1",
            None,
            ["CREATE TABLE t1 (id int)", "CREATE INDEX ix_t1_id ON t1 (id)"],
            "DROP TABLE t1",
            slug="t1",
        ),
        "b2": project.add_revision(
            "b2",
            "a1",
            ["CREATE TABLE t2 (id int)", "ALTER TABLE t1 ADD COLUMN name text"],
            ["DROP TABLE t2", "ALTER TABLE t1 DROP COLUMN name"],
            slug="t2",
        ),
    }


def claim_line(token: int) -> str:
    """The claim statement as it appears in the script."""
    return f"SELECT fencemigrate.claim('{RESOURCE}', {token});"
