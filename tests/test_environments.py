"""Fenced runs through UNMODIFIED env.py files and real project variants.

Every variant is checked by behaviour (tables, ``alembic_version``, ledger rows with
their ``applied_token``, the fence token) and by a FENCED case: a stale token, lower
than one that has already written, is rejected with exit 3 and nothing is applied.
Each FENCED case keeps a control: plain ``alembic`` lets the same stale write through.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from support.db import alembic_versions, libpq_url, query, schema_names, table_names
from support.fence_rows import add_claim_log, assert_fenced, claim_xacts, fence_token
from support.project import MakeProject, Project

RESOURCE = "db/migrations"
WARNING_LINE = (
    "    WARNING: this revision ran outside a single transaction (autocommit block or COMMIT): "
    "the fence was claimed before it and re-claimed and verified after it"
)
FORCED_LINE = "  ran in one transaction (overriding transaction_per_migration=True in env.py)"


# -- helpers ---------------------------------------------------------------------------------


def ledger(url: str) -> list[tuple[str, int, str]]:
    """(revision, applied_token, method) of every ledger row, by revision; [] without the schema."""
    if "fencemigrate" not in schema_names(url):
        return []
    rows = query(url, "SELECT revision, applied_token, method FROM fencemigrate.applied_revision ORDER BY revision")
    return [(str(r[0]), int(r[1]), str(r[2])) for r in rows]


def ledger_xacts(url: str) -> dict[str, str]:
    """revision -> the transaction (xmin) that wrote its ledger row."""
    rows = query(url, "SELECT revision, xmin::text FROM fencemigrate.applied_revision")
    return {str(r[0]): str(r[1]) for r in rows}


def index_names(url: str) -> list[str]:
    """Sorted names of the indexes in schema public that back no constraint (no primary keys)."""
    rows = query(
        url,
        "SELECT i.indexname FROM pg_indexes i WHERE i.schemaname = 'public' "
        "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname) ORDER BY 1",
    )
    return [str(r[0]) for r in rows]


def snapshot(url: str) -> dict[str, Any]:
    """Everything a migration could change: tables, indexes, version rows, ledger, fence."""
    return {
        "tables": table_names(url),
        "indexes": index_names(url),
        "versions": alembic_versions(url),
        "ledger": ledger(url),
        "fence": fence_token(url),
    }


def upgrade_json(project: Project, revision: str, token: int, *extra: str) -> dict[str, Any]:
    """Run ``fencemigrate upgrade REV --token N --json``, expect success, return the JSON."""
    result = project.run_cli("upgrade", revision, "--token", str(token), "--holder", "agent", "--json", *extra)
    result.check(0)
    payload: dict[str, Any] = json.loads(result.stdout)
    return payload


# -- project variants ------------------------------------------------------------------------

_LOCK_ENV_OLD = "    with connectable.connect() as connection:\n        context.configure("
_LOCK_ENV_NEW = (
    "    with connectable.connect() as connection:\n"
    '        connection.execute(text("SELECT pg_advisory_lock(42)"))\n'
    "        connection.commit()\n"
    "        context.configure("
)
_LOCK_RUN_OLD = "        with context.begin_transaction():\n            context.run_migrations()\n"
_LOCK_RUN_NEW = (
    _LOCK_RUN_OLD
    + '        connection.execute(text("SELECT pg_advisory_unlock(42)"))\n'
    + "        connection.commit()\n"
)


def generic_project(make_project: MakeProject) -> Project:
    """The real ``alembic init`` generic template, untouched."""
    return make_project()


def async_project(make_project: MakeProject) -> Project:
    """The real ``alembic init -t async`` template, untouched, on postgresql+psycopg (async)."""
    project = make_project(template="async")
    assert "async_engine_from_config" in project.env_py.read_text()
    assert project.url.startswith("postgresql+psycopg://")
    return project


def advisory_lock_project(make_project: MakeProject) -> Project:
    """Generic env.py that takes its own session advisory lock and commits before configure()."""
    project = make_project()
    project.edit_env("from sqlalchemy import pool\n", "from sqlalchemy import pool\nfrom sqlalchemy import text\n")
    project.edit_env(_LOCK_ENV_OLD, _LOCK_ENV_NEW, count=1)
    project.edit_env(_LOCK_RUN_OLD, _LOCK_RUN_NEW, count=1)
    return project


# Revision a1 records whether the migrating session holds advisory lock 42 (the env's own lock).
_A1_SQL = (
    "CREATE TABLE t1 AS SELECT count(*)::int AS lock_held FROM pg_locks "
    "WHERE locktype = 'advisory' AND objid = 42 AND pid = pg_backend_pid() AND granted"
)


@pytest.mark.parametrize(
    ("make_variant", "lock_held"),
    [
        pytest.param(generic_project, 0, id="generic"),
        pytest.param(async_project, 0, id="async"),
        pytest.param(advisory_lock_project, 1, id="env-takes-advisory-lock-and-commits"),
    ],
)
def test_unmodified_env_is_fenced(
    make_project: MakeProject,
    pg_url: str,
    make_variant: Callable[[MakeProject], Project],
    lock_held: int,
) -> None:
    """The project's own env.py runs; each step is claimed and recorded; a stale token is FENCED."""
    project = make_variant(make_project)
    env_before = project.env_py.read_text()
    project.add_revision("a1", None, _A1_SQL, "DROP TABLE t1", slug="t1")

    payload = upgrade_json(project, "head", 5)
    assert payload == {
        "status": "ok",
        "command": "upgrade",
        "resource": RESOURCE,
        "token": 5,
        "holder": "agent",
        "offline": False,
        "steps": [{"revisions": ["a1"], "direction": "up", "action": "applied", "token": 5, "atomic": True}],
        "heads": ["a1"],
        "installed_fence_schema": True,
        "leased": False,
        "lease_renewals": 0,
        "lease_note": None,
        "no_lease": None,
        "forced_single_transaction": False,
        "mode": "transactional",
        "adopted": None,
    }
    assert table_names(pg_url) == ["alembic_version", "t1"]
    assert query(pg_url, "SELECT lock_held FROM t1") == [(lock_held,)]
    assert alembic_versions(pg_url) == ["a1"]
    assert ledger(pg_url) == [("a1", 5, "upgrade")]
    assert fence_token(pg_url) == 5
    # The env is used as is: fencemigrate did not rewrite it.
    assert project.env_py.read_text() == env_before

    # FENCED: token 4 after token 5 wrote.
    project.add_revision("b2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    before = snapshot(pg_url)
    assert_fenced(project.run_cli("upgrade", "head", "--token", "4"), token=4, fence=5)
    assert snapshot(pg_url) == before
    if lock_held:
        # The env's session lock was released although the run failed (connection closed).
        assert query(pg_url, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 42") == [(0,)]

    # Control: plain alembic with the same env applies the same stale write.
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("upgrade", "head").check(0)
    assert table_names(pg_url) == ["alembic_version", "t1", "t2"]
    assert alembic_versions(pg_url) == ["b2"]


def _chain_of_three(project: Project) -> None:
    for number, (rev, down) in enumerate([("r1", None), ("r2", "r1"), ("r3", "r2")], start=1):
        project.add_revision(rev, down, f"CREATE TABLE c{number} (id int)", f"DROP TABLE c{number}", slug=f"c{number}")


@pytest.mark.parametrize(
    ("per_migration", "transactions"),
    [pytest.param(True, 3, id="transaction_per_migration"), pytest.param(False, 1, id="one-transaction")],
)
def test_transaction_per_migration_claims_in_each_steps_transaction(
    project: Project, pg_url: str, per_migration: bool, transactions: int
) -> None:
    """With transaction_per_migration=True each of 3 steps claims in its own transaction, which
    also writes that step's ledger row; without it one transaction claims once, before the first
    step's DDL, and holds the fence row's lock for the other steps."""
    if per_migration:
        project.set_env_option("transaction_per_migration", True)
    project.run_cli("install").check(0)
    add_claim_log(pg_url)
    _chain_of_three(project)

    payload = upgrade_json(project, "head", 7)
    assert [step["revisions"] for step in payload["steps"]] == [["r1"], ["r2"], ["r3"]]
    assert all(step["atomic"] for step in payload["steps"])
    assert payload["forced_single_transaction"] is False
    assert table_names(pg_url) == ["alembic_version", "c1", "c2", "c3"]
    assert alembic_versions(pg_url) == ["r3"]
    assert ledger(pg_url) == [("r1", 7, "upgrade"), ("r2", 7, "upgrade"), ("r3", 7, "upgrade")]
    assert fence_token(pg_url) == 7

    claims = claim_xacts(pg_url)
    written = ledger_xacts(pg_url)
    # Each transaction claims once, with its first step's ledger row: its wait found the claim's locks
    # free and took them at once (docs/cli.md). The first also claims in its wait (in a savepoint): the
    # resource has no fence row before the first claim. A second wrapper would add more.
    claimed = list(dict.fromkeys(claims))
    assert len(claims) == transactions + 1
    assert len(claimed) == transactions
    # Every step's ledger row is written in a transaction that holds the claim.
    assert [written["r1"], written["r2"], written["r3"]] == claimed * (3 // transactions)


def test_transaction_per_migration_stale_token_is_fenced(project: Project, pg_url: str) -> None:
    """transaction_per_migration=True: a stale token on a 3-revision chain applies none of it."""
    project.set_env_option("transaction_per_migration", True)
    project.add_revision("r0", None, "CREATE TABLE c0 (id int)", "DROP TABLE c0", slug="c0")
    upgrade_json(project, "head", 9)
    _chain_of_three(project)
    project.add_revision("r1", "r0", "CREATE TABLE c1 (id int)", "DROP TABLE c1", slug="c1")
    before = snapshot(pg_url)
    assert before["ledger"] == [("r0", 9, "upgrade")]

    assert_fenced(project.run_cli("upgrade", "head", "--token", "8"), token=8, fence=9)
    assert snapshot(pg_url) == before

    # Control: plain alembic applies the whole stale chain.
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("upgrade", "head").check(0)
    assert table_names(pg_url) == ["alembic_version", "c0", "c1", "c2", "c3"]


def test_transaction_per_migration_failing_step_keeps_earlier_steps(project: Project, pg_url: str) -> None:
    """Per-migration transactions: when step 3 fails, steps 1-2 stay committed with their ledger rows."""
    project.set_env_option("transaction_per_migration", True)
    _chain_of_three(project)
    project.add_revision("r3", "r2", ["CREATE TABLE c3 (id int)", "SELECT 1/0"], "DROP TABLE c3", slug="c3")

    result = project.run_cli("upgrade", "head", "--token", "4")
    result.check(1)
    assert "division by zero" in result.stderr
    assert table_names(pg_url) == ["alembic_version", "c1", "c2"]
    assert alembic_versions(pg_url) == ["r2"]
    assert ledger(pg_url) == [("r1", 4, "upgrade"), ("r2", 4, "upgrade")]


# -- revisions that leave the transaction -------------------------------------------------------

_AUTOCOMMIT_INDEX = """
with op.get_context().autocommit_block():
    op.execute("CREATE INDEX CONCURRENTLY ix_items_name ON items (name)")
"""


def _items_chain(project: Project) -> None:
    """a1 creates items; b2 builds an index CONCURRENTLY in an autocommit block; c3 a table."""
    project.add_revision("a1", None, "CREATE TABLE items (id int, name text)", "DROP TABLE items", slug="items")
    project.add_revision("b2", "a1", (), "DROP INDEX ix_items_name", slug="index", extra_upgrade_code=_AUTOCOMMIT_INDEX)
    project.add_revision("c3", "b2", "CREATE TABLE after_index (id int)", "DROP TABLE after_index", slug="after")


def test_autocommit_block_text_output_warns(project: Project, pg_url: str) -> None:
    """A revision with autocommit_block() applies; the text output warns that it was not atomic."""
    _items_chain(project)
    result = project.run_cli("upgrade", "head", "--token", "6", "--holder", "agent").check(0)
    assert result.stdout.splitlines() == [
        "upgrade done: resource db/migrations, token 6, holder agent",
        "  installed the fence schema",
        "  applied a1 under token 6",
        "  applied b2 under token 6",
        WARNING_LINE,
        "  applied c3 under token 6",
        "  heads now: c3",
    ]
    assert index_names(pg_url) == ["ix_items_name"]
    assert table_names(pg_url) == ["after_index", "alembic_version", "items"]
    assert alembic_versions(pg_url) == ["c3"]
    assert ledger(pg_url) == [("a1", 6, "upgrade"), ("b2", 6, "upgrade"), ("c3", 6, "upgrade")]
    assert fence_token(pg_url) == 6


@pytest.mark.parametrize("per_migration", [False, True], ids=["one-transaction", "transaction_per_migration"])
def test_autocommit_block_json_marks_the_step_non_atomic(project: Project, pg_url: str, per_migration: bool) -> None:
    """JSON: the autocommit-block step has "atomic": false, the others "atomic": true. With one
    revision per transaction, the ledger row written with the claim is taken back before the
    block commits and written again after it, leaving no pending COMMIT check behind."""
    if per_migration:
        project.set_env_option("transaction_per_migration", True)
    _items_chain(project)
    payload = upgrade_json(project, "head", 6)
    assert [(step["revisions"], step["atomic"]) for step in payload["steps"]] == [
        (["a1"], True),
        (["b2"], False),
        (["c3"], True),
    ]
    assert alembic_versions(pg_url) == ["c3"]
    assert index_names(pg_url) == ["ix_items_name"]
    assert ledger(pg_url) == [("a1", 6, "upgrade"), ("b2", 6, "upgrade"), ("c3", 6, "upgrade")]
    assert query(pg_url, "SELECT count(*) FROM fencemigrate.pending_version_check") == [(0,)]


def test_autocommit_block_stale_token_is_fenced_before_anything_runs(project: Project, pg_url: str) -> None:
    """A stale token on a chain containing an autocommit block is FENCED before the block runs."""
    _items_chain(project)
    upgrade_json(project, "a1", 10)
    before = snapshot(pg_url)

    assert_fenced(project.run_cli("upgrade", "head", "--token", "9"), token=9, fence=10)
    assert snapshot(pg_url) == before
    assert index_names(pg_url) == []

    # Control: plain alembic runs the stale chain, CONCURRENTLY index included.
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("upgrade", "head").check(0)
    assert index_names(pg_url) == ["ix_items_name"]
    assert alembic_versions(pg_url) == ["c3"]


def test_newer_token_during_autocommit_block_is_fenced_after_it(project: Project, pg_url: str) -> None:
    """A newer token that writes while the autocommit block runs is caught by the re-claim after it.

    The revision creates ``before_block``, then in its autocommit block builds an index
    CONCURRENTLY and, from a second connection, raises the fence to 99 (a newer holder),
    then creates ``after_block``. The run must be FENCED (exit 3); ``after_block``, the
    ``alembic_version`` update and the ledger row are rolled back. What ran before and
    inside the block cannot be rolled back: ``before_block`` was committed when the block
    started and the CONCURRENTLY index ran outside any transaction, so both stay (this
    is why such steps are reported non-atomic).
    """
    project.add_revision("a1", None, "CREATE TABLE items (id int, name text)", "DROP TABLE items", slug="items")
    upgrade_json(project, "head", 7)
    other_url = libpq_url(pg_url)
    project.add_revision(
        "b2",
        "a1",
        "CREATE TABLE IF NOT EXISTS before_block (id int)",
        slug="takeover",
        extra_upgrade_code=f"""
            import psycopg
            with op.get_context().autocommit_block():
                op.execute("CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_items_name ON items (name)")
                with psycopg.connect({other_url!r}, autocommit=True) as other:
                    other.execute(
                        "UPDATE fencemigrate.agent_fence SET token = 99 WHERE resource = 'db/migrations'"
                    )
            op.execute("CREATE TABLE after_block (id int)")
        """,
    )

    assert_fenced(project.run_cli("upgrade", "head", "--token", "8"), token=8, fence=99, granted_only=True)
    assert "after_block" not in table_names(pg_url)
    assert alembic_versions(pg_url) == ["a1"]
    assert ledger(pg_url) == [("a1", 7, "upgrade")]
    assert fence_token(pg_url) == 99
    # Outside the step's transaction, so not rolled back:
    assert index_names(pg_url) == ["ix_items_name"]
    assert table_names(pg_url) == ["alembic_version", "before_block", "items"]

    # Control: plain alembic runs the same revision to the end despite the newer token.
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("upgrade", "head").check(0)
    assert alembic_versions(pg_url) == ["b2"]
    assert "after_block" in table_names(pg_url)


AUTOCOMMIT_LEFT = (
    "Statements of revision b2 ran in an autocommit block, outside the fenced transaction, and may have been "
    "left applied (so may what the revision ran before the block): compare the schema with the revision before "
    "you re-plan."
)


def test_fenced_after_an_autocommit_block_says_what_the_block_left(project: Project, pg_url: str) -> None:
    """FENCED after b2's autocommit block committed: the message (text and JSON), the timeline's
    FENCED event and `state` (text and JSON) say that statements of b2 ran in an autocommit
    block and may have been left applied. Until b2 is applied by someone, `state` keeps saying so.
    (The revision raises every fence to 99 from another connection while its block runs.)
    The control: a FENCED run that never reached its block says nothing of the kind."""
    project.add_revision("a1", None, "CREATE TABLE items (id int, name text)", "DROP TABLE items", slug="items")
    upgrade_json(project, "head", 7)
    project.add_revision(
        "b2",
        "a1",
        "CREATE TABLE IF NOT EXISTS before_block (id int)",
        "DROP TABLE IF EXISTS before_block",
        slug="takeover",
        extra_upgrade_code=f"""
            import psycopg
            with op.get_context().autocommit_block():
                op.execute("CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_items_name ON items (name)")
                with psycopg.connect({libpq_url(pg_url)!r}, autocommit=True) as other:
                    other.execute(
                        "UPDATE fencemigrate.agent_fence SET token = GREATEST(token, 99)"
                    )
        """,
    )

    fenced = project.run_cli("upgrade", "head", "--token", "8", "--holder", "agent-A")
    assert_fenced(fenced, token=8, fence=99, granted_only=True)
    assert AUTOCOMMIT_LEFT in fenced.stderr.splitlines(), fenced.stderr
    other = ("--resource", "db/other", "--holder", "agent-B", "--json")
    payload = json.loads(project.run_cli("upgrade", "head", "--token", "8", *other).check(3).stdout)
    assert payload["autocommitted"] == ["b2"] and AUTOCOMMIT_LEFT in payload["message"], payload
    assert alembic_versions(pg_url) == ["a1"]

    state = project.run_cli("state").check(0).stdout.splitlines()
    left = [line for line in state if line.startswith("AUTOCOMMIT: ")]
    assert len(left) == 2, state
    assert left[0].startswith(
        "AUTOCOMMIT: statements of revision b2 (db/migrations) ran in an autocommit block of a run by agent-A "
        "under token 8 that was FENCED at "
    ), left
    assert left[0].endswith("; they may have been left applied: compare the schema with the revision"), left
    leftovers = json.loads(project.run_cli("state", "--json").check(0).stdout)["autocommit_leftovers"]
    assert [(row["resource"], row["revisions"], row["holder"], row["token"]) for row in leftovers] == [
        ("db/migrations", ["b2"], "agent-A", 8),
        ("db/other", ["b2"], "agent-B", 8),
    ], leftovers
    events = json.loads(project.run_cli("timeline", "--json").check(0).stdout)["events"]
    assert [event["detail"].get("autocommitted") for event in events if event["kind"] == "FENCED"] == [["b2"], ["b2"]]

    # Once b2 is applied (here by the holder of token 99), its leftovers are part of it.
    project.run_cli("upgrade", "head", "--token", "99").check(0)
    assert json.loads(project.run_cli("state", "--json").check(0).stdout)["autocommit_leftovers"] == []

    # Control: a run FENCED before any autocommit block says nothing about one.
    project.add_revision("c3", "b2", "CREATE TABLE c3 (id int)", "DROP TABLE c3", slug="c3")
    stale = project.run_cli("upgrade", "head", "--token", "50")
    assert_fenced(stale, token=50, fence=99)
    assert "autocommit" not in stale.stderr
    assert json.loads(project.run_cli("state", "--json").check(0).stdout)["autocommit_leftovers"] == []


def test_newer_token_between_two_autocommit_blocks_stops_the_second(project: Project, pg_url: str) -> None:
    """The fence is claimed inside EVERY autocommit block: after the first block lets a newer
    token (99) write, the second block is FENCED before its statement runs.

    The first block's CONCURRENTLY index ran outside any transaction and stays.
    """
    project.add_revision("a1", None, "CREATE TABLE items (id int, name text)", "DROP TABLE items", slug="items")
    upgrade_json(project, "head", 7)
    project.add_revision(
        "b2",
        "a1",
        (),
        slug="two_blocks",
        extra_upgrade_code=f"""
            import psycopg
            context = op.get_context()
            with context.autocommit_block():
                op.execute("CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_first ON items (id)")
                with psycopg.connect({libpq_url(pg_url)!r}, autocommit=True) as other:
                    other.execute(
                        "UPDATE fencemigrate.agent_fence SET token = 99 WHERE resource = 'db/migrations'"
                    )
            with context.autocommit_block():
                op.execute("CREATE INDEX CONCURRENTLY IF NOT EXISTS ix_second ON items (name)")
        """,
    )
    assert_fenced(project.run_cli("upgrade", "head", "--token", "8"), token=8, fence=99, granted_only=True)
    assert index_names(pg_url) == ["ix_first"]
    assert alembic_versions(pg_url) == ["a1"]
    assert ledger(pg_url) == [("a1", 7, "upgrade")]
    assert fence_token(pg_url) == 99

    # Control: plain alembic runs both blocks.
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("upgrade", "head").check(0)
    assert index_names(pg_url) == ["ix_first", "ix_second"]


_COMMIT_MIDWAY = """
op.execute("CREATE TABLE before_commit (id int)")
op.execute("COMMIT")
op.execute("CREATE TABLE after_commit (id int)")
"""


def test_commit_midway_is_reclaimed_and_reported_non_atomic(project: Project, pg_url: str) -> None:
    """A revision running COMMIT midway applies, is re-claimed after, reported non-atomic, recorded."""
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.add_revision("b2", "a1", (), slug="commit", extra_upgrade_code=_COMMIT_MIDWAY)
    project.add_revision("c3", "b2", "CREATE TABLE t3 (id int)", "DROP TABLE t3", slug="t3")

    payload = upgrade_json(project, "head", 12)
    assert [(step["revisions"], step["atomic"]) for step in payload["steps"]] == [
        (["a1"], True),
        (["b2"], False),
        (["c3"], True),
    ]
    assert table_names(pg_url) == ["after_commit", "alembic_version", "before_commit", "t1", "t3"]
    assert alembic_versions(pg_url) == ["c3"]
    assert ledger(pg_url) == [("a1", 12, "upgrade"), ("b2", 12, "upgrade"), ("c3", 12, "upgrade")]
    assert fence_token(pg_url) == 12


def test_commit_midway_newer_token_is_fenced_after_it(project: Project, pg_url: str) -> None:
    """A newer token writing after the revision's own COMMIT is caught: the rest of the step is
    rolled back (``before_commit`` was already committed by the revision itself and stays)."""
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    upgrade_json(project, "head", 7)
    project.add_revision(
        "b2",
        "a1",
        (),
        slug="commit",
        extra_upgrade_code=f"""
            import psycopg
            op.execute("CREATE TABLE IF NOT EXISTS before_commit (id int)")
            op.execute("COMMIT")
            with psycopg.connect({libpq_url(pg_url)!r}, autocommit=True) as other:
                other.execute("UPDATE fencemigrate.agent_fence SET token = 99 WHERE resource = 'db/migrations'")
            op.execute("CREATE TABLE after_commit (id int)")
        """,
    )
    assert_fenced(project.run_cli("upgrade", "head", "--token", "8"), token=8, fence=99, granted_only=True)
    assert table_names(pg_url) == ["alembic_version", "before_commit", "t1"]
    assert alembic_versions(pg_url) == ["a1"]
    assert ledger(pg_url) == [("a1", 7, "upgrade")]
    assert fence_token(pg_url) == 99

    # Control: plain alembic runs the same revision to the end despite the newer token.
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("upgrade", "head").check(0)
    assert alembic_versions(pg_url) == ["b2"]
    assert "after_commit" in table_names(pg_url)


# -- reapply overrides transaction_per_migration ------------------------------------------------


def test_reapply_forces_one_transaction(project: Project, pg_url: str) -> None:
    """reapply with transaction_per_migration=True in env.py runs in ONE transaction and says so."""
    project.set_env_option("transaction_per_migration", True)
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.add_revision("b2", "a1", "CREATE TABLE t2 (id int)", "DROP TABLE t2", slug="t2")
    upgrade_json(project, "head", 5)
    add_claim_log(pg_url)

    result = project.run_cli("reapply", "a1", "--token", "5", "--holder", "agent", "--json").check(0)
    payload = json.loads(result.stdout)
    assert payload["forced_single_transaction"] is True
    assert payload["command"] == "reapply"
    assert [(s["revisions"], s["direction"]) for s in payload["steps"]] == [
        (["b2"], "down"),
        (["a1"], "down"),
        (["a1"], "up"),
        (["b2"], "up"),
    ]
    claims = claim_xacts(pg_url)
    # One transaction claims (with its first step: its wait found the locks free) and holds the fence
    # row for all four steps.
    assert len(claims) == 1
    assert len(set(claims)) == 1
    assert set(ledger_xacts(pg_url).values()) == set(claims)
    assert ledger(pg_url) == [("a1", 5, "upgrade"), ("b2", 5, "upgrade")]
    assert alembic_versions(pg_url) == ["b2"]

    text = project.run_cli("reapply", "a1", "--token", "5", "--holder", "agent").check(0)
    assert FORCED_LINE in text.stdout.splitlines()
    assert text.stdout.splitlines()[0] == "reapply done: resource db/migrations, token 5, holder agent"

    # FENCED: a stale token may not re-apply what token 5 applied.
    before = snapshot(pg_url)
    assert_fenced(project.run_cli("reapply", "a1", "--token", "4"), token=4, fence=5)
    assert snapshot(pg_url) == before

    # Control: plain alembic rolls back and re-applies without any token.
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("downgrade", "base").check(0)
    project.run_alembic("upgrade", "head").check(0)
    assert alembic_versions(pg_url) == ["b2"]


# -- ledger rows written in one batch must still commit with their DDL ---------------------------

_ESCAPES = {
    "autocommit-block": """
            import psycopg
            with op.get_context().autocommit_block():
                with psycopg.connect({url!r}, autocommit=True) as other:
                    other.execute("UPDATE fencemigrate.agent_fence SET token = 99 WHERE resource = 'db/migrations'")
            op.execute("CREATE TABLE after_escape (id int)")
        """,
    "commit-statement": """
            import psycopg
            op.execute("COMMIT")
            with psycopg.connect({url!r}, autocommit=True) as other:
                other.execute("UPDATE fencemigrate.agent_fence SET token = 99 WHERE resource = 'db/migrations'")
            op.execute("CREATE TABLE after_escape (id int)")
        """,
}


@pytest.mark.parametrize("escape", list(_ESCAPES.values()), ids=list(_ESCAPES))
def test_deferred_ledger_rows_commit_with_their_ddl(project: Project, pg_url: str, escape: str) -> None:
    """In one transaction the ledger rows of a1 wait to be written in one batch. When b2 ends the
    transaction (autocommit block or COMMIT), they are written first, so a1's committed DDL and
    version row come with its ledger row; a newer token then fences the rest of b2."""
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.add_revision("b2", "a1", (), slug="escape", extra_upgrade_code=escape.format(url=libpq_url(pg_url)))

    assert_fenced(project.run_cli("upgrade", "head", "--token", "8"), token=8, fence=99, granted_only=True)
    assert table_names(pg_url) == ["alembic_version", "t1"]
    assert alembic_versions(pg_url) == ["a1"]
    assert ledger(pg_url) == [("a1", 8, "upgrade")]
    assert fence_token(pg_url) == 99

    # Control: plain alembic runs b2 to the end despite the newer token.
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("upgrade", "head").check(0)
    assert alembic_versions(pg_url) == ["b2"]
    assert "after_escape" in table_names(pg_url)


# -- transaction_per_migration: the ledger row goes with the claim, COMMIT proves the rest ---------

_RAW_COMMIT = """
op.execute("CREATE TABLE before_raw_commit (id int)")
op.get_bind().connection.commit()  # straight to the DBAPI connection: SQLAlchemy sees nothing
op.execute("CREATE TABLE after_raw_commit (id int)")
"""


def test_per_migration_raw_dbapi_commit_is_refused_at_that_commit(project: Project, pg_url: str) -> None:
    """With one revision per transaction, a revision that commits through the raw DBAPI connection
    is refused by the check at COMMIT (the version row is not there yet): that revision leaves
    nothing, exit 1; the revision before it stays committed with its ledger row."""
    project.set_env_option("transaction_per_migration", True)
    project.add_revision("a1", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1", slug="t1")
    project.add_revision("b2", "a1", (), slug="raw", extra_upgrade_code=_RAW_COMMIT)

    result = project.run_cli("upgrade", "head", "--token", "5")
    result.check(1)
    assert "committed its transaction before Alembic recorded it" in result.stderr
    assert "Traceback" not in result.stderr
    assert table_names(pg_url) == ["alembic_version", "t1"]
    assert alembic_versions(pg_url) == ["a1"]
    assert ledger(pg_url) == [("a1", 5, "upgrade")]
    assert fence_token(pg_url) == 5

    # Control: plain alembic lets the revision commit half of itself and run the rest unfenced.
    project.allow_tokenless_writes()  # plain alembic is refused on a fenced database
    project.run_alembic("upgrade", "head").check(0)
    assert alembic_versions(pg_url) == ["b2"]
    assert {"before_raw_commit", "after_raw_commit"} <= set(table_names(pg_url))
