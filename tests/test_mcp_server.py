"""``fencemigrate mcp`` driven by the MCP SDK's own stdio client: a real server subprocess per agent.

The incident from the design notes, with two servers as agent-A and agent-B: A's grant expires
while A is paused (simply not calling), B takes the lease, reads the state and replaces A's 0042;
A's ``reapply`` and its renumbered 0043 come back as FENCED tool errors, A's server holds no token
afterwards and A's ``read_state`` shows B's work. The control replays A's steps with plain alembic,
which destroys B's table.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
import sqlalchemy as sa
from support.db import libpq_url
from support.git_repos import BRANCH, git, make_repositories
from support.incident_story import (
    A_COLUMNS,
    B_COLUMNS,
    clone_checkout,
    replay_with_plain_alembic,
    write_a_0042,
    write_a_0043,
    write_b_0042,
)
from support.mcp_client import mcp_agent, run, text_of
from support.project import (
    MakeProject,
    Project,
    create_project,
    run_command,
    script_command,
    sqlite_url,
    subprocess_env,
)

TOOLS = {
    "read_state",
    "acquire_lease",
    "renew_lease",
    "release_lease",
    "upgrade",
    "downgrade",
    "reapply",
    "stamp",
    "check",
    "push_branch",
    "read_file",
    "write_file",
}
WRITE_CALLS = [
    ("upgrade", {"revision": "head"}),
    ("downgrade", {"revision": "base"}),
    ("reapply", {"revision": "0042"}),
    ("stamp", {"revisions": ["0042"]}),
]


def columns(url: str, table: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        return [column["name"] for column in sa.inspect(engine).get_columns(table)]
    finally:
        engine.dispose()


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(sa.text(sql))]
    finally:
        engine.dispose()


def has_table(url: str, table: str) -> bool:
    engine = sa.create_engine(url)
    try:
        return sa.inspect(engine).has_table(table)
    finally:
        engine.dispose()


def ledger_of(view: dict[str, Any]) -> list[tuple[str, int, str]]:
    return [(row["revision"], row["applied_token"], row["holder"]) for row in view["state"]["ledger"]]


# -- the incident ------------------------------------------------------------------------------


@pytest.fixture(params=["postgresql", "sqlite"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database both agents migrate."""
    if request.param == "sqlite":
        return sqlite_url(tmp_path / "shared.sqlite")
    return str(request.getfixturevalue("pg_url"))


def test_incident_through_two_mcp_servers(tmp_path: Path, shared_url: str) -> None:
    """A's reapply and renumbered 0043 are FENCED tool errors, A's server drops its token, B's 0042 stays."""
    pristine = create_project(tmp_path / "pristine", shared_url)
    a = clone_checkout(pristine, "agent_a", shared_url)
    b = clone_checkout(pristine, "agent_b", shared_url)
    write_a_0042(a)

    async def scenario() -> None:
        async with mcp_agent(a, "agent-A", "--ttl", "1s") as agent_a, mcp_agent(b, "agent-B", "--ttl", "5m") as agent_b:
            # 14:26 A is granted the lease (token 1) and applies its 0042.
            granted = await agent_a.ok("acquire_lease")
            assert granted["server_token"] == 1 and granted["lease"]["holder"] == "agent-A"
            assert granted["state"]["heads"] == [] and granted["state"]["server_token"] == 1
            applied = await agent_a.ok("upgrade", revision="head")
            assert applied["heads"] == ["0042"] and applied["outcome"]["token"] == 1
            assert columns(shared_url, "invoice_currency") == A_COLUMNS

            # 14:31 A is paused: it simply makes no call. Its 1s grant expires.
            await anyio.sleep(1.5)

            # B is granted the lease (token 2), reads, rolls A's 0042 back and applies its own.
            granted = await agent_b.ok("acquire_lease")
            assert granted["server_token"] == 2
            assert ledger_of(granted["state"]) == [("0042", 1, "agent-A")]
            assert granted["state"]["lease"]["holder"] == "agent-B"
            write_a_0042(b)  # B's checkout has A's pushed 0042
            await agent_b.ok("downgrade", revision="base")
            write_b_0042(b)
            replaced = await agent_b.ok("upgrade", revision="head")
            assert replaced["heads"] == ["0042"] and replaced["outcome"]["token"] == 2
            assert columns(shared_url, "invoice_currency") == B_COLUMNS

            # 14:40 A wakes up "holding the lock" and re-applies its 0042: FENCED by the database.
            fenced = await agent_a.error("reapply", "FENCED", revision="0042")
            assert (fenced["resource"], fenced["token"], fenced["fence_token"]) == ("db/migrations", 1, 2)
            assert fenced["reason"] == "token 2 has since written to db/migrations"
            assert fenced["transient"] is False and fenced["server_token_dropped"] is True
            message = fenced["message"].splitlines()
            assert message[0] == "FENCED: you no longer own db/migrations."
            assert "This is NOT a transient error. Do not retry, rebase, renumber, or re-apply." in message
            assert "If your goal is already met by the current state, report that and stop." in message
            assert not any("fencemigrate state" in line for line in message)  # the MCP tools, not the CLI

            # What it is told to read shows that its 0042 is not the one applied (the drift rules).
            view = await agent_a.ok("read_state")
            assert view["server_token"] is None and ledger_of(view) == [("0042", 2, "agent-B")]
            assert [(f["rule"], f["revision"]) for f in view["drift"]] == [("FM402", "0042")]

            # It renumbers its copy to 0043 anyway: FENCED again, the server has no token to write with.
            write_a_0043(a)
            fenced = await agent_a.error("upgrade", "FENCED", revision="head")
            assert (fenced["token"], fenced["fence_token"]) == (1, 2)
            for tool, arguments in WRITE_CALLS:
                await agent_a.error(tool, "FENCED", **arguments)

            # A reads the state it was told to read: B's work, and no token of its own.
            view = await agent_a.ok("read_state")
            assert view["server_token"] is None
            assert view["heads"] == ["0042"]
            assert ledger_of(view) == [("0042", 2, "agent-B")]
            assert view["lease"]["holder"] == "agent-B" and view["lease"]["token"] == 2
            assert view["drift"] == []  # A's checkout has B's 0042 now

        assert columns(shared_url, "invoice_currency") == B_COLUMNS
        assert rows(shared_url, "SELECT invoice_id, currency_code FROM invoice_currency") == [(1, "USD")]
        assert rows(shared_url, "SELECT version_num FROM alembic_version") == [("0042",)]

    run(scenario)


def test_control_plain_alembic_does_as_agent_a_and_destroys_b_work(tmp_path: Path, shared_url: str) -> None:
    """The same steps without the fence: A's re-apply replaces B's table, and its 0043 goes on top."""
    pristine = create_project(tmp_path / "pristine", shared_url)
    a = clone_checkout(pristine, "ctl_a", shared_url)
    b = clone_checkout(pristine, "ctl_b", shared_url)
    replay_with_plain_alembic(a, b)
    assert columns(shared_url, "invoice_currency") == B_COLUMNS

    a.run_alembic("downgrade", "base").check(0)  # A's "reapply 0042"
    a.run_alembic("upgrade", "head").check(0)
    assert columns(shared_url, "invoice_currency") == A_COLUMNS, "control: B's table should be gone"
    assert rows(shared_url, "SELECT count(*) FROM invoice_currency") == [(0,)]
    write_a_0043(a)
    a.run_alembic("upgrade", "head").check(0)  # and A's renumbered copy lands too
    assert rows(shared_url, "SELECT version_num FROM alembic_version") == [("0043",)]


# -- no grant, no write ------------------------------------------------------------------------


