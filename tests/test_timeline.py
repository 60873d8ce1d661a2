"""``fencemigrate timeline``: the event log told the way a postmortem needs it.

The events come from real commands against the test's PostgreSQL database: lease grants,
renewals and releases, fenced upgrades, downgrades, re-applies and stamps, and FENCED
rejections. A lease "expires" by moving its expiry to the database's now, as a paused holder's
lease would; events dated in the past are written with the database's own clock. No test
sleeps or depends on timing.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine
from support.db import execute, query, schema_names, table_names
from support.project import Project, Result, create_project

from fencemigrate import UsageError, load_config
from fencemigrate.api import timeline
from fencemigrate.fence.events import log_event

_CLEAN_ENV: dict[str, str | None] = {"FENCEMIGRATE_TOKEN": None, "ALEMBIC_CONFIG": None}
_TIME_COLUMN = re.compile(r"^(?P<time>(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2})  (?P<rest>.*)$")
_LOG_LINE = re.compile(r"^[A-Z]{4,8} +\[[\w.]+\] ")


# -- helpers -----------------------------------------------------------------------------------


def cli(project: Project, *args: str, env: Mapping[str, str | None] | None = None) -> Result:
    """Run ``fencemigrate *args`` in the project, without inherited token or config variables."""
    return project.run_cli(*args, env={**_CLEAN_ENV, **(env or {})})


def events_json(project: Project, *args: str) -> list[dict[str, Any]]:
    """``timeline --json``: exit 0, one object with status ok; its events."""
    result = cli(project, "timeline", *args, "--json").check(0)
    assert len(result.stdout.splitlines()) == 1, result
    payload = json.loads(result.stdout)
    assert set(payload) == {"status", "events"} and payload["status"] == "ok", payload
    events = payload["events"]
    assert isinstance(events, list)
    return events


def expected_times(events: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """The header and the time column the text form must show for these JSON events."""
    moments = [datetime.fromisoformat(event["at"]) for event in events]
    assert all(moment.utcoffset() == timedelta(0) for moment in moments), events
    days = {moment.date() for moment in moments}
    if len(days) == 1:
        return f"times in UTC on {days.pop().isoformat()}, oldest first", [m.strftime("%H:%M:%S") for m in moments]
    return "times in UTC, oldest first", [m.strftime("%Y-%m-%d %H:%M:%S") for m in moments]


def story(project: Project, *args: str) -> list[str]:
    """``timeline *args`` as text, each line without its time column.

    Checks the header and the times against ``timeline --json`` with the same arguments
    (the events are the same: nothing writes in between).
    """
    result = cli(project, "timeline", *args).check(0)
    lines = result.stdout.splitlines()
    header, times = expected_times(events_json(project, *args))
    assert lines[0] == header, result
    rows = [_TIME_COLUMN.match(line) for line in lines[1:]]
    assert all(rows), result
    assert [row["time"] for row in rows if row] == times, result
    return [row["rest"] for row in rows if row]


def expire_lease(project: Project, resource: str = "db/migrations") -> None:
    """The holder paused past its TTL: the lease's expiry is now, by the database's clock."""
    execute(
        project.url, "UPDATE fencemigrate.lease SET expires_at = clock_timestamp() WHERE resource = %s", (resource,)
    )


def event_rows(project: Project) -> list[tuple[Any, ...]]:
    """Every row of the event log, in id order."""
    return query(project.url, "SELECT * FROM fencemigrate.fence_event ORDER BY id")


@pytest.fixture
def incident(project: Project) -> Project:
    """Two revisions and the incident: A applies 0042, pauses past its lease, B takes over, A comes back."""
    project.add_revision("0042", None, "CREATE TABLE widgets (id int)", "DROP TABLE widgets")
    project.add_revision("0043", "0042", "CREATE TABLE gadgets (id int)", "DROP TABLE gadgets")
    steps: list[tuple[int, tuple[str, ...]]] = [
        (0, ("lease", "acquire", "--holder", "agent-A", "--ttl", "5m")),
        (0, ("upgrade", "0042", "--token", "1", "--holder", "agent-A")),
    ]
    for code, args in steps:
        cli(project, *args).check(code)
    expire_lease(project)
    steps = [
        (0, ("lease", "acquire", "--holder", "agent-B", "--ttl", "5m")),
        (3, ("reapply", "0042", "--token", "2", "--holder", "agent-B")),
        (0, ("downgrade", "base", "--token", "2", "--holder", "agent-B")),
        (0, ("upgrade", "0042", "--token", "2", "--holder", "agent-B")),
        (0, ("reapply", "0042", "--token", "2", "--holder", "agent-B")),
        (0, ("lease", "renew", "--holder", "agent-B", "--ttl", "10m")),
        (3, ("reapply", "0042", "--token", "1", "--holder", "agent-A")),
        (3, ("lease", "renew", "--holder", "agent-A", "--token", "1")),
        (0, ("stamp", "0043", "--token", "2", "--holder", "agent-B")),
        (0, ("lease", "release", "--holder", "agent-B")),
    ]
    for code, args in steps:
        cli(project, *args).check(code)
    return project


INCIDENT_LINES = [
    "GRANT    db/migrations -> agent-A  token=1 ttl=5m",
    "APPLY    0042 by agent-A token=1",
    "EXPIRE   db/migrations (holder agent-A)",
    "GRANT    db/migrations -> agent-B  token=2 ttl=5m",
    "FENCED   reapply 0042 by agent-B token=2 (0042 was applied under token 1, not yours)",
    "ROLLBACK 0042 by agent-B token=2",
    "APPLY    0042 by agent-B token=2",
    "ROLLBACK 0042 by agent-B token=2",  # the re-apply: rolled back and applied in one transaction
    "APPLY    0042 by agent-B token=2",
    "RENEW    db/migrations by agent-B token=2 ttl=10m",
    "FENCED   reapply 0042 by agent-A token=1 < 2",
    "LOST     db/migrations by agent-A token=1 (it has been granted to agent-B with token 2)",
    "STAMP    0043 by agent-B token=2",
    "RELEASE  db/migrations by agent-B token=2",
]


# -- the story ---------------------------------------------------------------------------------


def test_timeline_tells_the_incident_oldest_first(incident: Project) -> None:
    assert story(incident) == INCIDENT_LINES


def test_timeline_json_has_every_field_of_every_event(incident: Project) -> None:
    events = events_json(incident)
    assert all(set(event) == {"at", "resource", "kind", "holder", "token", "revision", "detail"} for event in events)
    assert [datetime.fromisoformat(event["at"]) for event in events] == sorted(
        datetime.fromisoformat(event["at"]) for event in events
    )
    assert {event["resource"] for event in events} == {"db/migrations"}
    assert [(e["kind"], e["holder"], e["token"], e["revision"], e["detail"]) for e in events] == [
        ("GRANT", "agent-A", 1, None, {"ttl_ms": 300000}),
        ("APPLY", "agent-A", 1, "0042", {}),
        ("EXPIRE", "agent-A", 1, None, {}),
        ("GRANT", "agent-B", 2, None, {"ttl_ms": 300000}),
        (
            "FENCED",
            "agent-B",
            2,
            "0042",
            {"command": "reapply", "fence_token": 2, "reason": "0042 was applied under token 1, not yours"},
        ),
        ("ROLLBACK", "agent-B", 2, "0042", {}),
        ("APPLY", "agent-B", 2, "0042", {}),
        ("ROLLBACK", "agent-B", 2, "0042", {}),
        ("APPLY", "agent-B", 2, "0042", {}),
        ("RENEW", "agent-B", 2, None, {"ttl_ms": 600000, "after_expiry": False}),
        (
            "FENCED",
            "agent-A",
            1,
            "0042",
            {"command": "reapply", "fence_token": 2, "reason": "token 2 has since written to db/migrations"},
        ),
        ("LOST", "agent-A", 1, None, {"reason": "it has been granted to agent-B with token 2"}),
        ("STAMP", "agent-B", 2, "0043", {}),
        ("RELEASE", "agent-B", 2, None, {}),
    ]


def test_timeline_changes_nothing(incident: Project) -> None:
    before = (
        event_rows(incident),
        query(incident.url, "SELECT * FROM fencemigrate.lease"),
        query(incident.url, "SELECT * FROM fencemigrate.agent_fence"),
    )
    cli(incident, "timeline").check(0)
    cli(incident, "timeline", "--json", "--since", "1h", "--resource", "db/migrations").check(0)
    assert (
        event_rows(incident),
        query(incident.url, "SELECT * FROM fencemigrate.lease"),
        query(incident.url, "SELECT * FROM fencemigrate.agent_fence"),
    ) == before


# -- --since -----------------------------------------------------------------------------------


def test_since_a_duration_counts_back_on_the_database_clock(incident: Project) -> None:
    execute(
        incident.url,
        "INSERT INTO fencemigrate.fence_event (at, resource, kind, holder, token, revision) "
        "VALUES (clock_timestamp() - interval '3 hours', 'db/migrations', 'APPLY', 'agent-0', 0, '0041')",
    )
    assert story(incident, "--since", "2h") == INCIDENT_LINES
    assert story(incident, "--since", "4h") == ["APPLY    0041 by agent-0 token=0"] + INCIDENT_LINES
    assert story(incident, "--since", "10800s") == INCIDENT_LINES  # 3h ago is now later than the event
    assert cli(incident, "timeline", "--since", "0s").check(0).stdout == "no events match --resource/--since\n"


def test_since_a_date_time_starts_at_that_moment(incident: Project) -> None:
    first_apply = datetime.fromisoformat(events_json(incident)[1]["at"])
    from_apply = INCIDENT_LINES[1:]
    india = timezone(timedelta(hours=5, minutes=30))
    for since in (
        first_apply.isoformat(),  # +00:00
        first_apply.replace(tzinfo=None).isoformat(),  # no offset: UTC
        first_apply.replace(tzinfo=None).isoformat() + "Z",
        first_apply.astimezone(india).isoformat(),
    ):
        assert story(incident, "--since", since) == from_apply, since
    just_after = (first_apply + timedelta(microseconds=1)).isoformat()
    assert story(incident, "--since", just_after) == from_apply[1:]


# -- --resource and several resources ----------------------------------------------------------


def test_resource_filter_and_a_timeline_of_several_resources(project: Project) -> None:
    project.add_revision("0042", None, "CREATE TABLE widgets (id int)", "DROP TABLE widgets")
    cli(project, "lease", "acquire", "--holder", "agent-A", "--ttl", "5m").check(0)
    cli(project, "upgrade", "0042", "--token", "1", "--holder", "agent-A").check(0)
    cli(project, "lease", "acquire", "--resource", "other/queue", "--holder", "agent-C", "--ttl", "30s").check(0)
    cli(project, "lease", "renew", "--resource", "other/queue", "--holder", "agent-C", "--ttl", "90s").check(0)
    cli(project, "lease", "release", "--resource", "other/queue", "--holder", "agent-C").check(0)

    other = [
        "GRANT    other/queue -> agent-C  token=1 ttl=30s",
        "RENEW    other/queue by agent-C token=1 ttl=90s",
        "RELEASE  other/queue by agent-C token=1",
    ]
    assert story(project, "--resource", "other/queue") == other
    assert story(project, "--resource", "db/migrations") == [
        "GRANT    db/migrations -> agent-A  token=1 ttl=5m",
        "APPLY    0042 by agent-A token=1",
    ]
    # With more than one resource, ledger lines say which resource they wrote to.
    assert story(project) == [
        "GRANT    db/migrations -> agent-A  token=1 ttl=5m",
        "APPLY    0042 on db/migrations by agent-A token=1",
        *other,
    ]
    result = cli(project, "timeline", "--resource", "never/leased").check(0)
    assert result.stdout == "no events match --resource/--since\n"


def test_preempt_late_renewal_and_days_apart(project: Project) -> None:
    """A PREEMPT and a renewal after expiry as the lease service writes them, and events on
    different UTC days (full date-times)."""
    cli(project, "lease", "acquire", "--holder", "agent-A", "--ttl", "5m").check(0)
    engine = create_engine(project.url)
    try:
        with engine.begin() as connection:
            log_event(
                connection,
                '"fencemigrate"',
                resource="db/migrations",
                kind="PREEMPT",
                holder="agent-B",
                token=2,
                detail={"cancelled_pid": 1234},
            )
            log_event(
                connection,
                '"fencemigrate"',
                resource="db/migrations",
                kind="RENEW",
                holder="agent-B",
                token=2,
                detail={"ttl_ms": 60000, "after_expiry": True},
            )
            log_event(
                connection,
                '"fencemigrate"',
                resource="db/migrations",
                kind="APPLY",
                holder="agent-0",
                token=0,
                revision="0041",
                at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
            )
    finally:
        engine.dispose()
    result = cli(project, "timeline").check(0)
    lines = result.stdout.splitlines()
    assert lines[:2] == ["times in UTC, oldest first", "2026-01-02 03:04:05  APPLY    0041 by agent-0 token=0"]
    assert story(project) == [
        "APPLY    0041 by agent-0 token=0",
        "GRANT    db/migrations -> agent-A  token=1 ttl=5m",
        "PREEMPT  db/migrations: agent-B token=2 cancelled backend 1234",
        "RENEW    db/migrations by agent-B token=2 ttl=1m (after it had expired; nobody else had been granted it)",
    ]
    assert story(project, "--since", "2026-01-02T03:04:05.000001") == story(project)[1:]


# -- nothing to tell ---------------------------------------------------------------------------


def test_no_fence_schema_means_no_events_yet_and_nothing_installed(project: Project) -> None:
    assert cli(project, "timeline").check(0).stdout == "no events yet\n"
    assert events_json(project) == []
    assert events_json(project, "--since", "1h", "--resource", "db/migrations") == []
    assert "fencemigrate" not in schema_names(project.url)
    assert table_names(project.url) == []


# -- bad input ---------------------------------------------------------------------------------


SINCE_HINT = (
    "expected a date-time such as 2026-11-29T14:26:10Z (UTC unless it has an offset) or how long ago, such as 10m or 2h"
)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--since", "yesterday"), f"invalid --since 'yesterday': {SINCE_HINT}"),
        (("--since", "-5m"), f"invalid --since '-5m': {SINCE_HINT}"),
        (("--since", ""), f"invalid --since '': {SINCE_HINT}"),
        (("--since", "2026-13-01"), f"invalid --since '2026-13-01': {SINCE_HINT}"),
        (
            ("--since", "876001h"),
            "invalid --since '876001h': at most 876000h (100 years) ago; give a date-time instead",
        ),
        (
            ("--since", "0001-01-01T00:00:00+05:00"),
            "invalid --since '0001-01-01T00:00:00+05:00': the date-time is out of range",
        ),
        (("--resource", ""), "resource name must not be empty"),
    ],
)
def test_bad_input_exits_2_before_touching_the_database(project: Project, args: tuple[str, ...], message: str) -> None:
    cli(project, "lease", "acquire", "--holder", "agent-A").check(0)
    before = event_rows(project)
    result = cli(project, "timeline", *args).check(2)
    # env.py never ran: no Alembic log lines, only the usage message.
    assert result.stderr == f"fencemigrate: usage: {message}\n", result
    assert result.stdout == ""
    payload = json.loads(cli(project, "timeline", *args, "--json").check(2).stdout)
    assert payload == {"status": "usage", "message": message}
    assert event_rows(project) == before


# -- the Python API ----------------------------------------------------------------------------


def test_api_returns_the_events(incident: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(incident.path)
    config = load_config([str(incident.ini)])
    events = timeline(config, resource="db/migrations", since="1h")
    assert [(event.kind, event.holder, event.token) for event in events][:2] == [
        ("GRANT", "agent-A", 1),
        ("APPLY", "agent-A", 1),
    ]
    assert all(event.at.utcoffset() == timedelta(0) for event in events)
    assert timeline(config, resource="other/queue") == []
    with pytest.raises(UsageError, match="invalid --since 'soon'"):
        timeline(config, since="soon")


# -- SQLite --------------------------------------------------------------------------------------


@pytest.fixture
def sqlite_project(tmp_path: Path) -> Project:
    """A generic Alembic project on a SQLite file, with 0042 and 0043 and a FENCED re-apply in its log."""
    project = create_project(tmp_path / "project", f"sqlite:///{tmp_path / 'app.db'}")
    project.add_revision("0042", None, "CREATE TABLE widgets (id int)", "DROP TABLE widgets")
    project.add_revision("0043", "0042", "CREATE TABLE gadgets (id int)", "DROP TABLE gadgets")
    return project


def sqlite_rows(project: Project, sql: str) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` in the project's SQLite file (its own short connection)."""
    connection = sqlite3.connect(project.url.removeprefix("sqlite:///"))
    try:
        with connection:
            return connection.execute(sql).fetchall()
    finally:
        connection.close()


