"""The ledger has one writer: :class:`fencemigrate.fence.ledger.Ledger` (``fencemigrate/fence/ledger.py``).

The code-layout test finds, from the SQL files themselves, every named statement that inserts,
updates or deletes ledger rows (``applied_revision``), directly or through a fence-schema function,
and fails listing each module outside the recorder that names one. The behaviour tests run the
real commands, one per mode (transactional upgrade and downgrade, stamp, ``stamp --purge``,
pre-check, ``resolve``), on PostgreSQL, MariaDB and SQLite, and read the rows they leave.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from support.project import MakeProject, Project, sqlite_url

from fencemigrate.dialects.statements import statements_of

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fencemigrate"
RECORDER = PACKAGE / "fence" / "ledger.py"
SQL = ROOT / "sql"

_WRITES_LEDGER = r"(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+{schema}[._]applied_revision\b"
_FUNCTION = re.compile(
    r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+@extschema@\.(\w+)\s*\(.*?\$(\w*)\$(.*?)\$\2\$", re.S | re.I
)


def _without_comments(text: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def ledger_functions() -> set[str]:
    """Fence-schema functions (PostgreSQL) that write ledger rows, themselves or through another."""
    bodies: dict[str, list[str]] = {}
    for path in sorted(SQL.glob("fencemigrate--*.sql")):
        for match in _FUNCTION.finditer(_without_comments(path.read_text(encoding="utf-8"))):
            bodies.setdefault(match.group(1), []).append(match.group(3))
    writes = re.compile(_WRITES_LEDGER.format(schema="@extschema@"), re.I)
    writers = {name for name, texts in bodies.items() if any(writes.search(text) for text in texts)}
    while True:
        calls = {
            name
            for name, texts in bodies.items()
            if any(re.search(rf"@extschema@\.{writer}\s*\(", text) for text in texts for writer in writers)
        }
        if calls <= writers:
            return writers
        writers |= calls


def ledger_statements() -> dict[str, set[str]]:
    """``{statement name: {dialect, ...}}`` of every ``sql/queries/`` statement that writes ledger rows."""
    writes = re.compile(_WRITES_LEDGER.format(schema=r"\{schema\}"), re.I)
    calls = re.compile(r"\{schema\}\.(" + "|".join(sorted(ledger_functions())) + r")\s*\(")
    found: dict[str, set[str]] = {}
    for dialect in ("postgresql", "sqlite", "mysql"):
        for name, source in statements_of(dialect).items():
            text = _without_comments(source)
            if writes.search(text) or calls.search(text):
                found.setdefault(name, set()).add(dialect)
    return found


def named_strings(path: Path) -> set[str]:
    """Every string constant in a module's code."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_the_sql_files_name_the_ledger_writes() -> None:
    """The search below finds the ledger writes of every mode, on every dialect, and no claim."""
    assert ledger_functions() == {
        "claim_and_record",
        "delete_ledger_row",
        "record_apply",
        "record_rollback",
        "record_steps",
        "undo_record",
        "write_ledger_row",
    }
    assert ledger_statements() == {
        "begin_apply": {"mysql", "postgresql"},
        "begin_rollback": {"mysql", "postgresql"},
        "claim_and_record": {"postgresql"},
        "claim_and_record_now": {"postgresql"},
        "forget_revision": {"mysql", "postgresql"},
        "record_adopted": {"mysql", "postgresql", "sqlite"},
        "record_apply": {"mysql", "postgresql", "sqlite"},
        "record_rollback": {"mysql", "postgresql", "sqlite"},
        "record_stamp": {"mysql", "sqlite"},
        "record_steps": {"postgresql"},
        "settle_apply": {"mysql"},
        "settle_revision": {"mysql", "postgresql"},
        "settle_rollback": {"mysql"},
        "undo_record": {"postgresql"},
    }


# The MySQL/MariaDB --sql script writes the ledger's statements out, as text for the client, beside
# its own checks (runtime/precheck_script.py); nothing else loads them.
SCRIPT_WRITER = PACKAGE / "runtime" / "precheck_script.py"


def test_only_the_recorder_loads_ledger_writes() -> None:
    names = set(ledger_statements())
    offenders = {
        str(path.relative_to(ROOT)): sorted(names & named_strings(path))
        for path in sorted(PACKAGE.rglob("*.py"))
        if path not in (RECORDER, SCRIPT_WRITER) and names & named_strings(path)
    }
    assert offenders == {}, f"modules other than {RECORDER.relative_to(ROOT)} load ledger writes: {offenders}"