def test_write_tools_without_a_grant_are_refused_and_change_nothing(tmp_path: Path) -> None:
    """No tool takes a lease and writes in one step: each write tool refuses (USAGE, saying to call
    acquire_lease), and the database is not touched. Control: the CLI without --token does both."""
    url = sqlite_url(tmp_path / "db.sqlite")
    project = create_project(tmp_path / "project", url)
    write_a_0042(project)
    control = clone_checkout(create_project(tmp_path / "pristine", url), "control", url)

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A") as agent:
            for tool, arguments in [*WRITE_CALLS, ("upgrade", {"revision": "head", "sql": True})]:
                refused = await agent.error(tool, "USAGE", **arguments)
                assert refused["message"].startswith("USAGE: this server holds no lease on db/migrations")
                assert "call acquire_lease and read the state it returns" in refused["message"]
                assert refused["server_token_dropped"] is False
            assert agent.progress == []

    run(scenario)
    assert not (tmp_path / "db.sqlite").exists()  # not even the file: nothing was connected to

    write_a_0042(control)
    control.run_cli("upgrade", "head", "--holder", "loophole").check(0)  # a lease and a write in one step
    assert columns(url, "invoice_currency") == A_COLUMNS


def test_release_drops_the_token(tmp_path: Path) -> None:
    """After release_lease the server writes nothing until it acquires again; renew keeps the token."""
    url = sqlite_url(tmp_path / "db.sqlite")
    project = create_project(tmp_path / "project", url)
    write_a_0042(project)

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "30s") as agent:
            granted = await agent.ok("acquire_lease")
            renewed = await agent.ok("renew_lease", ttl="2m")
            assert renewed["server_token"] == granted["server_token"] == 1
            assert renewed["lease"]["ttl"] == "2m" and renewed["state"]["server_token"] == 1
            released = await agent.ok("release_lease")
            assert released["server_token"] is None and released["lease"]["holder"] is None
            await agent.error("upgrade", "USAGE", revision="head")
            again_released = await agent.ok("release_lease")  # nothing held: the lease's status, as it is
            assert again_released["server_token"] is None and again_released["lease"]["holder"] is None
            assert not has_table(url, "invoice_currency")
            again = await agent.ok("acquire_lease")
            assert again["server_token"] == 2
            await agent.ok("upgrade", revision="head")
            assert columns(url, "invoice_currency") == A_COLUMNS

    run(scenario)


def test_a_grant_taken_over_is_dropped_by_read_state(tmp_path: Path) -> None:
    """When read_state sees a newer token issued, the server drops its own: writes answer LEASE_LOST."""
    url = sqlite_url(tmp_path / "db.sqlite")
    project = create_project(tmp_path / "project", url)
    other = clone_checkout(create_project(tmp_path / "pristine", url), "other", url)
    write_a_0042(project)

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "1s") as agent:
            await agent.ok("acquire_lease")
            await anyio.sleep(1.5)
            other.run_cli("lease", "acquire", "--holder", "agent-B", "--ttl", "5m").check(0)
            view = await agent.ok("read_state")
            assert view["server_token"] is None
            assert view["notes"] and "token 2" in view["notes"][0]
            lost = await agent.error("upgrade", "LEASE_LOST", revision="head")
            assert lost["server_token_dropped"] is True and lost["token"] == 1
            assert lost["message"].startswith("LEASE LOST: you no longer own db/migrations")
            busy = await agent.error("acquire_lease", "LEASE_BUSY")
            assert busy["transient"] is True and busy["holder"] == "agent-B"
            assert busy["retry_after"] and busy["retry_after"] in busy["message"]

    run(scenario)
    assert not has_table(url, "invoice_currency")


# -- progress, resource, check, bad arguments --------------------------------------------------


def test_progress_notifications_and_renewals_during_a_long_upgrade(tmp_path: Path) -> None:
    """Each revision is a progress notification (n of m); the grant is renewed between revisions."""
    url = sqlite_url(tmp_path / "db.sqlite")
    project = create_project(tmp_path / "project", url)
    for number, down in (("0001", None), ("0002", "0001"), ("0003", "0002")):
        project.add_revision(number, down, [f"CREATE TABLE t{number} (id int)"], [f"DROP TABLE t{number}"])

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "3s") as agent:
            granted = await agent.ok("acquire_lease")
            result = await agent.ok("upgrade", revision="head")
            assert agent.progress == [
                (1.0, 3.0, "upgrade 0001 (1 of 3) under token 1"),
                (2.0, 3.0, "upgrade 0002 (2 of 3) under token 1"),
                (3.0, 3.0, "upgrade 0003 (3 of 3) under token 1"),
            ]
            assert result["outcome"]["lease_renewals"] >= 1 and result["outcome"]["leased"] is False
            view = await agent.ok("read_state")
            assert view["lease"]["expires_at"] > granted["lease"]["expires_at"]  # renewed by the run
            assert view["lease"]["holder"] == "agent-A" and view["server_token"] == 1  # and still held

    run(scenario)


def test_sql_is_a_dry_run_that_returns_the_script(make_project: MakeProject, pg_url: str) -> None:
    """sql=true writes nothing and returns the script, fence claims and all (stdout is the protocol's)."""
    project = make_project()
    write_a_0042(project)

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "5m") as agent:
            await agent.ok("acquire_lease")
            result = await agent.ok("upgrade", revision="head", sql=True)
            script = result["sql"]
            assert "CREATE TABLE invoice_currency" in script
            assert "fencemigrate: fenced by token 1 on resource 'db/migrations'" in script
            assert result["outcome"]["offline"] is True and result["outcome"]["steps"][0]["token"] == 1
            assert not has_table(pg_url, "invoice_currency")
            assert (await agent.ok("read_state"))["heads"] == []

    run(scenario)


def test_the_state_resource_is_read_state(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "db.sqlite")
    project = create_project(tmp_path / "project", url)
    write_a_0042(project)

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "5m") as agent:
            await agent.ok("acquire_lease")
            await agent.ok("upgrade", revision="head")
            templates = await agent.session.list_resource_templates()
            assert [t.uri_template for t in templates.resource_templates] == ["fencemigrate://state/{+resource}"]
            read = await agent.session.read_resource("fencemigrate://state/db/migrations")
            from_resource = json.loads(read.contents[0].text)  # type: ignore[union-attr]
            assert from_resource == await agent.ok("read_state")
            assert from_resource["server_token"] == 1 and from_resource["heads"] == ["0042"]

    run(scenario)


def test_check_returns_structured_findings(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "db.sqlite")
    project = create_project(tmp_path / "project", url)
    write_a_0042(project)
    project.add_revision("0043", "0042", ["CREATE TABLE x (id int)"], [], slug="x")  # downgrade does nothing

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A") as agent:
            await agent.ok("acquire_lease")  # SQLite: the grant creates the database file
            report = (await agent.ok("check"))["report"]
            assert report["database_checked"] is True
            rules = {(finding["rule"], finding["revision"]) for finding in report["findings"]}
            assert ("FM301", "0043") in rules
            assert ("FM401", "0042") in rules  # pending: not applied yet
            only = (await agent.ok("check", select=["FM301"]))["report"]
            assert {finding["rule"] for finding in only["findings"]} == {"FM301"}
            await agent.error("check", "USAGE", select=["FM999"])

    run(scenario)


