"""What a stale writer is told, built from the outcome itself: the copies a run makes of a FENCED
rejection keep every field they do not change (its next step above all: a fenced git push or file
write names the branch or file to read again, not ``fencemigrate state``); FENCED, the monotonic
guard and LEASE LOST each give their news on its own, which the CLI follows with its stale plan and
the MCP server with its own, word for word as before the news had a method of its own.
"""

from __future__ import annotations

import inspect

import pytest
from mcp.types import TextContent

from fencemigrate.agent_server.results import error_result
from fencemigrate.errors import (
    Fenced,
    LeaseLost,
    MonotonicGuardRefused,
    Refusal,
    newer_token_granted,
    newer_token_wrote,
)

BRANCH = "git:feature/0042"
GIT_STEP = (
    "fetch feature/0042 from origin, read what is there now and re-plan; a push needs a new lease, whose grant "
    "records the branch afresh."
)


RESOURCE = "db/migrations"
FILE = "migrations/versions/0042_add_invoice_currency.py"
NOT_TRANSIENT = "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply."
STALE = [
    "Your plan and your memory of this resource are probably stale, including anything",
    "your context summary says you 'hold'.",
]
GOAL_MET = "If your goal is already met by the current state, report that and stop."
DROPPED = "This server has dropped its token: every write tool answers this until a new acquire_lease."
WRITE_AGAIN = "to write again, call acquire_lease and read the state it returns."


def fields(fenced: Fenced) -> dict[str, object]:
    """Every field of ``fenced``, by the name of the constructor argument that sets it."""
    return {name: getattr(fenced, name) for name in inspect.signature(Fenced).parameters}


def test_each_copy_of_a_rejection_keeps_every_field_it_does_not_change() -> None:
    """After autocommit blocks, at the fence token read back, and "only granted": the branch's next step
    (attribute and message) and every other field survive each copy. Before the fix each copy went back
    to "run `fencemigrate state`"."""
    original = Fenced(BRANCH, 34, 35, newer_token_wrote(35, BRANCH), ("0041",), next_step=GIT_STEP)
    assert fields(original) == {
        "resource": BRANCH,
        "token": 34,
        "fence_token": 35,
        "reason": f"token 35 has since written to {BRANCH}",
        "autocommitted": ("0041",),
        "granted_only": False,
        "next_step": GIT_STEP,
    }
    copies: list[tuple[Fenced, dict[str, object]]] = [
        (original.after_autocommit_blocks(("0042", "0043")), {"autocommitted": ("0042", "0043")}),
        (original.at_fence(36), {"fence_token": 36}),
        (original.granted_not_written(), {"reason": newer_token_granted(35, BRANCH), "granted_only": True}),
    ]
    for copy, changed in copies:
        assert fields(copy) == {**fields(original), **changed}
        lines = str(copy).splitlines()
        assert f"Next step: {GIT_STEP}" in lines, lines
        assert not any("fencemigrate state" in line for line in lines), lines
        assert copy.as_json()["message"] == str(copy)

    granted = original.granted_not_written()
    assert str(granted).splitlines()[:2] == [
        f"FENCED: you no longer own {BRANCH}.",
        "Your lease token (34) is older than token 35, which was granted after yours (it has not written yet).",
    ]


def cli_plan(step: str = "run `fencemigrate state` and re-plan from what is actually there.") -> list[str]:
    return [NOT_TRANSIENT, *STALE, f"Next step: {step}", GOAL_MET]


def server_plan(step: str = "call read_state and re-plan from what is actually there") -> list[str]:
    return [NOT_TRANSIENT, DROPPED, *STALE, f"Next step: {step}; {WRITE_AGAIN}", GOAL_MET]


LEASE_LOST_PLAN = [
    NOT_TRANSIENT,
    "Your plan and your memory of this resource are probably stale.",
    "Next step: run `fencemigrate state`, acquire a new lease if there is still work, and re-plan.",
    GOAL_MET,
]

GUARD_NEWS = [
    f"FENCED: this write to {RESOURCE} is not yours to make.",
    "The fence's monotonic guard (FM002) refused a write by revision 0002 (migrations/versions/0002_lower.py, "
    f"line 16, in upgrade): agent_fence is monotonic: the token of {RESOURCE} cannot go down from 6 to 1; the "
    "run's transaction rolled back: nothing was applied.",
    "No client may lower a fence token or the lease token counter, or rename or delete their rows:",
    "that would let older tokens write again.",
]

StaleWriter = Fenced | MonotonicGuardRefused | LeaseLost
CASES: list[tuple[StaleWriter, list[str], list[str], list[str]]] = [
    (  # a newer token wrote, after an autocommit block of the run's revision b2 committed
        Fenced(RESOURCE, 1, 2, newer_token_wrote(2, RESOURCE), ("b2",)),
        [
            f"FENCED: you no longer own {RESOURCE}.",
            "Your lease token (1) is older than token 2, which has since written to this resource.",
            "Statements of revision b2 ran in an autocommit block, outside the fenced transaction, and may have "
            "been left applied (so may what the revision ran before the block): compare the schema with the "
            "revision before you re-plan.",
        ],
        cli_plan(),
        server_plan(),
    ),
    (  # a file write with a stale hash: the next step names the file, on both interfaces
        Fenced(
            f"file:{FILE}",
            34,
            None,
            f"{FILE} has another sha256 on disk, not {'a' * 64} as you read it; nothing was written",
            next_step=f"read {FILE} again and re-plan from what it holds now.",
        ),
        [
            f"FENCED: this write to file:{FILE} is not yours to make.",
            f"Rejected for token 34: {FILE} has another sha256 on disk, not {'a' * 64} as you read it; "
            "nothing was written.",
        ],
        cli_plan(f"read {FILE} again and re-plan from what it holds now."),
        server_plan(f"read {FILE} again and re-plan from what it holds now"),
    ),
    (  # the monotonic guard, naming the revision that lowered the fence
        MonotonicGuardRefused.from_refusal(
            Refusal("FM002", f"agent_fence is monotonic: the token of {RESOURCE} cannot go down from 6 to 1"),
            RESOURCE,
            6,
        ).written_by(
            "revision 0002 (migrations/versions/0002_lower.py, line 16, in upgrade)",
            "; the run's transaction rolled back: nothing was applied",
        ),
        GUARD_NEWS,
        cli_plan(),
        server_plan(),
    ),
    (  # a renew by a holder whose lease went to someone else
        LeaseLost(RESOURCE, "agent-A", 3, "token 4 was granted to agent-B"),
        [f"LEASE LOST: you no longer own {RESOURCE} (token 4 was granted to agent-B)."],
        LEASE_LOST_PLAN,
        server_plan(),
    ),
]


@pytest.mark.parametrize(("error", "news", "cli", "server"), CASES, ids=["fenced", "file", "guard", "lost"])
def test_the_news_then_each_interface_s_plan(
    error: StaleWriter, news: list[str], cli: list[str], server: list[str]
) -> None:
    """The news on its own; the CLI's message (text and JSON) is the news and then the CLI's plan; the
    MCP server's text (content and structured ``message``) is the same news and then the server's plan."""
    assert error.news() == news
    assert str(error).splitlines() == [*news, *cli]
    assert error.as_json()["message"] == str(error)
    result = error_result(error)
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent), result
    text = result.content[0].text
    assert text.splitlines() == [*news, *server]
    assert result.structured_content is not None and result.structured_content["message"] == text