def test_sqlite_timeline(sqlite_project: Project) -> None:
    project = sqlite_project
    database = Path(project.url.removeprefix("sqlite:///"))
    cli(project, "timeline").check(1)  # no such file: reading never creates it
    assert not database.exists()
    database.touch()  # an empty database
    assert cli(project, "timeline").check(0).stdout == "no events yet\n"
    assert sqlite_rows(project, "SELECT name FROM sqlite_master") == []  # nothing installed by reading
    cli(project, "upgrade", "0042", "--token", "1", "--holder", "agent-A").check(0)
    cli(project, "upgrade", "0043", "--token", "2", "--holder", "agent-B").check(0)
    cli(project, "reapply", "0042", "--token", "1", "--holder", "agent-A").check(3)
    cli(project, "reapply", "0043", "--token", "2", "--holder", "agent-B").check(0)
    lines = [
        "APPLY    0042 by agent-A token=1",
        "APPLY    0043 by agent-B token=2",
        "FENCED   reapply 0042 by agent-A token=1 < 2",
        "ROLLBACK 0043 by agent-B token=2",
        "APPLY    0043 by agent-B token=2",
    ]
    assert story(project) == lines
    events = events_json(project)
    assert events[2]["detail"] == {
        "command": "reapply",
        "fence_token": 2,
        "reason": "token 2 has since written to db/migrations",
    }

    second = datetime.fromisoformat(events[1]["at"])
    assert story(project, "--since", second.isoformat()) == lines[1:]
    assert story(project, "--since", second.replace(tzinfo=None).isoformat()) == lines[1:]
    assert story(project, "--since", (second + timedelta(milliseconds=1)).isoformat()) == lines[2:]

    sqlite_rows(
        project,
        "INSERT INTO fencemigrate_fence_event (at, resource, kind, holder, token, revision) VALUES "
        "(strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-3 hours'), 'db/migrations', 'APPLY', 'agent-0', 0, '0041')",
    )
    assert story(project, "--since", "2h") == lines
    assert story(project, "--since", "4h") == ["APPLY    0041 by agent-0 token=0"] + lines
    assert events_json(project, "--resource", "other/queue") == []
    assert cli(project, "timeline", "--resource", "other/queue").check(0).stdout == (
        "no events match --resource/--since\n"
    )

    before = sqlite_rows(project, "SELECT * FROM fencemigrate_fence_event ORDER BY id")
    result = cli(project, "timeline", "--since", "soon").check(2)
    assert result.stderr == f"fencemigrate: usage: invalid --since 'soon': {SINCE_HINT}\n"
    assert sqlite_rows(project, "SELECT * FROM fencemigrate_fence_event ORDER BY id") == before


def test_sqlite_orders_times_written_in_another_form(sqlite_project: Project) -> None:
    """An event dated by the caller (as an expiry is) sorts and filters by its time, not its text."""
    project = sqlite_project
    cli(project, "upgrade", "0042", "--token", "1", "--holder", "agent-A").check(0)
    engine = create_engine(project.url)
    try:
        with engine.begin() as connection:
            log_event(
                connection,
                '"fencemigrate"',
                resource="db/migrations",
                kind="EXPIRE",
                holder="agent-0",
                token=0,
                at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2))),
            )
    finally:
        engine.dispose()
    lines = cli(project, "timeline").check(0).stdout.splitlines()
    assert lines[:2] == ["times in UTC, oldest first", "2026-01-02 01:04:05  EXPIRE   db/migrations (holder agent-0)"]
    assert story(project, "--since", "2026-01-02T01:04:05.001") == ["APPLY    0042 by agent-A token=1"]