def test_a_drift_diff_withholds_what_read_file_withholds(tmp_path: Path) -> None:
    """A revision that creates a role with a password (SQL's PASSWORD '...'), applied, then edited:
    read_file, check's FM402 diff and read_state's drift all show the password as ***, and so does
    check --db --json. Control: the file holds it in clear."""
    project = create_project(tmp_path / "project", sqlite_url(tmp_path / "db.sqlite"))
    path = project.add_revision("0001", None, ["CREATE TABLE t (id int)"], ["DROP TABLE t"], slug="role")
    path.write_text(path.read_text() + "ROLE_SQL = \"CREATE ROLE app LOGIN PASSWORD 'hunter2-s'\"\n")
    relative = str(path.relative_to(project.path))

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A") as agent:
            await agent.ok("acquire_lease")
            await agent.ok("upgrade", revision="head")
            path.write_text(path.read_text().replace("ROLE_SQL", "ROLE_SQL_EDITED"))
            read = await agent.ok("read_file", path=relative)
            assert "PASSWORD '***'" in read["text"] and read["sha256"] is None
            report = (await agent.ok("check", select=["FM402"]))["report"]
            state = await agent.ok("read_state")
            for findings in (report["findings"], state["drift"]):
                assert [finding["rule"] for finding in findings] == ["FM402"]
                assert "PASSWORD '***'" in findings[0]["diff"] and "hunter2" not in json.dumps(findings)

    run(scenario)
    printed = project.run_cli("check", "--db", "--json", "--select", "FM402").stdout
    assert "hunter2-s" in path.read_text() and "FM402" in printed  # the file holds it in clear
    assert "hunter2-s" not in printed  # the CLI's output withholds SQL passwords too


def test_bad_arguments_are_usage_errors_and_change_nothing(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "db.sqlite")
    project = create_project(tmp_path / "project", url)
    write_a_0042(project)

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "5m") as agent:
            granted = await agent.ok("acquire_lease")
            before = granted["state"]
            cases: list[tuple[str, dict[str, Any], str]] = [
                ("upgrade", {"revision": "nope"}, "Can't locate revision identified by 'nope'"),
                ("downgrade", {"revision": "0099"}, "Can't locate revision identified by '0099'"),
                ("upgrade", {"revision": 42}, "bad arguments for upgrade: revision: Input should be a valid string"),
                ("upgrade", {}, "bad arguments for upgrade: revision: Field required"),
                ("upgrade", {"revision": "head", "sql": "maybe"}, "bad arguments for upgrade: sql:"),
                ("stamp", {"revisions": []}, "bad arguments for stamp: revisions:"),
                ("renew_lease", {"ttl": "banana"}, "invalid --ttl 'banana'"),
                ("acquire_lease", {"ttl": "-5s"}, "invalid --ttl '-5s'"),
                ("acquire_lease", {"wait": 3}, "bad arguments for acquire_lease: wait: Input should be a valid string"),
                (
                    "upgrade",
                    {"revision": "head", "token": 99},
                    "bad arguments for upgrade: unknown argument 'token' (upgrade takes revision, sql)",
                ),
                (
                    "release_lease",
                    {"force": True},
                    "bad arguments for release_lease: unknown argument 'force' (release_lease takes no arguments)",
                ),
                (
                    "stamp",
                    {"revisions": ["0042"], "purge": True, "dry_run": True, "Force": 1},
                    "bad arguments for stamp: unknown argument 'dry_run', 'Force' (stamp takes revisions, sql, purge)",
                ),
            ]
            for tool, arguments, expected in cases:
                refused = await agent.error(tool, "USAGE", **arguments)
                assert expected in refused["message"], refused
                assert refused["message"].endswith("Nothing was changed.")
                assert refused["server_token_dropped"] is False
            after = await agent.ok("read_state")
            assert after["server_token"] == 1 and after["lease"]["token"] == 1  # still the same grant
            assert after["heads"] == before["heads"] == [] and after["state"]["ledger"] == []
            assert not has_table(url, "invoice_currency")
            await agent.ok("upgrade", revision="head")  # the grant still writes

    run(scenario)


def test_tools_are_listed_with_schemas(tmp_path: Path) -> None:
    project = create_project(tmp_path / "project", sqlite_url(tmp_path / "db.sqlite"))

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A") as agent:
            listed = {tool.name: tool for tool in (await agent.session.list_tools()).tools}
            assert set(listed) == TOOLS
            for tool in listed.values():
                assert tool.description and tool.output_schema is not None, tool.name
            assert listed["read_state"].annotations is not None and listed["read_state"].annotations.read_only_hint
            assert listed["upgrade"].annotations is not None and listed["upgrade"].annotations.destructive_hint
            assert set(listed["upgrade"].input_schema["properties"]) == {"revision", "sql"}
            assert set(listed["stamp"].input_schema["properties"]) == {"revisions", "sql", "purge"}
            assert "token" not in json.dumps([tool.input_schema for tool in listed.values()])  # never an argument
            for tool in listed.values():  # an unknown argument is refused, and the schema says so
                assert tool.input_schema["additionalProperties"] is False, tool.name
                lines = (tool.description or "").splitlines()
                assert lines[0] == lines[0].strip() and not any(line.startswith(" ") for line in lines), tool.name
            assert listed["release_lease"].description == (
                "Free this server's lease; the server drops its token. Comes with a fresh read_state."
            )
            assert listed["upgrade"].description == (
                "Upgrade to REVISION under this server's own grant, every step claiming the fence first.\n"
                "Progress notifications name each revision (n of m); the lease is renewed between revisions."
            )
            info = agent.initialized.server_info
            assert (info.name, info.version) == ("fencemigrate", version("fencemigrate"))

    run(scenario)


# -- the command itself ------------------------------------------------------------------------


def test_print_rules(tmp_path: Path) -> None:
    project = create_project(tmp_path / "project", sqlite_url(tmp_path / "db.sqlite"))
    out = project.run_cli("mcp", "--print-rules").check(0)
    assert out.stdout.startswith("Ownership rule for db/migrations (fencemigrate MCP server)\n")
    for line in (
        "The fencemigrate server owns the lease token for db/migrations and the heads your plan was made",
        "   The server has dropped its token. (1) Stop the current plan. (2) Discard any belief that you",
        '6. Never write a token number, "I hold the lease" or "holds lock on ..." into your notes, plans or',
    ):
        assert line in out.stdout.splitlines(), out
    assert out.stderr == ""
    other = project.run_cli("mcp", "--print-rules", "--resource", "db/billing").check(0)
    assert "fencemigrate://state/db/billing" in other.stdout
    as_json = json.loads(project.run_cli("mcp", "--print-rules", "--json").check(0).stdout)
    assert as_json == {"status": "ok", "rules": out.stdout}
    bad = project.run_cli("mcp", "--print-rules", "--ttl", "soon").check(2)
    assert bad.stderr.startswith("fencemigrate: usage: invalid --ttl 'soon'")


def test_without_the_sdk_the_command_names_the_extra(tmp_path: Path) -> None:
    project = create_project(tmp_path / "project", sqlite_url(tmp_path / "db.sqlite"))
    hide_sdk = (
        "import sys; sys.modules['mcp'] = None; from fencemigrate.cli import run; sys.argv[0] = 'fencemigrate'; run()"
    )
    out = run_command([sys.executable, "-c", hide_sdk, "mcp"], project.path).check(2)
    assert out.stderr.strip() == (
        "fencemigrate: usage: fencemigrate mcp needs the MCP Python SDK, which is not installed: "
        "pip install 'fencemigrate[mcp]'"
    )


PASSWORD_PIECES = ("Xylo", "quartz", "fjord", "wombat")


def test_no_password_in_any_result(tmp_path: Path) -> None:
    """A database that cannot be reached, through a URL with a password: every tool's error text,
    structured content and the server's stderr are free of it."""
    project = create_project(tmp_path / "project", sqlite_url(tmp_path / "db.sqlite"))
    project.set_url("postgresql+psycopg://someone:Xylo%%259%%40quartz%%20fjord%%3Awombat@127.0.0.1:9/nowhere")

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A") as agent:
            seen = []
            for tool in ("read_state", "acquire_lease", "check"):
                result = await agent.call(tool)
                assert result.is_error
                seen.append(text_of(result) + json.dumps(result.structured_content))
            seen.append(agent.stderr.read_text())
            for piece in PASSWORD_PIECES:
                assert not any(piece in text for text in seen), seen
            assert "***" in seen[0] or "127.0.0.1" in seen[0]

    run(scenario)


