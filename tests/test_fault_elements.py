"""The fault harness's schedule elements (bench/faults/elements.py): their checker properties, pure cases.

Each property of :func:`faults.checker.check_element` is shown failing on an outcome that breaks it
and passing on one that does not; and drawing an element leaves the rest of a schedule as it was.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from faults.__main__ import parse_args  # noqa: E402
from faults.checker import (  # noqa: E402
    PROPERTIES,
    check_element,
    foreign_preemptions,
    forged_grants,
    overlapping_grants,
    reissued_grants,
    stale_side_writes,
    unissued_tokens,
)
from faults.elements import extension_files, released_grant  # noqa: E402
from faults.history import ElementOutcome, Event, Grant, Run, SideWrite  # noqa: E402
from faults.schedule import ELEMENTS, generate  # noqa: E402


def grant(token: int, holder: str, started: float = 0.0, ttl: float = 1.0, **options: str) -> Grant:
    """A grant reported by a lease call that took 0.2 s."""
    return Grant(
        holder,
        token,
        options.get("source", "lease service"),
        started,
        started + 0.2,
        ttl,
        options.get("resource", "db"),
    )


def event(kind: str, token: int | None, holder: str, revision: str | None = None) -> Event:
    return Event(kind, token, holder, revision)


def test_a_grant_no_lease_call_made_is_forged() -> None:
    grants = [grant(1, "A")]
    events = [event("grant", 1, "A"), event("grant", 2, "mallory"), event("grant", 1, "mallory")]
    assert [v.detail for v in forged_grants(events, grants)] == [
        "token 2 granted to mallory, which no lease call made",
        "token 1 granted to mallory, which no lease call made",
    ]
    assert forged_grants(events[:1], grants) == []


def test_a_write_under_a_token_no_source_issued() -> None:
    grants = [grant(1, "R", source="redis"), grant(2, "W")]
    events = [event("apply", 1, "R", "r01"), event("rollback", 2, "W", "r01"), event("rollback", 50, "W", "r01")]
    assert [v.detail for v in unissued_tokens(events, grants)] == [
        "rollback r01 by W under token 50, which no lease call issued"
    ]
    # A tokenless write is stale-commit's; a forged grant event is forged-grant's.
    assert unissued_tokens([event("apply", None, "T", "r01"), event("grant", 7, "mallory")], grants) == []


def test_one_token_granted_to_two_holders_is_reported_once() -> None:
    grants = [grant(3, "C"), grant(3, "D", started=1.0)]
    assert [v.detail for v in reissued_grants([], grants)] == ["token 3 was granted to C and to D"]
    # Or reported to one holder and committed for another (a grant lost in a failover).
    assert [v.detail for v in reissued_grants([event("grant", 3, "E")], grants[:1])] == [
        "token 3 was granted to C and to E"
    ]
    assert reissued_grants([event("grant", 3, "C")], grants[:1]) == []


def test_a_grant_while_another_holders_is_certainly_live() -> None:
    redis = grant(1, "R", started=0.0, ttl=10.0, source="redis")
    builtin = grant(2, "W", started=3.0)
    assert [v.detail for v in overlapping_grants([redis, builtin])] == [
        "token 2 (lease service) granted to W while R's token 1 (redis) was live"
    ]
    # Not certain: the later call ended after the earlier TTL could have run out.
    assert overlapping_grants([grant(1, "A", ttl=1.0), grant(2, "B", started=0.9)]) == []
    assert overlapping_grants([grant(1, "A", ttl=1.0), grant(2, "B", started=1.5)]) == []
    # The same holder again, or another resource, is no second holder.
    assert overlapping_grants([redis, grant(2, "R", started=3.0)]) == []
    assert overlapping_grants([redis, grant(1, "P", started=3.0, resource="other")]) == []


def test_a_push_or_file_write_under_a_superseded_grant_is_stale() -> None:
    grants = [grant(1, "A"), grant(2, "B", started=3.0)]
    writes = [
        SideWrite("file", "A", 1, 1.0, landed=True),
        SideWrite("push", "A", 1, 1.0, landed=True, commit="a1"),
        SideWrite("file", "A", 1, 5.0, landed=True),
        SideWrite("push", "A", 1, 5.0, landed=True, commit="a2"),
        SideWrite("push", "A", 1, 5.5, landed=False, commit="a3"),
    ]
    assert [(v.prop, v.detail) for v in stale_side_writes(writes, grants, {"a1", "a2"})] == [
        ("stale-file-write", "file write by A under token 1 landed after token 2"),
        ("stale-push", "push by A under token 1 landed after token 2"),
    ]
    assert stale_side_writes([SideWrite("file", "A", None, 0.0, landed=True)], [], None)[0].detail == (
        "file write by A under no grant landed"
    )


def test_a_live_holders_pushed_commit_must_stay_on_the_remote() -> None:
    """B pushed under its live grant; A's push under a fresh grant replaced it (a rewind)."""
    grants = [grant(1, "A"), grant(2, "B", started=3.0), grant(3, "A", started=6.0)]
    writes = [
        SideWrite("push", "B", 2, 4.0, landed=True, commit="b" * 40),
        SideWrite("push", "A", 3, 7.0, landed=True, commit="a" * 40),
    ]
    assert [v.detail for v in stale_side_writes(writes, grants, {"a" * 40})] == [
        "commit bbbbbbbbbb pushed by B under live token 2 is gone from the remote branch"
    ]
    assert stale_side_writes(writes, grants, {"a" * 40, "b" * 40}) == []


