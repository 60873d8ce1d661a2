"""The incident from the design notes, replayed end to end through the ``fencemigrate`` CLI.

Agent A applies its 0042 under token 33 and goes quiet; its lease expires and agent B
(token 34) rolls A's 0042 back, rewrites it and applies its own version. A wakes up
believing it still holds the lock, and (1) re-applies its 0042, then (2) renumbers its
copy to 0043 and upgrades. With fencemigrate both writes bounce (FENCED, exit 3) and
B's schema survives; the CONTROL replays the same steps with plain ``alembic`` on
separate databases, where A's stale writes go through and B's schema is destroyed.

Each agent has its own checkout (project directory) of the shared repository; both
point at the same database, as in the incident.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
from support import incident_story
from support.db import alembic_versions, column_names, query, table_exists
from support.fence_rows import (
    FENCED_NOT_YOURS_LINES,
    LedgerEntry,
    fence_tokens,
    ledger,
    scratch_database,
    snapshot,
    stderr_lines,
)
from support.incident_story import (
    A_COLUMNS,
    B_COLUMNS,
    STALE_REASON,
    assert_fenced_json,
    assert_fenced_text,
    clone_checkout,
    fm,
    write_a_0042,
    write_a_0043,
    write_b_0042,
)
from support.pg import PgServer
from support.project import MakeProject, Project

# -- the two agents' checkouts ----------------------------------------------------------------


def replay_until_b_applied(a: Project, b: Project) -> None:
    """14:28 A applies its 0042 under 33; 14:31 B (34) rolls it back, rewrites it, applies its own."""
    write_a_0042(a)
    out = fm(a, "upgrade", "head", token=33, holder="agent-A").check(0)
    assert "  applied 0042 under token 33" in out.stdout.splitlines()
    assert column_names(a.url, "invoice_currency") == A_COLUMNS

    write_a_0042(b)  # B's checkout has A's pushed 0042
    out = fm(b, "downgrade", "base", token=34, holder="agent-B").check(0)
    assert "  rolled back 0042 under token 34" in out.stdout.splitlines()
    assert not table_exists(b.url, "invoice_currency")

    write_b_0042(b)
    out = fm(b, "upgrade", "head", token=34, holder="agent-B").check(0)
    assert out.stdout.splitlines()[0] == "upgrade done: resource db/migrations, token 34, holder agent-B"
    assert "  applied 0042 under token 34" in out.stdout.splitlines()
    assert_b_schema(b.url)


def assert_b_schema(url: str, fence: int = 34) -> None:
    """B's 0042 is what the database holds: B's columns and row, version 0042, B's ledger row."""
    assert column_names(url, "invoice_currency") == B_COLUMNS
    assert query(url, "SELECT invoice_id, currency_code FROM invoice_currency") == [(1, "USD")]
    assert alembic_versions(url) == ["0042"]
    assert ledger(url) == {"0042": LedgerEntry("0042", 34, "agent-B", "upgrade")}
    assert fence_tokens(url) == {"db/migrations": fence}


# -- the incident --------------------------------------------------------------------------