# -- the migration branch and the project's files -----------------------------------------------


def test_push_branch_uses_the_sha_recorded_at_grant(tmp_path: Path) -> None:
    """Another clone pushes after A's grant: A's push_branch is FENCED (git:BRANCH), the remote keeps
    the other commit, and A's server drops its token. Control: plain git push --force loses it."""
    repos = make_repositories(tmp_path)
    project = create_project(repos.agent / "project", sqlite_url(tmp_path / "db.sqlite"))
    recorded = repos.remote_sha()

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--branch", BRANCH, "--ttl", "5m") as agent:
            await agent.error("push_branch", "USAGE", branch=BRANCH)  # no grant, no push
            granted = await agent.ok("acquire_lease")
            assert granted["branches"] == [{"branch": BRANCH, "sha": recorded}]
            unrecorded = await agent.error("push_branch", "USAGE", branch="main")
            assert "was not recorded when the lease was granted" in unrecorded["message"]
            mine = repos.commit(repos.agent, "0042: A's second version")
            pushed = await agent.ok("push_branch", branch=BRANCH)
            assert (pushed["pushed"], pushed["replaced"]) == (mine, recorded)
            assert repos.remote_sha() == mine

            git(repos.other, "pull", "-q", "--ff-only", "origin", BRANCH)  # B builds on A's push
            theirs = repos.commit(repos.other, "0042: B's version")
            git(repos.other, "push", "-q", "origin", BRANCH)
            repos.commit(repos.agent, "0042: A's third version")
            fenced = await agent.error("push_branch", "FENCED", branch=BRANCH)
            assert fenced["resource"] == f"git:{BRANCH}" and fenced["server_token_dropped"] is True
            assert fenced["message"].startswith(f"FENCED: this write to git:{BRANCH} is not yours to make.")
            assert f"Next step: fetch {BRANCH} from origin" in fenced["message"]
            assert repos.remote_sha() == theirs
            await agent.error("push_branch", "FENCED", branch=BRANCH)  # the token is gone
            assert repos.remote_sha() == theirs

    run(scenario)

    # CONTROL: the stale clone's plain force push replaces the other writer's commit.
    theirs = repos.remote_sha()
    assert theirs is not None
    git(repos.agent, "push", "-q", "--force", "origin", BRANCH)
    assert repos.remote_sha() != theirs and not repos.remote_has(theirs)


def test_push_branch_runs_no_hook_the_agent_could_have_written(tmp_path: Path) -> None:
    """The project keeps its git hooks in its own files (core.hooksPath = project/.githooks, as many
    projects do), where write_file reaches, unlike .git/hooks: an agent that rewrites the executable
    pre-push and reference-transaction hooks (their mode kept) must not have push_branch run them,
    which would run what it wrote and let it push anything. Control: a plain git push runs them."""
    repos = make_repositories(tmp_path)
    project = create_project(repos.agent / "project", sqlite_url(tmp_path / "db.sqlite"))
    hooks = project.path / ".githooks"
    hooks.mkdir()
    for hook in ("pre-push", "reference-transaction"):
        (hooks / hook).write_text("#!/bin/sh\nexit 0\n")
        (hooks / hook).chmod(0o755)
    git(repos.agent, "config", "core.hooksPath", "project/.githooks")
    ran = tmp_path / "hooks-ran"

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--branch", BRANCH, "--ttl", "5m") as agent:
            await agent.ok("acquire_lease")
            mine = repos.commit(repos.agent, "0042: A's version")  # (its own hooks: still the harmless ones)
            for hook in ("pre-push", "reference-transaction"):
                read = await agent.ok("read_file", path=f".githooks/{hook}")
                payload = f"#!/bin/sh\necho {hook} >> {ran}\n"
                await agent.ok("write_file", path=f".githooks/{hook}", content=payload, expected_sha256=read["sha256"])
            assert (await agent.ok("push_branch", branch=BRANCH))["pushed"] == mine
            assert repos.remote_sha() == mine
            assert not ran.exists()

    run(scenario)
    # CONTROL: the same hooks, run by a plain push of the next commit.
    repos.commit(repos.agent, "0043: A's next version")
    ran.unlink()  # (the commit ran reference-transaction)
    git(repos.agent, "push", "-q", "origin", BRANCH)
    assert ran.read_text().splitlines()[0] == "pre-push"


def project_in(clone: Path, pristine: Project) -> Project:
    """A copy of the freshly initialised ``pristine`` project inside the git clone ``clone``."""
    target = clone / "project"
    shutil.copytree(pristine.path, target)
    return Project(path=target, url=pristine.url, template=pristine.template)


@pytest.mark.parametrize(
    ("first", "backend"),
    [("write_file", "postgresql"), ("push_branch", "sqlite"), ("push_branch", "redis")],
    ids=["write_file first, PostgreSQL", "push_branch first, SQLite", "push_branch first, Redis leases"],
)
def test_a_superseded_grant_neither_writes_a_file_nor_pushes(
    tmp_path: Path, request: pytest.FixtureRequest, first: str, backend: str
) -> None:
    """Issue 24, defect 1: A's lease expires, B is granted through its own server and applies 0042;
    A's write_file and push_branch, each compared only with what A's own grant recorded, are
    FENCED by the live fence (whichever comes first; the second by the token it dropped): no file
    written, nothing pushed, and B, still the live holder, writes and pushes. Control: the same
    stale write and push with plain file I/O and plain git land, and B's push is then FENCED."""
    url = sqlite_url(tmp_path / "shared.sqlite") if backend == "sqlite" else str(request.getfixturevalue("pg_url"))
    repos = make_repositories(tmp_path)
    pristine = create_project(tmp_path / "pristine", url)
    if backend == "redis":
        pristine.set_ini_option("fencemigrate_lease_url", str(request.getfixturevalue("redis_url")))
    a, b = project_in(repos.agent, pristine), project_in(repos.other, pristine)
    at_grant = repos.remote_sha()
    notes_a, notes_b = a.path / "notes.md", b.path / "notes.md"
    notes_a.write_text("A's plan\n")
    notes_b.write_text("B's plan\n")
    write_b_0042(b)
    calls = {
        "write_file": {"path": "notes.md", "content": "A's stale notes\n"},
        "push_branch": {"branch": BRANCH},
    }

    async def scenario() -> None:
        async with (
            mcp_agent(a, "agent-A", "--branch", BRANCH, "--ttl", "1s") as agent_a,
            mcp_agent(b, "agent-B", "--branch", BRANCH, "--ttl", "5m") as agent_b,
        ):
            assert (await agent_a.ok("acquire_lease"))["server_token"] == 1
            read = await agent_a.ok("read_file", path="notes.md")
            calls["write_file"]["expected_sha256"] = read["sha256"]
            await anyio.sleep(1.5)  # A is paused; its 1s grant expires

            granted = await agent_b.ok("acquire_lease")
            assert granted["server_token"] == 2 and granted["branches"] == [{"branch": BRANCH, "sha": at_grant}]
            assert (await agent_b.ok("upgrade", revision="head"))["outcome"]["token"] == 2

            # A wakes up, still "holding" token 1 and the SHA recorded at its grant.
            stale = repos.commit(repos.agent, "0042: A's stale version")
            fenced = await agent_a.error(first, "FENCED", **calls[first])
            assert (fenced["resource"], fenced["token"], fenced["fence_token"]) == ("db/migrations", 1, 2)
            assert fenced["reason"] == "token 2 has since written to db/migrations"
            assert fenced["server_token_dropped"] is True
            assert fenced["message"].startswith("FENCED: you no longer own db/migrations.\n")
            second = "push_branch" if first == "write_file" else "write_file"
            assert (await agent_a.error(second, "FENCED", **calls[second]))["fence_token"] == 2
            assert notes_a.read_text() == "A's plan\n"
            assert repos.remote_sha() == at_grant and not repos.remote_has(stale)

            # B is still the live holder, unharmed: it writes and pushes under token 2.
            view = await agent_b.ok("read_state")
            assert (view["server_token"], view["lease"]["holder"], view["lease"]["token"]) == (2, "agent-B", 2)
            theirs = repos.commit(repos.other, "0042: B's version")
            assert (await agent_b.ok("push_branch", branch=BRANCH))["pushed"] == theirs
            read_b = await agent_b.ok("read_file", path="notes.md")
            await agent_b.ok("write_file", path="notes.md", content="B's notes\n", expected_sha256=read_b["sha256"])
            assert repos.remote_sha() == theirs and notes_b.read_text() == "B's notes\n"
            assert rows(url, "SELECT version_num FROM alembic_version") == [("0042",)]

            # CONTROL: A's same stale steps with plain file I/O and plain git (the incident's push)
            # land, and then B, the live holder, is the one FENCED.
            repos.commit(repos.other, "0043: B's next version")
            git(repos.agent, "push", "-q", "--force", "origin", BRANCH)
            notes_a.write_text("A's stale notes\n")
            assert repos.remote_sha() == stale and notes_a.read_text() == "A's stale notes\n"
            await agent_b.error("push_branch", "FENCED", branch=BRANCH)

    run(scenario)


