"""The fault harness's checker (bench/faults/checker.py): pure functions over a recorded history.

Each property is shown failing on a history that breaks it and passing on one that does not, so
the harness's "0 violations" can be trusted to mean something.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from faults.checker import (  # noqa: E402
    double_applies,
    ledger_mismatch,
    reissued_tokens,
    stale_commits,
    stale_usage_refusals,
    undocumented_exits,
    wait_overruns,
)
from faults.history import Event, Outcome, Run  # noqa: E402

CHAIN: dict[str, str | None] = {"r01": None, "r02": "r01", "r03": "r02", "r04": "r03"}


def grant(token: int, holder: str = "B") -> Event:
    return Event("grant", token, holder)


def apply(revision: str, token: int | None, holder: str = "A", change: str | None = None) -> Event:
    return Event("apply", token, holder, revision, change or f"c{revision[1:]}")


def rollback(revision: str, token: int | None, holder: str = "A") -> Event:
    return Event("rollback", token, holder, revision, f"c{revision[1:]}")


def test_a_commit_under_a_token_after_a_higher_grant_is_stale() -> None:
    events = [grant(1, "A"), apply("r01", 1), grant(2), apply("r02", 1)]
    assert [v.detail for v in stale_commits(events)] == ["apply r02 by A under token 1 after token 2"]
    assert stale_commits([grant(1, "A"), apply("r01", 1), grant(2), apply("r02", 2, "B")]) == []


def test_a_commit_under_a_token_after_a_higher_write_is_stale() -> None:
    assert len(stale_commits([apply("r01", 5), rollback("r01", 4)])) == 1


def test_a_tokenless_commit_after_a_grant_is_stale() -> None:
    assert [v.detail for v in stale_commits([grant(3), rollback("r01", None, "T")])] == [
        "rollback r01 by T under no token after token 3"
    ]


def test_a_commit_under_a_token_granted_to_another_holder_is_stale() -> None:
    """A failover lost A's grant of token 1 and the promoted server granted 1 to B: A's write under 1
    comes after no higher token, yet is another holder's."""
    events = [grant(1, "B"), apply("r01", 1, "B"), rollback("r01", 1, "A")]
    assert [v.detail for v in stale_commits(events)] == ["rollback r01 by A under token 1, granted to B"]
    assert stale_commits([grant(1, "A"), apply("r01", 1, "A"), grant(2, "A"), apply("r02", 2, "A")]) == []


def test_a_token_reported_to_one_holder_and_granted_to_another_is_reissued() -> None:
    """Only the promoted server's grant of token 1 (to B) is in the history; A was told it got 1 too."""
    lost = [run(step="S", holder="A", granted=1), run(holder="B", granted=1)]
    assert [v.detail for v in reissued_tokens([grant(1, "B")], lost)] == ["token 1 was granted to A and again to B"]
    assert (
        reissued_tokens([grant(1, "A"), grant(2, "B")], [run(holder="A", granted=1), run(holder="B", granted=2)]) == []
    )
    assert reissued_tokens([grant(4294967296, "B")], lost[:1]) == []


def test_a_revision_is_applied_once() -> None:
    assert [v.detail for v in double_applies([apply("r01", 1), apply("r01", 2)])] == [
        "r01 applied again by A (token 2)"
    ]
    assert double_applies([apply("r02", 1), rollback("r02", 2), apply("r02", 2)]) == []
    assert len(double_applies([rollback("r02", 1)])) == 1


def test_a_renumbered_copy_is_a_new_revision_and_stale_only_under_an_old_token() -> None:
    """The fence lets the newest token apply a renumbered copy (`fencemigrate check` flags it)."""
    current = [grant(1, "A"), apply("r02", 1), apply("r04", 1, change="c02")]
    assert double_applies(current) == [] and stale_commits(current) == []
    stale = [grant(1, "A"), apply("r02", 1), grant(2), apply("r04", 1, change="c02")]
    assert [v.detail for v in stale_commits(stale)] == ["apply r04 by A under token 1 after token 2"]


def outcome(heads: list[str], ledger: dict[str, str] | None, events: list[Event] = ()) -> Outcome:  # type: ignore[assignment]
    return Outcome("fencemigrate", list(events), [], heads, ledger, CHAIN)


def applied(*revisions: str) -> dict[str, str]:
    return dict.fromkeys(revisions, "applied")


def test_the_version_table_must_match_the_ledger() -> None:
    assert ledger_mismatch(outcome(["r03"], applied("r01", "r02", "r03"))) == []
    assert [v.detail for v in ledger_mismatch(outcome(["r02"], applied("r01", "r02", "r03")))] == [
        "version table implies ['r01', 'r02'], ledger has ['r01', 'r02', 'r03']"
    ]
    # Without a ledger (the control), the committed history stands in for it.
    assert ledger_mismatch(outcome(["r01"], None, [apply("r01", 1)])) == []


