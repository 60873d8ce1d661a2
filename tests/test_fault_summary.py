"""Merging the shards of a parallel harness run (bench/faults/summary.py, ``--jobs``): pure data cases.

The merged figures must be the ones a serial run of the same schedules prints: counts added up,
examples and notes back in schedule order, the control's examples cut to the first five.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from faults.__main__ import shard_indices  # noqa: E402
from faults.checker import Violation  # noqa: E402
from faults.execute import Result  # noqa: E402
from faults.history import Outcome  # noqa: E402
from faults.summary import Summary, merge, verdict  # noqa: E402

BACKENDS = ("postgresql", "sqlite", "mariadb", "redis")

#: Per schedule number: (fencemigrate's violations, the control's, faults injected, notes).
Case = dict[int, tuple[list[str], list[str], list[str], list[str]]]

CASES: dict[str, Case] = {
    "clean fencemigrate, broken control": {
        0: ([], ["stale-commit"], ["kill"], []),
        1: ([], [], ["stop", "terminate_backend"], ["usage refusal"]),
        2: ([], ["applied-twice", "stale-commit"], ["restart"], []),
        3: ([], [], [], []),
        4: ([], ["version-vs-ledger"], ["stop"], ["usage refusal"]),
    },
    "more than five control examples, spread over shards": {
        index: ([], ["stale-commit", "applied-twice"] if index % 3 else [], ["kill"], []) for index in range(12)
    },
    "a fencemigrate violation in one shard": {
        0: ([], ["stale-commit"], ["kill"], []),
        1: ([], [], [], []),
        2: ([], [], ["stop"], []),
        3: (["wait-bound"], ["stale-commit"], ["stop"], []),
        5: (["exit-status", "stale-commit"], [], ["term"], ["usage refusal"]),
    },
    "the control never broken": {index: ([], [], ["stop"], []) for index in range(4)},
    "more than five notes": {index: ([], ["stale-commit"], [], [f"refusal {index}"]) for index in range(9)},
}


def result(violations: list[str], injected: list[str], notes: list[str]) -> Result:
    outcome = Outcome("any", [], [], [], None, {}, 0)
    return Result(outcome, [Violation(prop, f"detail of {prop}") for prop in violations], Counter(injected), notes)


def summarize(case: Case, indices: list[int]) -> Summary:
    """What ``run_harness`` counts for these schedules, in this order."""
    summary = Summary()
    for index in indices:
        fenced, control, injected, notes = case[index]
        backend = BACKENDS[index % len(BACKENDS)]
        summary.add(backend, index, "fencemigrate", result(fenced, injected, notes))
        summary.add(backend, index, "control", result(control, injected, []))
    return summary


def through_json(summary: Summary) -> Summary:
    """A shard's summary as the parent reads it back from the shard's file."""
    return Summary.from_json(json.loads(json.dumps(summary.to_json())))


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("jobs", [1, 2, 3, 5])
def test_merged_shards_print_what_the_serial_run_prints(name: str, jobs: int) -> None:
    case = CASES[name]
    serial = summarize(case, sorted(case))
    shards = [through_json(summarize(case, [i for i in sorted(case) if i % jobs == k])) for k in range(jobs)]
    merged = merge(shards)
    assert merged.lines() == serial.lines()
    assert verdict(merged) == verdict(serial)


def test_the_merge_counts_every_shard() -> None:
    case = CASES["a fencemigrate violation in one shard"]
    merged = merge([through_json(summarize(case, [0, 2])), through_json(summarize(case, [1, 3, 5]))])
    assert sum(merged.schedules.values()) == 5
    assert merged.total("fencemigrate") == 3
    assert merged.broken_schedules["fencemigrate"] == 2
    assert [text for _, text in merged.examples["fencemigrate"]][0].startswith("redis #3: wait-bound")
    assert verdict(merged)[0] is False


def test_no_shard_is_no_schedule_and_no_verdict() -> None:
    merged = merge([])
    assert sum(merged.schedules.values()) == 0
    assert verdict(merged) == (False, "FAIL: the control showed no violation: the schedules are not testing anything")


@pytest.mark.parametrize(("start", "count", "jobs"), [(0, 8, 4), (0, 8, 1), (3, 10, 4), (7, 2, 3), (5, 0, 2)])
def test_the_shards_run_the_serial_runs_schedules_once_each(start: int, count: int, jobs: int) -> None:
    shards = [list(shard_indices(start, count, (k, jobs))) for k in range(jobs)]
    assert sorted(i for shard in shards for i in shard) == list(shard_indices(start, count, None))
    assert all(i % jobs == k for k, shard in enumerate(shards) for i in shard)