def test_push_branch_after_a_fresh_grant_never_rewinds_another_holders_commit(tmp_path: Path) -> None:
    """Issue 24, defect 2: B pushed under its grant; A, whose branch never got B's commit, calls
    acquire_lease (which records B's commit) and push_branch: FENCED, the remote keeps B's commit,
    A's branch and files are as they were. Built on B's commit under a new grant, A's push goes.
    Control: the old push, --force-with-lease against the SHA recorded at grant, rewinds B's commit."""
    repos = make_repositories(tmp_path)
    url = sqlite_url(tmp_path / "shared.sqlite")
    pristine = create_project(tmp_path / "pristine", url)
    a, b = project_in(repos.agent, pristine), project_in(repos.other, pristine)
    seen: dict[str, str] = {}

    async def scenario() -> None:
        async with (
            mcp_agent(a, "agent-A", "--branch", BRANCH, "--ttl", "5m") as agent_a,
            mcp_agent(b, "agent-B", "--branch", BRANCH, "--ttl", "5m") as agent_b,
        ):
            await agent_b.ok("acquire_lease")
            theirs = repos.commit(repos.other, "0042: B's version")
            assert (await agent_b.ok("push_branch", branch=BRANCH))["pushed"] == theirs
            await agent_b.ok("release_lease")

            granted = await agent_a.ok("acquire_lease")  # a fresh grant: it records B's commit
            assert granted["branches"] == [{"branch": BRANCH, "sha": theirs}]
            seen["theirs"] = theirs
            seen["stale"] = repos.commit(repos.agent, "0042: A's version, never rebased on B's")
            before = git(repos.agent, "for-each-ref"), git(repos.agent, "status", "--porcelain", "--ignored")
            fenced = await agent_a.error("push_branch", "FENCED", branch=BRANCH)
            assert fenced["resource"] == f"git:{BRANCH}" and fenced["server_token_dropped"] is True
            assert fenced["reason"].startswith("the remote has commits your branch does not have: ")
            assert fenced["message"].startswith(f"FENCED: this write to git:{BRANCH} is not yours to make.\n")
            assert "Next step: fetch, re-read and re-plan: " in fenced["message"]
            assert repos.remote_sha() == theirs
            assert (git(repos.agent, "for-each-ref"), git(repos.agent, "status", "--porcelain", "--ignored")) == before

            git(repos.agent, "fetch", "-q", "origin")  # A re-reads, re-plans and builds on B's commit
            git(repos.agent, "reset", "-q", "--hard", f"origin/{BRANCH}")
            mine = repos.commit(repos.agent, "0043: A's revision, on top of B's")
            await agent_a.ok("acquire_lease")
            assert (await agent_a.ok("push_branch", branch=BRANCH))["pushed"] == mine
            assert repos.remote_sha() == mine and repos.remote_has(theirs)

    run(scenario)

    # CONTROL: the stale commit pushed as push_branch did, against the SHA the fresh grant recorded.
    git(repos.remote, "update-ref", f"refs/heads/{BRANCH}", seen["theirs"])  # the remote as A's grant found it
    lease = f"--force-with-lease=refs/heads/{BRANCH}:{seen['theirs']}"
    git(repos.agent, "push", "-q", lease, "origin", f"{seen['stale']}:refs/heads/{BRANCH}")
    assert repos.remote_sha() == seen["stale"] and not repos.remote_has(seen["theirs"])


def test_a_grant_the_lease_service_no_longer_holds_writes_no_file(tmp_path: Path) -> None:
    """The fence has not moved, but the lease service no longer holds A's grant (an operator released
    it from the CLI): write_file is LEASE_LOST, the token dropped, the file as it was. A bad path with
    a live grant is USAGE before the lease service is asked: no RENEW is logged for it."""
    project = create_project(tmp_path / "project", sqlite_url(tmp_path / "db.sqlite"))
    notes = project.path / "notes.md"
    notes.write_text("A's plan\n")

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "5m") as agent:
            await agent.ok("acquire_lease")
            read = await agent.ok("read_file", path="notes.md")
            events = project.run_cli("timeline", "--json").check(0).stdout
            await agent.error("write_file", "USAGE", path="../notes.md", content="x", expected_sha256=read["sha256"])
            assert project.run_cli("timeline", "--json").check(0).stdout == events
            project.run_cli("lease", "release", "--holder", "agent-A").check(0)
            lost = await agent.error(
                "write_file", "LEASE_LOST", path="notes.md", content="A's notes\n", expected_sha256=read["sha256"]
            )
            assert lost["reason"] == "the lease is not held" and lost["server_token_dropped"] is True
            assert notes.read_text() == "A's plan\n"
            assert (await agent.ok("read_state"))["server_token"] is None

    run(scenario)
    notes.write_text("A's notes\n")  # CONTROL: a plain write does not ask the lease service
    assert notes.read_text() == "A's notes\n"


@pytest.mark.parametrize("leases", ["built-in", "redis"])
def test_a_grant_expired_but_not_taken_over_writes_and_is_renewed(
    tmp_path: Path, request: pytest.FixtureRequest, leases: str
) -> None:
    """A's 1s grant expires and nobody is granted the lease: write_file still goes (the check renews
    the grant, as lease renew after expiry does), and B's grant is then busy, not issued beside it."""
    project = create_project(tmp_path / "project", sqlite_url(tmp_path / "db.sqlite"))
    if leases == "redis":
        project.set_ini_option("fencemigrate_lease_url", str(request.getfixturevalue("redis_url")))
    notes = project.path / "notes.md"
    notes.write_text("A's plan\n")

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "1s") as agent_a, mcp_agent(project, "agent-B") as agent_b:
            await agent_a.ok("acquire_lease")
            read = await agent_a.ok("read_file", path="notes.md")
            await anyio.sleep(1.5)
            assert (await agent_a.ok("read_state"))["lease"]["expired"] is True
            await agent_a.ok("write_file", path="notes.md", content="A's notes\n", expected_sha256=read["sha256"])
            lease = (await agent_a.ok("read_state"))["lease"]
            assert (lease["holder"], lease["token"], lease["expired"]) == ("agent-A", 1, False)
            busy = await agent_b.error("acquire_lease", "LEASE_BUSY")
            assert busy["holder"] == "agent-A"

    run(scenario)
    assert notes.read_text() == "A's notes\n"


