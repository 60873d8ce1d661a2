"""Property: no revision is ever committed under a token lower than one that has already written.

Hypothesis draws sequences of ``(token, action)`` operations (upgrade +1, downgrade -1,
reapply of the current head) and runs them in-process through the Python API against a
database emptied before each example, next to a model of what must happen:

* an operation whose token is below the highest token that has written raises
  ``Fenced`` and changes nothing (version table, ledger, fence, tables);
* a reapply of a revision applied under another token raises ``Fenced`` and changes nothing;
* an operation with nothing to do (upgrade at head, downgrade/reapply at base) is a
  usage error (or FENCED, for a stale token) and changes nothing;
* everything else succeeds; afterwards the fence row equals the highest token that
  wrote and every ledger row's ``applied_token`` is at most the fence token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from support.db import connect, execute
from support.project import Project

import fencemigrate
from fencemigrate import Fenced, UsageError

REVISIONS = ["r1", "r2", "r3", "r4"]


def table_of(revision: str) -> str:
    """The table a revision creates."""
    return f"t_{revision}"


@dataclass
class Model:
    """What the database must look like: applied prefix of the chain, ledger, fence token."""

    position: int = 0  # how many revisions of REVISIONS are applied
    ledger: dict[str, int] = field(default_factory=dict)
    fence: int | None = None  # highest token that has written

    @property
    def head(self) -> str | None:
        """The applied head revision, None at base."""
        return REVISIONS[self.position - 1] if self.position else None

    def stale(self, token: int) -> bool:
        """True if a higher token has already written."""
        return self.fence is not None and token < self.fence


Observation = tuple[list[str], dict[str, int], dict[str, int], list[str]]


def observe(url: str) -> Observation:
    """Versions, ledger tokens, fence tokens and user tables, as committed."""
    with connect(url) as conn:
        versions = []
        if conn.execute("SELECT to_regclass('public.alembic_version')").fetchone() != (None,):
            versions = [row[0] for row in conn.execute("SELECT version_num FROM public.alembic_version ORDER BY 1")]
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = 'public' AND c.relkind = 'r' AND relname <> 'alembic_version' ORDER BY 1"
            )
        ]
        ledger: dict[str, int] = {}
        fences: dict[str, int] = {}
        if conn.execute("SELECT to_regclass('fencemigrate.agent_fence')").fetchone() != (None,):
            fences = {str(r): int(t) for r, t in conn.execute("SELECT resource, token FROM fencemigrate.agent_fence")}
            ledger = {
                str(r): int(t)
                for r, t in conn.execute(
                    "SELECT revision, applied_token FROM fencemigrate.applied_revision "
                    "WHERE version_table = 'alembic_version'"
                )
            }
    return versions, ledger, fences, tables


def expected(model: Model) -> Observation:
    """What :func:`observe` must return for ``model``."""
    return (
        [model.head] if model.head else [],
        dict(model.ledger),
        {"db/migrations": model.fence} if model.fence is not None else {},
        sorted(table_of(rev) for rev in REVISIONS[: model.position]),
    )


def run_op(config: Any, model: Model, token: int, action: str) -> str:
    """Call the API for one operation; return "ok", or raise what fencemigrate raised."""
    holder = f"agent-{token}"
    if action == "upgrade":
        fencemigrate.upgrade(config, "+1", token=token, holder=holder)
    elif action == "downgrade":
        fencemigrate.downgrade(config, "-1", token=token, holder=holder)
    else:
        fencemigrate.reapply(config, model.head or "r1", token=token, holder=holder)
    return "ok"


def check_op(config: Any, url: str, model: Model, token: int, action: str) -> None:
    """Run one operation, compare its outcome and the database with the model, advance the model."""
    before = observe(url)
    assert before == expected(model)
    nothing_to_do = (action == "upgrade" and model.position == len(REVISIONS)) or (
        action in ("downgrade", "reapply") and model.position == 0
    )
    context = f"op ({token}, {action}) on {model}"

    if nothing_to_do:
        event("nothing to do")
        allowed: tuple[type[Exception], ...] = (UsageError, Fenced) if model.stale(token) else (UsageError,)
        with pytest.raises(allowed):
            run_op(config, model, token, action)
        assert observe(url) == before, context
        return

    if model.stale(token):
        event(f"stale {action}: FENCED")
        with pytest.raises(Fenced) as caught:
            run_op(config, model, token, action)
        assert caught.value.token == token and caught.value.fence_token == model.fence, context
        assert caught.value.reason == f"token {model.fence} has since written to db/migrations", context
        assert observe(url) == before, context
        return

    head = model.head
    if action == "reapply" and head is not None and model.ledger[head] != token:
        event("reapply of another token's revision: FENCED")
        with pytest.raises(Fenced) as caught:
            run_op(config, model, token, action)
        assert caught.value.reason == f"{head} was applied under token {model.ledger[head]}, not yours", context
        # The rejected run's own claim rolled back: the fence it reports is the committed one.
        assert caught.value.fence_token == model.fence, context
        assert observe(url) == before, context
        return

    event(f"{action} succeeds")
    run_op(config, model, token, action)
    if action == "upgrade":
        model.position += 1
        model.ledger[REVISIONS[model.position - 1]] = token
    elif action == "downgrade":
        del model.ledger[REVISIONS[model.position - 1]]
        model.position -= 1
    model.fence = token
    after = observe(url)
    assert after == expected(model), context
    versions, ledger, fences, _ = after
    assert all(applied <= fences["db/migrations"] for applied in ledger.values()), context


def reset(url: str) -> None:
    """Empty the database between examples: drop the fence schema and everything in ``public``."""
    execute(url, "DROP SCHEMA IF EXISTS fencemigrate CASCADE; DROP SCHEMA public CASCADE; CREATE SCHEMA public")


@pytest.fixture
def chain(project: Project) -> Project:
    """The project with the chain r1..r4, each creating its own table."""
    down: str | None = None
    for rev in REVISIONS:
        project.add_revision(
            rev, down, f"CREATE TABLE {table_of(rev)} (id int)", f"DROP TABLE {table_of(rev)}", slug=rev
        )
        down = rev
    return project


# Upgrades twice as likely as the others, so that the chain actually gets climbed.
operations = st.lists(
    st.tuples(st.integers(min_value=1, max_value=6), st.sampled_from(["upgrade", "upgrade", "downgrade", "reapply"])),
    min_size=2,
    max_size=10,
)


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=operations)
@example(ops=[(1, "upgrade"), (2, "reapply")])  # a higher token may not re-apply another token's revision
@example(ops=[(5, "upgrade"), (3, "upgrade"), (3, "reapply"), (5, "reapply"), (6, "downgrade"), (5, "upgrade")])
@example(ops=[(2, "upgrade"), (2, "upgrade"), (2, "upgrade"), (2, "upgrade"), (2, "upgrade"), (1, "downgrade")])
def test_no_revision_is_committed_under_a_token_lower_than_one_that_wrote(
    chain: Project, pg_url: str, ops: list[tuple[int, str]]
) -> None:
    """Any order of tokens and actions: stale tokens are FENCED and change nothing; the fence is the max writer."""
    reset(pg_url)  # the database is shared by the examples: start each one from an empty one
    config = fencemigrate.load_config([str(chain.ini)])
    model = Model()
    for token, action in ops:
        check_op(config, pg_url, model, token, action)