def test_the_recorder_loads_every_ledger_write() -> None:
    """Near miss of the test above: the statements are named where they are used, as plain strings."""
    assert set(ledger_statements()) <= named_strings(RECORDER)


# -- behaviour: the rows each mode leaves ------------------------------------------------------

LEDGER_EVENTS = ("APPLY", "STAMP", "ROLLBACK", "UNSTAMP", "RESOLVE")

Ledger = dict[str, tuple[int, str, str, str, bool]]
"""``{revision: (applied_token, holder, method, state, sha256 is the file's)}``."""

Events = list[tuple[str, str, int, str]]
"""``(kind, holder, token, revision)`` of the ledger's events, in order."""


@pytest.fixture(params=["postgresql", "postgresql-precheck", "mariadb", "sqlite"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, list[str]]:
    """An empty database of each backend, and the mode options of its runs."""
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "db.sqlite"), []
    if request.param == "mariadb":
        return str(request.getfixturevalue("mariadb_url")), []
    return str(request.getfixturevalue("pg_url")), ["--mode", "precheck"] if request.param.endswith("precheck") else []


def _table(url: str, name: str) -> str:
    return f"fencemigrate.{name}" if url.startswith("postgresql") else f"fencemigrate_{name}"


def _rows(url: str, sql: str) -> list[Any]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return list(connection.execute(sa.text(sql)))
    finally:
        engine.dispose()


def ledger(url: str, project: Project) -> Ledger:
    """The ledger rows of ``alembic_version``, as the tests' row readers see them."""
    state = "'applied'" if url.startswith("sqlite") else "state"
    rows = _rows(
        url,
        f"SELECT revision, applied_token, holder, method, {state}, script_sha256 "
        f"FROM {_table(url, 'applied_revision')} WHERE version_table = 'alembic_version'",
    )
    return {
        row[0]: (int(row[1]), row[2], row[3], row[4], row[5] == _sha256(project, row[0]))
        for row in sorted(rows, key=lambda row: str(row[0]))
    }


def events(url: str) -> Events:
    rows = _rows(url, f"SELECT kind, holder, token, revision FROM {_table(url, 'fence_event')} ORDER BY id")
    return [(row[0], row[1], int(row[2]), row[3]) for row in rows if row[0] in LEDGER_EVENTS]


def _sha256(project: Project, revision: str) -> str:
    (path,) = project.versions.glob(f"{revision}_*.py")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_mode_writes_the_ledger_rows_it_wrote_before(
    make_project: MakeProject, backend: tuple[str, list[str]]
) -> None:
    """Upgrade, downgrade, stamp and ``stamp --purge``: transactional on PostgreSQL and SQLite,
    pre-check on MariaDB and with ``--mode precheck``."""
    url, mode = backend
    project = make_project(url=url)
    project.add_chain(3)

    project.run_cli("upgrade", "head", "--token", "5", "--holder", "agent-A", *mode).check()
    assert ledger(url, project) == {
        "r01": (5, "agent-A", "upgrade", "applied", True),
        "r02": (5, "agent-A", "upgrade", "applied", True),
        "r03": (5, "agent-A", "upgrade", "applied", True),
    }
    applied = [("APPLY", "agent-A", 5, "r01"), ("APPLY", "agent-A", 5, "r02"), ("APPLY", "agent-A", 5, "r03")]
    assert events(url) == applied

    project.run_cli("downgrade", "r01", "--token", "6", "--holder", "agent-B", *mode).check()
    assert ledger(url, project) == {"r01": (5, "agent-A", "upgrade", "applied", True)}
    rolled_back = [("ROLLBACK", "agent-B", 6, "r03"), ("ROLLBACK", "agent-B", 6, "r02")]
    assert events(url) == applied + rolled_back

    project.run_cli("stamp", "r03", "--token", "7", "--holder", "agent-C", *mode).check()
    assert ledger(url, project) == {
        "r01": (5, "agent-A", "upgrade", "applied", True),
        "r02": (7, "agent-C", "stamp", "applied", True),
        "r03": (7, "agent-C", "stamp", "applied", True),
    }
    stamped = [("STAMP", "agent-C", 7, "r02"), ("STAMP", "agent-C", 7, "r03")]
    assert events(url) == applied + rolled_back + stamped

    project.run_cli("stamp", "--purge", "r02", "--token", "8", "--holder", "agent-D", *mode).check()
    assert ledger(url, project) == {
        "r01": (8, "agent-D", "stamp", "applied", True),
        "r02": (8, "agent-D", "stamp", "applied", True),
    }
    purged = [  # nothing was rolled back: the rows left the ledger with the version table's
        ("UNSTAMP", "agent-D", 8, "r01"),
        ("UNSTAMP", "agent-D", 8, "r02"),
        ("UNSTAMP", "agent-D", 8, "r03"),
        ("STAMP", "agent-D", 8, "r01"),
        ("STAMP", "agent-D", 8, "r02"),
    ]
    assert events(url) == applied + rolled_back + stamped + purged

    project.run_cli("stamp", "r01", "--token", "9", "--holder", "agent-E", *mode).check()
    assert ledger(url, project) == {"r01": (8, "agent-D", "stamp", "applied", True)}
    assert events(url) == applied + rolled_back + stamped + purged + [("UNSTAMP", "agent-E", 9, "r02")]