def test_a_fenced_write_never_tells_the_hash_read_file_withheld(tmp_path: Path) -> None:
    """read_file withholds the hash of a file it redacted (so that its *** can never replace the
    passwords) and reads no .env at all; a write_file with a made-up hash is FENCED without naming
    the hash on disk, so the agent cannot learn it there and overwrite the file with the redacted
    text. Control: with the hash the file had, the redacted text would have replaced the password."""
    project = create_project(tmp_path / "project", sqlite_url(tmp_path / "db.sqlite"))
    secret = project.path / "db.yaml"
    secret.write_text("password: hunter2-q\n")
    dotenv = project.path / ".env"
    dotenv.write_text("DB_PASS=hunter2-r\n")
    hashes = {hashlib.sha256(path.read_bytes()).hexdigest() for path in (secret, dotenv)}

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "5m") as agent:
            read = await agent.ok("read_file", path="db.yaml")
            assert (read["text"], read["sha256"]) == ("password: ***\n", None)
            for path in ("db.yaml", ".env"):
                await agent.ok("acquire_lease")
                fenced = await agent.error(
                    "write_file", "FENCED", path=path, content="password: ***\n", expected_sha256="0" * 64
                )
                assert not any(known in json.dumps(fenced) for known in hashes), fenced
                assert f"{path} has another sha256 on disk, not {'0' * 64} as you read it" in fenced["reason"]

    run(scenario)
    assert (secret.read_text(), dotenv.read_text()) == ("password: hunter2-q\n", "DB_PASS=hunter2-r\n")


def test_write_file_needs_the_hash_it_was_read_with(tmp_path: Path) -> None:
    """A file changed since the agent read it is FENCED (file:PATH) and keeps the other writer's text;
    a path outside the project is USAGE. Control: a plain write loses the other writer's text."""
    project = create_project(tmp_path / "project", sqlite_url(tmp_path / "db.sqlite"))
    (tmp_path / "outside.txt").write_text("not the project's")
    target = project.versions / "notes.txt"
    target.write_text("first\n")

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "5m") as agent:
            read = await agent.ok("read_file", path="migrations/versions/notes.txt")
            assert read["text"] == "first\n"
            await agent.error("write_file", "USAGE", path=read["path"], content="x", expected_sha256=read["sha256"])
            await agent.ok("acquire_lease")
            written = await agent.ok(
                "write_file", path="migrations/versions/notes.txt", content="mine\n", expected_sha256=read["sha256"]
            )
            assert target.read_text() == "mine\n"

            target.write_text("someone else's\n")  # another writer, after A's write
            fenced = await agent.error(
                "write_file",
                "FENCED",
                path="migrations/versions/notes.txt",
                content="mine again\n",
                expected_sha256=written["sha256"],
            )
            assert fenced["resource"] == "file:migrations/versions/notes.txt"
            assert target.read_text() == "someone else's\n"
            # The token is dropped and the lease, still this server's, released: no writer waits out its TTL.
            after = await agent.ok("read_state")
            assert after["server_token"] is None and after["lease"]["holder"] is None
            assert (await agent.ok("release_lease"))["server_token"] is None

            (project.path / "secrets.txt").write_text("url = postgresql://deploy:hunter2@db/app\n")
            redacted = await agent.ok("read_file", path="secrets.txt")
            assert redacted == {
                "path": "secrets.txt",
                "text": "url = postgresql://deploy:***@db/app\n",
                "sha256": None,
                "redacted": True,
            }

            await agent.ok("acquire_lease")
            for path in ("../outside.txt", str(tmp_path / "outside.txt"), "migrations/../../outside.txt"):
                await agent.error("write_file", "USAGE", path=path, content="escaped", expected_sha256="absent")
            assert (tmp_path / "outside.txt").read_text() == "not the project's"

    run(scenario)

    target.write_text("the other writer's\n")  # CONTROL: a plain write does not look
    target.write_text("mine, unchecked\n")
    assert target.read_text() == "mine, unchecked\n"


# -- read_file never hands the agent a password (issue 24, defect 7) --------------------------------

DB_PASSWORD = "Db-pw-4f9q"  # sqlalchemy.url's (PostgreSQL's trust auth accepts and ignores it)
VAULT_PASSWORD = "Vault-pw-77x"  # only env.py knows where it is: the engine's, learnt by connecting
LEASE_PASSWORD = "Lease-pw-k2"  # fencemigrate_lease_url's
ENV_PASSWORD = "Env-pw-31z"  # the server's environment: APP_DB_PASSWORD
UNKNOWN = "never-seen-9"  # in no configuration: recognised by its key only

#: Each format, as a project file: (path, text, what the agent must be shown).
SECRET_FORMATS = [
    ("deploy/settings.sh", f"export DB_PASS={DB_PASSWORD}\nDB_USER=app\n", "export DB_PASS=***\nDB_USER=app\n"),
    ("deploy/run.sh", f"PGPASSWORD {UNKNOWN} psql -h db\n", "PGPASSWORD *** psql -h db\n"),
    ("deploy/db.yaml", f"db:\n  password: {UNKNOWN}\n  host: db\n", "db:\n  password: ***\n  host: db\n"),
    ("deploy/db.json", f'{{"user": "app", "password": "{UNKNOWN}"}}', '{"user": "app", "password": "***"}'),
    ("deploy/urls.txt", f"primary: mysql://app:{UNKNOWN}@db/app\n", "primary: mysql://app:***@db/app\n"),
    ("deploy/notes.md", f"vault says {VAULT_PASSWORD}; lease {LEASE_PASSWORD}\n", "vault says ***; lease ***\n"),
    ("deploy/ci.txt", f"token ({ENV_PASSWORD}) and db ({DB_PASSWORD})\n", "token (***) and db (***)\n"),
    # across lines, decorated, or marked by position (each leaked before; issue 24, defect 7 again)
    (
        "deploy/block.yaml",
        f"db:\n  password: |\n    {UNKNOWN}\n  host: db\n",
        "db:\n  password: |\n    ***\n  host: db\n",
    ),
    ("deploy/anchor.yaml", f"password: &pw {UNKNOWN}\n", "password: &pw ***\n"),
    ("deploy/db.toml", f'[db]\npassword = """\n{UNKNOWN}"""\n', '[db]\npassword = """***"""\n'),
    ("deploy/app.env", f'DB_PASS="{UNKNOWN}\nrest"\nDB_USER=app\n', 'DB_PASS="***"\nDB_USER=app\n'),
    ("deploy/db.xml", f"<db><password>{UNKNOWN}</password></db>\n", "<db><password>***</password></db>\n"),
    ("deploy/pgpass.conf", f"db:5432:app:bob:{UNKNOWN}\n", "db:5432:app:bob:***\n"),
]
SECRETS = (DB_PASSWORD, VAULT_PASSWORD, LEASE_PASSWORD, ENV_PASSWORD, UNKNOWN)


