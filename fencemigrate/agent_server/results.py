"""What the MCP server's tools return: the structured content of each result, and its schema
(each tool's ``outputSchema``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class StateView(BaseModel):
    """What ``read_state`` returns (and the state resource, and every lease tool)."""

    resource: str = Field(description="The fenced resource this server writes to.")
    holder: str = Field(description="This server's holder name.")
    server_token: int | None = Field(
        description="The token of this server's own grant, for the record only (you never pass it); "
        "null: the server holds no lease and writes nothing."
    )
    heads: list[str] = Field(description="The database's heads now.")
    lease: dict[str, Any] = Field(description="The live lease, by the lease service's clock.")
    state: dict[str, Any] = Field(description="Fence rows, ledger, dirty revisions (as `fencemigrate state --json`).")
    drift: list[dict[str, Any]] = Field(
        description="Revision files that differ from what was applied, or are missing (check rules FM402, FM403)."
    )
    notes: list[str] = Field(description="What changed for this server's grant, in words.")


class LeaseResult(BaseModel):
    """What ``acquire_lease``, ``renew_lease`` and ``release_lease`` return."""

    lease: dict[str, Any] = Field(description="The grant (or, after a release, the lease's status).")
    server_token: int | None = Field(description="This server's token now, for the record; null after a release.")
    branches: list[dict[str, Any]] = Field(
        description="The branches recorded at this grant (--branch): push_branch expects the remote at these SHAs."
    )
    state: StateView = Field(description="A fresh read_state: plan from this.")


class RunResult(BaseModel):
    """What ``upgrade``, ``downgrade``, ``reapply`` and ``stamp`` return."""

    outcome: dict[str, Any] = Field(description="The run, as `fencemigrate upgrade --json` prints it.")
    heads: list[str] | None = Field(description="The heads after the run (after the script, with sql).")
    expected_heads: list[str] | None = Field(
        description="The heads the run required when it claimed: those of the last state you were shown "
        "(read_state, acquire_lease, renew_lease) or of this server's last write; null with sql."
    )
    server_token: int | None = Field(description="This server's token, for the record.")
    sql: str | None = Field(description="With sql=true: the script, fence claims included; nothing was run.")


class PushResult(BaseModel):
    """What ``push_branch`` returns."""

    branch: str
    remote: str
    pushed: str = Field(description="The commit the remote's branch is at now (this server's push).")
    replaced: str | None = Field(description="What the remote had, as recorded (null: the branch did not exist).")
    server_token: int


class FileText(BaseModel):
    """What ``read_file`` returns."""

    path: str
    text: str
    sha256: str | None = Field(
        description="The hash to pass to write_file as expected_sha256; null when the text was redacted."
    )
    redacted: bool = Field(
        default=False,
        description="The file holds a password, shown as ***: the text is not the file's, so its hash is "
        "withheld and write_file cannot replace the file with it.",
    )


class WrittenFile(BaseModel):
    """What ``write_file`` returns."""

    path: str
    sha256: str = Field(description="The hash of what was written: the one to write with next time.")
    server_token: int


class CheckResult(BaseModel):
    """What ``check`` returns."""

    report: dict[str, Any] = Field(description="Findings, as `fencemigrate check --db --json` prints them.")