def test_a_dirty_revision_is_where_its_run_stopped() -> None:
    """Pre-check mode (MariaDB): a writer killed inside r02's downgrade leaves r02 in the version
    table, its row 'rolling_back'; one killed inside r02's upgrade leaves it out, its row 'applying'."""
    assert ledger_mismatch(outcome(["r02"], {"r01": "applied", "r02": "rolling_back"})) == []
    assert ledger_mismatch(outcome(["r01"], {"r01": "applied", "r02": "applying"})) == []
    assert [v.detail for v in ledger_mismatch(outcome(["r01"], {"r01": "applied", "r02": "rolling_back"}))] == [
        "version table implies ['r01'], ledger has ['r01', 'r02']"
    ]
    assert [v.detail for v in ledger_mismatch(outcome(["r02"], {"r01": "applied", "r02": "applying"}))] == [
        "version table implies ['r01', 'r02'], ledger has ['r01']"
    ]


def run(**fields: object) -> Run:
    values: dict[str, object] = {
        "step": "R1",
        "argv": ("python", "-m", "faults.launch", "upgrade", "head"),
        "holder": "agent-R1",
        "exit_code": 0,
    }
    values.update(fields)
    return Run(**values)  # type: ignore[arg-type]


def test_no_run_waits_past_its_wait() -> None:
    assert wait_overruns([run(wait_s=2.0, elapsed_s=9.0, stopped_s=5.0)], work_bound_s=3.0) == []
    assert len(wait_overruns([run(wait_s=2.0, elapsed_s=9.0, stopped_s=1.0)], work_bound_s=3.0)) == 1
    assert len(wait_overruns([run(hung=True)], work_bound_s=3.0)) == 1


def test_exit_statuses_must_be_documented() -> None:
    assert undocumented_exits([run(exit_code=4), run(exit_code=-9, signals=["KILL"])], "fencemigrate", 0) == []
    assert len(undocumented_exits([run(exit_code=-9)], "fencemigrate", 0)) == 1
    # SIGTERM: killed before fencemigrate's handler is installed, or its documented 143 after it.
    assert (
        undocumented_exits(
            [run(exit_code=-15, signals=["TERM"]), run(exit_code=143, signals=["STOP", "TERM"])], "fencemigrate", 0
        )
        == []
    )
    assert len(undocumented_exits([run(exit_code=143)], "fencemigrate", 0)) == 1
    assert (
        len(undocumented_exits([run(exit_code=1, output="Traceback (most recent call last):\n  x")], "fencemigrate", 0))
        == 1
    )


def test_a_write_under_a_superseded_token_must_be_fenced() -> None:
    stale = {"expect_fenced": True, "token": 1, "output": "  applied r02 under token 1\n"}
    assert undocumented_exits([run(exit_code=3, **stale)], "fencemigrate", 0) == []
    assert len(undocumented_exits([run(exit_code=0, **stale)], "fencemigrate", 0)) == 1
    assert len(undocumented_exits([run(exit_code=0, **stale)], "control", 0)) == 1
    assert len(undocumented_exits([run(exit_code=1, **stale)], "fencemigrate", 0)) == 1
    assert undocumented_exits([run(exit_code=1, **stale)], "fencemigrate", 1) == []
    assert undocumented_exits([run(exit_code=5, **stale)], "fencemigrate", 0) == []


def test_a_stale_write_refused_as_usage_is_reported_apart() -> None:
    refusal = "fencemigrate: usage: cannot reapply r02: it is not applied to this database\n"
    stale = run(
        exit_code=2,
        expect_fenced=True,
        token=1,
        output=refusal,
        argv=("python", "-m", "faults.launch", "reapply", "r02"),
    )
    assert undocumented_exits([stale], "fencemigrate", 0) == []
    assert stale_usage_refusals([stale]) == [
        "R1 (agent-R1) under superseded token 1: reapply r02 refused as usage (exit 2), not FENCED"
    ]
    assert (
        len(undocumented_exits([run(exit_code=2, output="fencemigrate: usage: bad token\n")], "fencemigrate", 0)) == 1
    )


def test_a_lease_call_to_the_wrong_token_source_may_exit_2() -> None:
    refused = "fencemigrate: usage: db/migrations takes its tokens from Redis (its fence's token source is 'redis')\n"
    assert undocumented_exits([run(exit_code=2, output=refused)], "fencemigrate", 0) == []
    as_json = '{"message": "db/migrations takes its tokens from Redis (its fence...)", "status": "usage"}\n'
    assert undocumented_exits([run(exit_code=2, output=as_json)], "fencemigrate", 0) == []
    assert (
        len(
            undocumented_exits(
                [run(exit_code=2, output=refused + "Traceback (most recent call last):\n")], "fencemigrate", 0
            )
        )
        == 1
    )


def test_a_stale_run_with_nothing_to_do_may_exit_0() -> None:
    """README: a run with nothing to do writes nothing and claims nothing (exit 0), stale or not."""
    stale = {"expect_fenced": True, "token": 1}
    assert undocumented_exits([run(exit_code=0, output="  nothing to do\n", **stale)], "fencemigrate", 0) == []
    assert undocumented_exits([run(exit_code=0, output="INFO  [alembic] Context impl\n", **stale)], "control", 0) == []
    assert (
        len(undocumented_exits([run(exit_code=0, output="Running upgrade r01 -> r02\n", **stale)], "control", 0)) == 1
    )


def test_a_tokenless_writer_is_plain_alembic_and_its_status_is_not_fencemigrates() -> None:
    assert undocumented_exits([run(exit_code=255, tokenless=True)], "fencemigrate", 0) == []