def secret_project(tmp_path: Path, pg_url: str) -> Project:
    """A project whose env.py connects with a password from a vault file outside the project, whose
    config holds a database and a lease URL password, with a file of each format and a .env."""
    project = create_project(tmp_path / "project", pg_url)
    vault = tmp_path / "vault.txt"
    vault.write_text(pg_url.replace("postgres@", f"postgres:{VAULT_PASSWORD}@", 1))
    project.edit_env(
        "config.get_section(config.config_ini_section, {})",
        f"{{**config.get_section(config.config_ini_section, {{}}), 'sqlalchemy.url': open({str(vault)!r}).read()}}",
    )
    project.set_url(pg_url.replace("postgres@", f"postgres:{DB_PASSWORD}@", 1))
    project.set_ini_option("fencemigrate_lease_url", f"redis://:{LEASE_PASSWORD}@127.0.0.1:9/0")
    (project.path / "deploy").mkdir()
    for path, text, _ in SECRET_FORMATS:
        (project.path / path).write_text(text)
    (project.path / ".env").write_text(f"DB_PASS={UNKNOWN}\n")
    (project.path / "deploy" / ".env.production").write_text(f"DB_PASS={UNKNOWN}\n")
    (project.path / ".envrc").write_text(f"export DB_PASS={UNKNOWN}\n")
    (project.path / ".ENV").write_text(f"DB_PASS={UNKNOWN}\n")
    (project.path / "deploy" / "_netrc").write_text(f"machine db login app password {UNKNOWN}\n")
    (project.path / "deploy" / "plain.txt").write_text("nothing secret here: postgresql, pass, password_hash\n")
    return project


def test_read_file_never_returns_a_password_the_server_knows_or_recognises(tmp_path: Path, pg_url: str) -> None:
    """Every format comes back with *** (redacted true, no sha256); .env files and the config file
    holding credentials are refused. Control: the files themselves hold every password in clear."""
    project = secret_project(tmp_path, pg_url)

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", env={"APP_DB_PASSWORD": ENV_PASSWORD}) as agent:
            for path, _, shown in SECRET_FORMATS:
                assert await agent.ok("read_file", path=path) == {
                    "path": path,
                    "text": shown,
                    "sha256": None,
                    "redacted": True,
                }, path
            plain = await agent.ok("read_file", path="deploy/plain.txt")
            assert plain["redacted"] is False and plain["sha256"] is not None
            for path, why in [
                (".env", ".env conventionally holds secrets"),
                ("deploy/.env.production", ".env.production conventionally holds secrets"),
                (".envrc", ".envrc conventionally holds secrets"),
                ("alembic.ini", "the server's config file, and it holds credentials"),
                (".ENV", ".ENV conventionally holds secrets"),  # the same file as .env where names ignore case
                ("deploy/_netrc", "_netrc conventionally holds secrets"),  # .netrc's name on Windows
            ]:
                refused = await agent.error("read_file", "USAGE", path=path)
                assert refused["message"].startswith(f"USAGE: read_file refuses {path!r}: {why}"), refused
                assert "start the server with --read-secret-files" in refused["message"]
                assert not any(secret in refused["message"] for secret in SECRETS)

    run(scenario)
    # CONTROL: what a plain read of the same files hands over.
    plain_reads = "".join((project.path / path).read_text() for path, _, _ in SECRET_FORMATS)
    assert all(secret in plain_reads for secret in SECRETS)
    assert DB_PASSWORD in project.ini.read_text() and UNKNOWN in (project.path / ".env").read_text()


def test_read_secret_files_reads_them_redacted(tmp_path: Path, pg_url: str) -> None:
    """With --read-secret-files, .env and the config file are read, their secrets still ***."""
    project = secret_project(tmp_path, pg_url)

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--read-secret-files") as agent:
            dotenv = await agent.ok("read_file", path=".env")
            assert (dotenv["text"], dotenv["sha256"], dotenv["redacted"]) == ("DB_PASS=***\n", None, True)
            ini = await agent.ok("read_file", path="alembic.ini")
            assert ini["redacted"] is True and ini["sha256"] is None
            assert "postgres:***@" in ini["text"] and "redis://:***@" in ini["text"]
            assert not any(secret in ini["text"] for secret in SECRETS)

    run(scenario)


def test_writes_expect_the_heads_the_agent_was_shown(tmp_path: Path) -> None:
    """The server passes the heads of the agent's last read as expect_heads (its own writes move
    them): heads moved behind its back make the write FENCED and change nothing. Control: the same
    stale plan through the CLI with the same token and no --expect-heads rolls the other's 0043 back."""
    url = sqlite_url(tmp_path / "db.sqlite")
    project = create_project(tmp_path / "project", url)
    write_a_0042(project)
    project.add_revision("0043", "0042", ["CREATE TABLE other_work (id int)"], ["DROP TABLE other_work"], slug="o")

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "5m") as agent:
            await agent.ok("acquire_lease")
            applied = await agent.ok("upgrade", revision="0042")
            assert applied["expected_heads"] == ["base"] and applied["heads"] == ["0042"]
            project.allow_tokenless_writes()
            project.run_alembic("upgrade", "head").check(0)  # another writer, without a token
            stale = await agent.error("downgrade", "FENCED", revision="base")  # planned from 0042
            assert stale["reason"] == "heads are 0043, you planned from 0042"
            assert stale["server_token_dropped"] is True
            assert has_table(url, "other_work") and has_table(url, "invoice_currency")
            view = await agent.ok("read_state")
            assert view["heads"] == ["0043"]

    run(scenario)
    project.run_cli("downgrade", "base", "--token", "1", "--holder", "agent-A").check(0)  # CONTROL
    assert not has_table(url, "other_work")


def test_the_server_releases_its_lease_when_the_client_goes(tmp_path: Path) -> None:
    """Stdin closed (the agent's harness ended): the server releases its grant, so the next writer
    does not wait out the TTL. Control: a lease acquired from the CLI stays held after the process ends."""
    url = sqlite_url(tmp_path / "db.sqlite")
    project = create_project(tmp_path / "project", url)

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "10m") as agent:
            assert (await agent.ok("acquire_lease"))["state"]["lease"]["holder"] == "agent-A"

    run(scenario)
    status = json.loads(project.run_cli("lease", "status", "--json").check(0).stdout)
    assert status["lease"]["holder"] is None, status

    project.run_cli("lease", "acquire", "--holder", "agent-B", "--ttl", "10m").check(0)  # CONTROL
    status = json.loads(project.run_cli("lease", "status", "--json").check(0).stdout)
    assert status["lease"]["holder"] == "agent-B", status


def test_sigterm_stops_the_server_and_releases_its_lease(tmp_path: Path) -> None:
    """A SIGTERM (a harness stopping its agent, a pod stopped) ends the server the orderly way: its
    lease is released, not left to keep the next writer off for its TTL."""
    url = sqlite_url(tmp_path / "db.sqlite")
    project = create_project(tmp_path / "project", url)
    holder = f"agent-sigterm-{os.getpid()}"

    ended: list[bool] = []

    async def scenario() -> None:
        async with mcp_agent(project, holder, "--ttl", "10m") as agent:
            assert (await agent.ok("acquire_lease"))["state"]["lease"]["holder"] == holder
            (pid,) = server_pids(holder)
            os.kill(pid, signal.SIGTERM)
            for _ in range(200):  # at most 20 s
                if not server_pids(holder):
                    break
                await anyio.sleep(0.1)
            ended.append(not server_pids(holder))

    with contextlib.suppress(Exception):  # the client's session ends with its server
        run(scenario)
    assert ended == [True], "the server did not end within 20 s of its SIGTERM"
    status = json.loads(project.run_cli("lease", "status", "--json").check(0).stdout)
    assert status["lease"]["holder"] is None, status