def test_incident_replayed_end_to_end(
    make_project: MakeProject, pg_url: str, pg_conn: psycopg.Connection[Any], pg_server: PgServer
) -> None:
    """A's stale reapply and its renumbered 0043 are both FENCED and B's 0042 survives; plain
    alembic lets both through."""
    a = make_project(name="agent_a")
    b = clone_checkout(a, "agent_b", pg_url)
    pristine = clone_checkout(a, "pristine", pg_url)
    replay_until_b_applied(a, b)
    before = snapshot(pg_url)

    # 14:40:11 A wakes up and re-applies its 0042 (its checkout still has its own version).
    out = fm(a, "reapply", "0042", token=33, holder="agent-A")
    assert_fenced_text(out, token=33, fence=34)
    assert_b_schema(pg_url)
    assert snapshot(pg_url) == before  # not even the table's OID changed

    out = fm(a, "reapply", "0042", token=33, holder="agent-A", as_json=True)
    assert_fenced_json(out, token=33, fence=34, reason=STALE_REASON)
    assert snapshot(pg_url) == before

    # 14:40:44 "Retrying with a fresh migration number": A renumbers its copy to 0043.
    write_a_0043(a)
    out = fm(a, "upgrade", "head", token=33, holder="agent-A")
    assert_fenced_text(out, token=33, fence=34)
    assert alembic_versions(pg_url) == ["0042"]
    assert_b_schema(pg_url)
    assert "0043" not in ledger(pg_url)
    assert snapshot(pg_url) == before

    out = fm(a, "upgrade", "head", token=33, holder="agent-A", as_json=True)
    assert_fenced_json(out, token=33, fence=34, reason=STALE_REASON)
    assert snapshot(pg_url) == before

    # With a fresh lease (token 35) the 0043 copy may be applied; B's ledger row stays B's.
    out = fm(a, "upgrade", "head", token=35, holder="agent-A").check(0)
    assert "  applied 0043 under token 35" in out.stdout.splitlines()
    assert "  heads now: 0043" in out.stdout.splitlines()
    assert alembic_versions(pg_url) == ["0043"]
    assert column_names(pg_url, "invoice_currency") == A_COLUMNS  # a fresh lease may replace B's table
    assert ledger(pg_url) == {
        "0042": LedgerEntry("0042", 34, "agent-B", "upgrade"),
        "0043": LedgerEntry("0043", 35, "agent-A", "upgrade"),
    }
    assert fence_tokens(pg_url) == {"db/migrations": 35}

    # `fencemigrate state` is what A is told to read: it shows B's 0042.
    state = a.run_cli("state").check(0)
    lines = state.stdout.splitlines()
    assert lines[0] == "heads: 0043"
    assert any(line.startswith("  db/migrations  token=35  since ") for line in lines), state
    assert any(line.startswith("  0042  applied_token=34  holder=agent-B  upgrade at ") for line in lines), state
    assert any(line.startswith("  0043  applied_token=35  holder=agent-A  upgrade at ") for line in lines), state
    payload = json.loads(a.run_cli("state", "--json").check(0).stdout)
    assert payload["status"] == "ok" and payload["heads"] == ["0043"]
    assert [(f["resource"], f["token"]) for f in payload["fences"]] == [("db/migrations", 35)]
    assert [(r["revision"], r["applied_token"], r["holder"]) for r in payload["ledger"]] == [
        ("0042", 34, "agent-B"),
        ("0043", 35, "agent-A"),
    ]

    # CONTROL 1: plain alembic, same steps: A's "reapply" destroys B's schema.
    with scratch_database(pg_conn, pg_server, "fm_ctl_reapply") as url:
        ctl_a = clone_checkout(pristine, "ctl_reapply_a", url)
        ctl_b = clone_checkout(pristine, "ctl_reapply_b", url)
        replay_with_plain_alembic(ctl_a, ctl_b)
        ctl_a.run_alembic("downgrade", "base").check(0)
        ctl_a.run_alembic("upgrade", "head").check(0)
        assert column_names(url, "invoice_currency") == A_COLUMNS, "control: B's table should be gone"
        assert query(url, "SELECT count(*) FROM invoice_currency") == [(0,)]
        assert alembic_versions(url) == ["0042"]

    # CONTROL 2: plain alembic, A's renumbered 0043 goes through on top of B's 0042.
    with scratch_database(pg_conn, pg_server, "fm_ctl_renumber") as url:
        ctl_a = clone_checkout(pristine, "ctl_renumber_a", url)
        ctl_b = clone_checkout(pristine, "ctl_renumber_b", url)
        replay_with_plain_alembic(ctl_a, ctl_b)
        write_a_0043(ctl_a)
        ctl_a.run_alembic("upgrade", "head").check(0)
        assert alembic_versions(url) == ["0043"]
        assert column_names(url, "invoice_currency") == A_COLUMNS, "control: A's stale DDL should have landed"