def test_a_run_alone_on_its_resource_must_not_be_ended_by_another() -> None:
    killed = Run("V", ("upgrade", "head"), "agent-V", exit_code=1, output="x\nfencemigrate: error: terminating\n")
    assert [v.detail for v in foreign_preemptions([killed])] == [
        "V (agent-V) alone on its resource exited 1: ['fencemigrate: error: terminating']"
    ]
    assert foreign_preemptions([dataclasses.replace(killed, exit_code=0)]) == []


def test_colliding_names_check_no_tokens_across_the_two_resources() -> None:
    """Tokens are per resource: P's grant of token 1 and V's writes under its own token 1 are no reissue."""
    outcome = ElementOutcome(
        "fencemigrate",
        "colliding-names",
        events=[event("grant", 1, "V"), event("grant", 1, "P"), event("apply", 1, "V", "r01")],
        grants=[grant(1, "P", resource="svc-62004")],
        bystanders=[Run("V", (), "agent-V", exit_code=0)],
    )
    assert check_element(outcome) == []
    outcome.kind = "dump-restore"
    assert {v.prop for v in check_element(outcome)} == {"stale-commit", "forged-grant", "token-reissued"}


def test_every_element_property_is_counted() -> None:
    for prop in ("forged-grant", "unissued-token", "two-live-holders", "stale-push", "stale-file-write"):
        assert prop in PROPERTIES
    assert "foreign-preempt" in PROPERTIES


OPTIONS = {"preempt": True, "kill_connections": True, "restart": True, "autocommit_block": True, "tokenless": True}


@pytest.mark.parametrize("index", range(40))
def test_an_element_leaves_the_rest_of_the_schedule_as_it_was(index: int) -> None:
    plain = generate(12, index, **OPTIONS)
    drawn = generate(12, index, **OPTIONS, elements=tuple(ELEMENTS))
    assert plain.element is None and drawn.element is not None
    assert dataclasses.replace(drawn, element=None) == plain
    assert drawn.element.variant in ELEMENTS[drawn.element.kind]
    assert generate(12, index, **OPTIONS, elements=tuple(ELEMENTS)) == drawn


def test_only_the_backends_elements_are_drawn() -> None:
    kinds = {generate(3, index, **OPTIONS, elements=("mixed-sources",)).element for index in range(20)}
    assert {element.kind for element in kinds if element} == {"mixed-sources"}
    variants = {generate(3, i, **OPTIONS, elements=tuple(ELEMENTS)).element for i in range(200)}
    assert {(e.kind, e.variant) for e in variants if e} == {(k, v) for k, vs in ELEMENTS.items() for v in vs}


def test_elements_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_args(["--elements", "all"]).elements == tuple(ELEMENTS)
    assert parse_args(["--elements", "sql-attack,dump-restore"]).elements == ("sql-attack", "dump-restore")
    assert parse_args([]).elements == ()
    assert parse_args(["--elements", "all", "--elements-beside"]).elements_beside is True
    with pytest.raises(SystemExit) as stop:
        parse_args(["--elements", "sql-attack,bogus"])
    assert stop.value.code == 2
    assert "unknown element bogus" in capsys.readouterr().err


def test_the_extension_files_are_put_where_they_differ(tmp_path: Path) -> None:
    """dump-restore's ``extension-installed`` puts the checkout's extension files in the server's
    extension directory: every one that differs, none that is already there, nothing else."""
    repo_sql = Path(__file__).resolve().parents[1] / "sql"
    ours = sorted(p.name for p in repo_sql.glob("fencemigrate*") if p.suffix in (".control", ".sql"))
    (tmp_path / "other.control").write_text("left alone\n")
    (tmp_path / ours[0]).write_text("an older file\n")
    extension_files(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*ours, "other.control"])
    assert all((tmp_path / name).read_bytes() == (repo_sql / name).read_bytes() for name in ours)
    assert (tmp_path / "other.control").read_text() == "left alone\n"
    before = {name: (tmp_path / name).stat().st_ino for name in ours}
    extension_files(tmp_path)
    assert {name: (tmp_path / name).stat().st_ino for name in ours} == before


def test_a_grant_its_call_reported_released_was_made_by_that_call() -> None:
    """``lease acquire`` / ``acquire_lease`` answering ``grant released`` (the fault harness's #142:
    its grant committed, the read after it failed) reported its token: not forged, live for no one
    after the call unless its release failed too."""
    released = released_grant({"status": "grant released", "token": 1, "expires_at": None}, "A", 0.0, 1.0, "mcp", "db")
    assert released is not None and (released.token, released.holder, released.ttl_s) == (1, "A", 0.0)
    assert forged_grants([event("grant", 1, "A"), event("grant", 2, "B")], [released, grant(2, "B", 0.5)]) == []
    assert overlapping_grants([released, grant(2, "B", started=released.ended)]) == []
    unreleased = released_grant(
        {"status": "grant released", "token": 1, "expires_at": "2026-12-07T06:00:00+00:00"}, "A", 0.0, 5.0, "mcp", "db"
    )
    assert unreleased is not None and unreleased.ttl_s == 5.0
    assert released_grant({"status": "error", "message": "database error"}, "A", 0.0, 1.0, "mcp", "db") is None
    assert released_grant({"text": "ERROR: ..."}, "A", 0.0, 1.0, "mcp", "db") is None
