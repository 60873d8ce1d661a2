"""The epoch note's eight traces and three open counterexamples, as migrations (bench/faults/traces.py).

design-notes/001 asks for ``failed=0/8`` on the fenced planner and ``naive_broken=True`` on the
ghost traces. Here a timeout is the lease expiring and a new grant, a compensation is a downgrade
under the new token, a late success is a commit under the old one. Every trace runs twice on a
fresh database: through the ``fencemigrate`` CLI, where no property may fail, and through the naive
control (plain Alembic behind a hand-rolled lease), which must break on exactly the traces that
contain a ghost (a result under a superseded epoch, or under none) and on no other.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.replication import own_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from faults.backends import Backend  # noqa: E402
from faults.project import alembic_template, fence_aware_template  # noqa: E402
from faults.traces import COUNTEREXAMPLES, TRACES, run_trace  # noqa: E402

CASES = [(backend, name) for name, trace in {**TRACES, **COUNTEREXAMPLES}.items() for backend in trace.backends]
GHOSTS = {name for name, trace in {**TRACES, **COUNTEREXAMPLES}.items() if trace.ghost}


def test_the_note_has_eight_traces_and_three_counterexamples() -> None:
    """The denominators: 8 traces (3 of them ghosts), 3 counterexamples (plus a --preempt variant)."""
    assert len(TRACES) == 8
    assert {name for name in TRACES if name in GHOSTS} == {
        "late_success_after_compensate",
        "compensate_then_late_success",
        "ghost_then_duplicate_compensate",
    }
    assert set(COUNTEREXAMPLES) == {
        "compensate_before_bump_durable",
        "success_without_epoch",
        "second_timeout_while_epoch2_inflight",
        "second_timeout_preempts_epoch2",
    }


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("epoch-traces")


@pytest.fixture(scope="module")
def template(scratch: Path) -> Path:
    return alembic_template(scratch)


@pytest.fixture(scope="module")
def backends() -> Iterator[dict[str, Backend]]:
    """SQLite, and a PostgreSQL server of the module's own with ``track_commit_timestamp`` on (turning
    it on in the shared server would restart it under the other tests)."""
    with own_server("-c track_commit_timestamp=on") as server:
        postgresql = Backend(
            "postgresql", server_url=f"postgresql+psycopg://postgres@127.0.0.1:{server.port}", commit_timestamps=True
        )
        yield {"postgresql": postgresql, "sqlite": Backend("sqlite")}


TRACE_PARAMS = [pytest.param(backend, name, id=f"{backend}-{name}") for backend, name in CASES]
# "A success that echoes no epoch" on a database that has grants but no version table yet: the
# version-table guard is put on the table by the first fenced run, so plain alembic's very first
# write (it creates the table) goes through. Once a fenced run has written, it is refused
# (tests/test_tokenless_writes.py). Open in issue 12.
FENCEMIGRATE_PARAMS = [pytest.param(backend, name, id=f"{backend}-{name}") for backend, name in CASES]


@pytest.mark.parametrize(("backend", "name"), FENCEMIGRATE_PARAMS)
def test_fencemigrate_keeps_the_invariant(
    backends: dict[str, Backend], template: Path, scratch: Path, backend: str, name: str
) -> None:
    """No commit under a superseded epoch (or none), the change applied at most once: failed=0."""
    result = run_trace(backends[backend], "fencemigrate", name, template, scratch)
    assert result.violations == [], "\n".join(result.log)


@pytest.mark.parametrize(("backend", "name"), TRACE_PARAMS)
def test_naive_control_breaks_on_every_ghost_trace_only(
    backends: dict[str, Backend], template: Path, scratch: Path, backend: str, name: str
) -> None:
    """The control: naive_broken on each ghost trace, and no false alarm on the others."""
    result = run_trace(backends[backend], "control", name, template, scratch)
    assert result.broken == (name in GHOSTS), "\n".join([*map(str, result.violations), *result.log])


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_a_fence_aware_env_refuses_a_success_without_epoch(
    backends: dict[str, Backend], scratch: Path, backend: str
) -> None:
    """Counterexample 2 with `fencemigrate init`'s env.py: the tokenless success is refused."""
    result = run_trace(
        backends[backend],
        "fencemigrate",
        "success_without_epoch",
        alembic_template(scratch),
        scratch,
        env_template=fence_aware_template(scratch),
    )
    assert result.violations == [], "\n".join(result.log)
    assert any(
        line.startswith("tokenless A upgrade head -> 2: ") and "refusing to migrate without a fencing token" in line
        for line in result.log
    ), "\n".join(result.log)