def replay_with_plain_alembic(a: Project, b: Project) -> None:
    """The control's first half (:func:`incident_story.replay_with_plain_alembic`), B's table checked."""
    incident_story.replay_with_plain_alembic(a, b)
    assert column_names(b.url, "invoice_currency") == B_COLUMNS
    assert alembic_versions(b.url) == ["0042"]


# -- who may re-apply -----------------------------------------------------------------------


def test_rightful_holder_can_reapply_its_own_revision(make_project: MakeProject, pg_url: str) -> None:
    """B (token 34) re-applies the 0042 it applied: rolled back and re-applied in one run, ledger still B's."""
    a = make_project(name="agent_a")
    b = clone_checkout(a, "agent_b", pg_url)
    replay_until_b_applied(a, b)
    old_oid = snapshot(pg_url).tables["invoice_currency"]

    out = fm(b, "reapply", "0042", token=34, holder="agent-B").check(0)
    assert out.stdout.splitlines() == [
        "reapply done: resource db/migrations, token 34, holder agent-B",
        "  rolled back 0042 under token 34",
        "  re-applied 0042 under token 34",
        "  heads now: 0042",
    ]
    assert_b_schema(pg_url)
    assert snapshot(pg_url).tables["invoice_currency"] != old_oid  # it really was dropped and re-created

    payload = json.loads(fm(b, "reapply", "0042", token=34, holder="agent-B", as_json=True).check(0).stdout)
    assert payload["status"] == "ok" and payload["command"] == "reapply"
    assert [(s["revisions"], s["direction"], s["token"]) for s in payload["steps"]] == [
        (["0042"], "down", 34),
        (["0042"], "up", 34),
    ]
    assert payload["heads"] == ["0042"]
    assert_b_schema(pg_url)


def test_higher_token_cannot_reapply_a_revision_applied_under_another_token(
    make_project: MakeProject, pg_url: str, pg_conn: psycopg.Connection[Any], pg_server: PgServer
) -> None:
    """Token 35 may not re-apply B's 0042 (applied under 34): FENCED, and the fence stays 34; plain
    alembic re-applies it."""
    a = make_project(name="agent_a")
    b = clone_checkout(a, "agent_b", pg_url)
    pristine = clone_checkout(a, "pristine", pg_url)
    replay_until_b_applied(a, b)
    before = snapshot(pg_url)
    reason = "0042 was applied under token 34, not yours"

    out = fm(a, "reapply", "0042", token=35, holder="agent-A")
    out.check(3)
    assert out.stdout == ""
    lines = stderr_lines(out.stderr)
    for expected in FENCED_NOT_YOURS_LINES:
        assert expected.format(token=35, reason=reason) in lines, out
    assert lines[0] == "FENCED: this write to db/migrations is not yours to make."
    assert "Traceback" not in out.stderr
    assert snapshot(pg_url) == before
    assert_b_schema(pg_url, fence=34)  # the claim by 35 rolled back with the rejected reapply

    out = fm(a, "reapply", "0042", token=35, holder="agent-A", as_json=True)
    # fence_token: the fence as committed (34); token 35's own claim never committed.
    assert_fenced_json(out, token=35, fence=34, reason=reason)
    assert snapshot(pg_url) == before

    # CONTROL: without the fence, "reapply" (downgrade + upgrade) drops B's table and data.
    with scratch_database(pg_conn, pg_server, "fm_ctl_higher") as url:
        ctl_a = clone_checkout(pristine, "ctl_a", url)
        ctl_b = clone_checkout(pristine, "ctl_b", url)
        replay_with_plain_alembic(ctl_a, ctl_b)
        ctl_oid = snapshot(url).tables["invoice_currency"]
        ctl_a.run_alembic("downgrade", "base").check(0)
        ctl_a.run_alembic("upgrade", "head").check(0)
        assert column_names(url, "invoice_currency") == A_COLUMNS
        assert ctl_oid not in snapshot(url).tables.values()