@pytest.fixture(params=["postgresql-precheck", "mariadb"])
def precheck_url(request: pytest.FixtureRequest) -> str:
    """A database where runs go in pre-check mode (``--mode precheck`` on PostgreSQL)."""
    return str(request.getfixturevalue("pg_url" if request.param.startswith("postgresql") else "mariadb_url"))


def test_precheck_marks_and_resolve_write_the_ledger_rows_they_wrote_before(
    make_project: MakeProject, precheck_url: str
) -> None:
    """A failing upgrade and a failing downgrade leave their marks; ``resolve`` settles and forgets them."""
    url, mode = precheck_url, ["--mode", "precheck"]
    project = make_project(url=url)
    project.add_revision("0001", None, ["CREATE TABLE one (id int)"], ["DROP TABLE one"])
    # Each fails after a DDL statement, which MariaDB commits (with the mark) on its own.
    project.add_revision(
        "0002",
        "0001",
        ["CREATE TABLE up (id int)", "SELECT * FROM missing"],
        ["CREATE TABLE down (id int)", "SELECT * FROM missing"],
    )

    project.run_cli("upgrade", "head", "--token", "5", "--holder", "agent-A", *mode).check(1)
    assert ledger(url, project) == {
        "0001": (5, "agent-A", "upgrade", "applied", True),
        "0002": (5, "agent-A", "upgrade", "applying", True),
    }
    project.run_cli("resolve", "0002", "--token", "6", "--as", "applied", "--holder", "ops").check()
    assert ledger(url, project) == {
        "0001": (5, "agent-A", "upgrade", "applied", True),
        "0002": (5, "agent-A", "upgrade", "applied", True),
    }
    # On MariaDB the ledger's triggers log the settled rows (APPLY, then ROLLBACK below); PostgreSQL's
    # resolve logs RESOLVE only.
    on_mariadb = url.startswith("mariadb")
    resolved = [("APPLY", "agent-A", 5, "0001"), *([("APPLY", "agent-A", 5, "0002")] if on_mariadb else [])]
    resolved.append(("RESOLVE", "ops", 6, "0002"))
    assert events(url) == resolved

    project.run_cli("downgrade", "0001", "--token", "7", "--holder", "agent-B", *mode).check(1)
    assert ledger(url, project) == {
        "0001": (5, "agent-A", "upgrade", "applied", True),
        "0002": (5, "agent-A", "upgrade", "rolling_back", True),
    }
    project.run_cli("resolve", "0002", "--token", "8", "--as", "rolled-back", "--holder", "ops").check()
    assert ledger(url, project) == {"0001": (5, "agent-A", "upgrade", "applied", True)}
    forgotten = [*([("ROLLBACK", "agent-B", 7, "0002")] if on_mariadb else []), ("RESOLVE", "ops", 8, "0002")]
    assert events(url) == resolved + forgotten


def test_resolving_a_refused_tokenless_upgrade_records_it_under_the_resolving_token(
    make_project: MakeProject, mariadb_url: str
) -> None:
    """MariaDB commits a plain ``alembic upgrade``'s DDL before its version write is refused: the
    revision resolved as applied gets its ledger row under the resolving token, and RESOLVE only."""
    url = mariadb_url
    project = make_project(url=url)
    project.add_chain(2)
    project.run_cli("upgrade", "r01", "--token", "5", "--holder", "agent-A").check()
    refused = project.run_alembic("upgrade", "head")
    assert "fencemigrate refused a version-table write without a fencing token" in refused.stderr, refused
    project.run_cli("resolve", "r02", "--token", "6", "--as", "applied", "--holder", "ops").check()
    assert ledger(url, project) == {
        "r01": (5, "agent-A", "upgrade", "applied", True),
        "r02": (6, "ops", "upgrade", "applied", True),
    }
    assert events(url) == [("APPLY", "agent-A", 5, "r01"), ("RESOLVE", "ops", 6, "r02")]
