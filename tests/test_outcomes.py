"""Every outcome, pinned: each error class's exit status, JSON status, MCP code, whether the MCP
server drops its token, whether an agent may retry, and whether its text line is prefixed with
``fencemigrate: STATUS:``. The CLI, plain ``alembic`` through env.py and the MCP server all read it
from the class, so a change to any row changes all three at once, and shows here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import fencemigrate.runtime.environment  # noqa: F401  (defines MissingDatabase)
from fencemigrate.agent_server.results import error_result
from fencemigrate.errors import (
    EXIT_STATUSES,
    FencemigrateError,
    GrantUndone,
    Interrupted,
    LeaseBusy,
    UsageError,
    render,
)

# class: (exit status, status, MCP code, the server drops its token, prefixed)
OUTCOMES = {
    "AppliedTextAltered": (1, "error", "ERROR", False, True),
    "AppliedTextNotRecorded": (1, "error", "ERROR", False, True),
    "CheckDatabaseUnreadable": (1, "error", "ERROR", False, True),
    "CodeFailed": (1, "error", "ERROR", False, True),
    "DatabaseAhead": (3, "fenced", "FENCED", True, False),
    "DatabaseError": (1, "error", "ERROR", False, True),
    "Dirty": (5, "dirty", "DIRTY", False, False),
    "EnvPyFailed": (1, "error", "ERROR", False, True),
    "Fenced": (3, "fenced", "FENCED", True, False),
    "GitFailed": (1, "error", "ERROR", False, True),
    "GrantNotReplicated": (4, "not replicated", "ERROR", False, True),
    "GrantUndone": (1, "grant released", "ERROR", False, True),
    "HeadsMoved": (1, "error", "ERROR", False, True),
    "ImplausibleClock": (1, "error", "ERROR", False, True),
    "Interrupted": (1, "interrupted", "ERROR", False, True),
    "LeaseBusy": (4, "busy", "LEASE_BUSY", False, True),
    "LeaseGuardRefused": (1, "refused", "ERROR", False, True),
    "LeaseLost": (3, "lost", "LEASE_LOST", True, True),
    "MissingDatabase": (1, "error", "ERROR", False, True),
    "MonotonicGuardRefused": (3, "fenced", "FENCED", True, False),
    "NotApplied": (1, "error", "ERROR", False, True),
    "NotTransactional": (1, "error", "ERROR", False, True),
    "OtherTokenSource": (2, "usage", "USAGE", False, True),
    "ReadOnlyDatabase": (1, "error", "ERROR", False, True),
    "RevisionDatabaseFailed": (1, "error", "ERROR", False, True),
    "RevisionFailed": (1, "error", "ERROR", False, True),
    "TokenRequired": (2, "usage", "USAGE", False, True),
    "TokenlessWriteRefused": (2, "usage", "USAGE", False, True),
    "TokensExhausted": (1, "error", "ERROR", False, True),
    "UsageError": (2, "usage", "USAGE", False, True),
}


def subclasses(cls: type[FencemigrateError]) -> Iterator[type[FencemigrateError]]:
    for subclass in cls.__subclasses__():
        yield subclass
        yield from subclasses(subclass)


def outcome_of(error: FencemigrateError) -> tuple[int, str, str, bool, bool]:
    """The row of ``error`` as the text output and the MCP server see it."""
    shown = render(error, as_json=False)
    prefixed = shown.text.startswith(f"fencemigrate: {error.status}: ")
    return shown.exit_status, error.status, error.outcome.mcp_code, error.outcome.drops_token, prefixed


def bare(cls: type[FencemigrateError]) -> FencemigrateError:
    """An instance of ``cls`` with no constructor run (the rows are the class's, not a message's)."""
    error = Exception.__new__(cls)
    Exception.__init__(error, "x")
    return error


def test_every_outcome_class_is_pinned() -> None:
    assert sorted({cls.__name__ for cls in subclasses(FencemigrateError)}) == sorted(OUTCOMES)


@pytest.mark.parametrize("name", sorted(OUTCOMES))
def test_each_class_has_its_outcome_in_every_output(name: str) -> None:
    (cls,) = {cls for cls in subclasses(FencemigrateError) if cls.__name__ == name}
    assert outcome_of(bare(cls)) == OUTCOMES[name]


def test_the_outcomes_that_take_their_exit_status_from_the_instance() -> None:
    """A signal exits 128 + its number; a released grant exits as the failure after it did."""
    assert outcome_of(Interrupted("SIGTERM", 143)) == (143, "interrupted", "ERROR", False, True)
    undone = GrantUndone("db/migrations", "agent-A", 7, LeaseBusy("db/migrations", "b", "held"), None)
    assert outcome_of(undone) == (4, "grant released", "ERROR", False, True)
    undone = GrantUndone("db/migrations", "agent-A", 7, UsageError("bad"), None)
    assert outcome_of(undone)[:3] == (2, "grant released", "ERROR")
    assert outcome_of(GrantUndone("db/migrations", "agent-A", 7, OSError("gone"), None))[0] == 1


@pytest.mark.parametrize(
    "error",
    [LeaseBusy("db/migrations", "agent-A", "held"), UsageError("bad"), Interrupted("SIGINT", 130)],
    ids=["busy", "usage", "interrupted"],
)
def test_the_mcp_result_and_the_json_carry_the_same_outcome(error: FencemigrateError) -> None:
    exit_status, status, code, dropped, _ = outcome_of(error)
    fields = error_result(error).structured_content
    assert fields is not None
    assert render(error, as_json=True).exit_status == exit_status
    assert (fields["status"], fields["error"], fields["server_token_dropped"]) == (status, code, dropped)
    assert fields["transient"] is error.outcome.transient is (code == "LEASE_BUSY")


def test_the_help_lists_each_exit_status_once() -> None:
    assert EXIT_STATUSES == (
        ("0", "success"),
        ("1", "error: the database refused or was unreachable, or a revision failed"),
        ("2", "bad usage: unknown option, bad token, unknown revision, bad config"),
        ("3", "FENCED or lease lost: not transient; re-read the state and re-plan"),
        ("4", "lease busy: another live holder has the lease; try again later"),
        ("5", "dirty: a pre-check revision never finished; see fencemigrate resolve"),
        ("130", "stopped by SIGINT: rolled back, lease released"),
        ("143", "stopped by SIGTERM: rolled back, lease released"),
    )