def server_pids(holder: str) -> list[int]:
    """The ``fencemigrate mcp --holder HOLDER`` processes running now."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"mcp" in argv and holder.encode() in argv and (entry / "stat").read_text().split()[2] != "Z":
                pids.append(int(entry.name))
    return pids


# -- docs/mcp.md's client configuration --------------------------------------------------------

DOCS_MCP = Path(__file__).resolve().parent.parent / "docs" / "mcp.md"
ENV_LINE = '        env={"DATABASE_URL": os.environ["DATABASE_URL"]},  # the server inherits only PATH, HOME, ...\n'


def documented_python_client() -> str:
    """The Python example under "The Python SDK's own stdio client" in docs/mcp.md, as written."""
    text = DOCS_MCP.read_text()
    after = text[text.index("**The Python SDK's own stdio client**") :]
    return after[after.index("```python\n") + len("```python\n") : after.index("\n```\n")] + "\n"


def test_the_documented_python_client_runs_as_written(tmp_path: Path) -> None:
    """docs/mcp.md's Python client, run as a script in a project whose env.py reads DATABASE_URL:
    it initializes (the server names its version), reads, takes the lease and upgrades. Control:
    without the example's ``env`` the server never sees DATABASE_URL and the upgrade does not happen."""
    url = sqlite_url(tmp_path / "db.sqlite")
    project = create_project(tmp_path / "project", "")
    project.edit_env(
        "config = context.config\n",
        'config = context.config\nconfig.set_main_option("sqlalchemy.url", __import__("os").environ["DATABASE_URL"])\n',
        1,
    )
    write_a_0042(project)
    example = documented_python_client()
    assert ENV_LINE in example
    bin_dir = str(Path(script_command("fencemigrate")[0]).parent)
    env = subprocess_env({"DATABASE_URL": url, "PATH": bin_dir + os.pathsep + os.environ["PATH"]})

    control = tmp_path / "without_env.py"
    control.write_text(example.replace(ENV_LINE, ""))
    refused = run_command([sys.executable, str(control)], project.path, env)
    assert refused.code != 0 and not has_table(url, "invoice_currency"), refused

    script = tmp_path / "example.py"
    script.write_text(example)
    result = run_command([sys.executable, str(script)], project.path, env)
    assert result.code == 0, result
    assert result.stdout.splitlines() == [
        f"server fencemigrate {version('fencemigrate')}",
        "heads []",
        "token 1",
        "progress 1/1: upgrade 0042 (1 of 1) under token 1",
        "upgraded to ['0042']",
    ], result
    assert has_table(url, "invoice_currency")


def test_read_state_answers_while_an_upgrade_waits_for_the_fence(tmp_path: Path, pg_url: str) -> None:
    """Another session holds the fence (its claim's transaction open): the server's upgrade waits,
    sends a progress notification naming that session within 5 s, and read_state answers meanwhile
    (the state last read, and what the upgrade waits for) instead of queueing behind it; the upgrade
    applies once the fence is free."""
    project = create_project(tmp_path / "project", pg_url)
    project.add_revision("0001", None, ["CREATE TABLE t1 (id int)"], ["DROP TABLE t1"])

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A") as agent:
            await agent.ok("acquire_lease")
            with psycopg.connect(libpq_url(pg_url)) as holder:
                holder.execute("SELECT fencemigrate.claim('db/migrations', 1)")
                pid = holder.execute("SELECT pg_backend_pid()").fetchone()[0]
                async with anyio.create_task_group() as tasks:
                    upgraded: list[dict[str, Any]] = []

                    async def upgrade() -> None:
                        upgraded.append(await agent.ok("upgrade", revision="head"))

                    tasks.start_soon(upgrade)
                    with anyio.fail_after(120):
                        while not agent.progress:
                            await anyio.sleep(0.1)
                    (_, total, message) = agent.progress[0]
                    assert total is None and message is not None
                    assert message.startswith(f"waiting for the fence of db/migrations: held by pid {pid} since ")
                    with anyio.fail_after(30):
                        view = await agent.ok("read_state")
                    assert not upgraded
                    assert view["heads"] == [] and view["server_token"] == 1
                    assert view["notes"][-1].startswith(
                        "another tool call of this server is still running (waiting for the fence of db/migrations: "
                        f"held by pid {pid} since "
                    ), view["notes"]
                    holder.rollback()
            assert upgraded[0]["heads"] == ["0001"]
            assert (await agent.ok("read_state"))["heads"] == ["0001"]

    run(scenario)


def test_read_state_answers_while_the_first_call_waits_for_the_lease(tmp_path: Path, pg_url: str) -> None:
    """The server's first call, acquire_lease, waits for another holder's lease: read_state answers
    at once (LEASE_BUSY: transient, nothing read yet, naming what that call waits for) instead of
    queueing behind it for up to its --wait; once the lease is free the grant and read_state go on."""
    project = create_project(tmp_path / "project", pg_url)
    project.add_revision("0001", None, ["CREATE TABLE t1 (id int)"], ["DROP TABLE t1"])
    project.run_cli("lease", "acquire", "--holder", "other", "--ttl", "5m").check(0)

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A") as agent:
            async with anyio.create_task_group() as tasks:
                granted: list[dict[str, Any]] = []

                async def acquire() -> None:
                    granted.append(await agent.ok("acquire_lease", wait="2m"))

                tasks.start_soon(acquire)
                await anyio.sleep(5)  # no read_state before: the call's wait has begun, and nothing was shown
                with anyio.fail_after(10):
                    answer = await agent.call("read_state")
                busy = answer.structured_content or {}
                assert busy["error"] == "LEASE_BUSY" and text_of(answer) == busy["message"], busy
                assert busy["message"] == (
                    "LEASE_BUSY: lease on db/migrations is busy: another tool call of this server is still running "
                    "(waiting for the lease on db/migrations: held by other with token 1), and this server has read "
                    "no state yet: call read_state again once it has returned; this is transient, try again later"
                ), busy
                assert not granted
                project.run_cli("lease", "release", "--holder", "other").check(0)
            assert granted[0]["lease"]["token"] == 2
            assert (await agent.ok("read_state"))["server_token"] == 2

    run(scenario)


def test_a_grant_whose_state_cannot_be_read_is_released(tmp_path: Path) -> None:
    """acquire_lease commits its grant, then the server's own read of the state for the agent (the
    drift check, a second env.py run) fails: the answer is that error, saying the grant was released;
    the server holds no token, the lease is free for others, and the next acquire_lease is granted.
    Here env.py fails on that run (as a database gone away would)."""
    project = create_project(tmp_path / "project", sqlite_url(tmp_path / "db.sqlite"))
    env_py = project.path / "migrations" / "env.py"
    env_py.write_text(
        "import pathlib\n"
        "_runs = pathlib.Path(__file__).with_name('env-runs')\n"
        "_runs.write_text(_runs.read_text() + 'x' if _runs.exists() else 'x')\n"
        "_fail = pathlib.Path(__file__).with_name('fail-on-run')\n"
        "if _fail.exists() and _fail.read_text() == str(len(_runs.read_text())):\n"
        "    raise RuntimeError('the database went away')\n" + env_py.read_text()
    )
    runs = project.path / "migrations" / "env-runs"
    project.run_cli("install").check(0)

    async def scenario() -> None:
        async with mcp_agent(project, "agent-A", "--ttl", "5m") as agent:
            # the grant's own env.py run, then the drift check's
            (project.path / "migrations" / "fail-on-run").write_text(str(len(runs.read_text()) + 2))
            undone = await agent.error("acquire_lease", "ERROR")
            assert undone["status"] == "grant released" and undone["token"] == 1, undone
            assert undone["message"].startswith(
                "ERROR: lease on db/migrations granted to agent-A with token 1, then released: after the grant, "
            ), undone
            assert "RuntimeError: the database went away" in undone["message"], undone
            status = json.loads(project.run_cli("lease", "status", "--json").check(0).stdout)
            assert status["lease"]["holder"] is None and status["lease"]["token"] == 1, status
            assert (await agent.ok("read_state"))["server_token"] is None
            await agent.error("upgrade", "USAGE", revision="head")
            assert (await agent.ok("acquire_lease"))["server_token"] == 2

    run(scenario)
