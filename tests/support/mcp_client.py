"""A ``fencemigrate mcp`` server process per agent, driven by the MCP SDK's own stdio client (the
server forks from the test process's fencemigrate zygote through a launcher, :func:`support.zygote.launcher`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult, InitializeResult, TextContent

from support import zygote
from support.project import Project, script_command, subprocess_env


@dataclass
class Agent:
    """One MCP client session with one ``fencemigrate mcp`` server process."""

    session: ClientSession
    stderr: Path
    initialized: InitializeResult
    progress: list[tuple[float, float | None, str | None]] = field(default_factory=list)

    async def call(self, tool: str, **arguments: Any) -> CallToolResult:
        async def heard(progress: float, total: float | None, message: str | None) -> None:
            self.progress.append((progress, total, message))

        return await self.session.call_tool(tool, arguments, progress_callback=heard)

    async def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """The structured result of a call that must succeed."""
        result = await self.call(tool, **arguments)
        assert not result.is_error, text_of(result)
        assert result.structured_content is not None
        return result.structured_content

    async def error(self, tool: str, code: str, **arguments: Any) -> dict[str, Any]:
        """The structured content of a call that must fail with ``code``."""
        result = await self.call(tool, **arguments)
        assert result.is_error, result
        assert result.structured_content is not None, text_of(result)
        assert result.structured_content["error"] == code, result.structured_content
        assert text_of(result) == result.structured_content["message"]
        return result.structured_content


def text_of(result: CallToolResult) -> str:
    """The text the model reads."""
    assert len(result.content) == 1 and isinstance(result.content[0], TextContent), result
    return result.content[0].text


@asynccontextmanager
async def mcp_agent(
    project: Project, holder: str, *options: str, env: dict[str, str] | None = None
) -> AsyncIterator[Agent]:
    """``fencemigrate -c alembic.ini mcp --holder HOLDER OPTIONS`` in ``project``, with a client
    session (``env``: variables added to the server's environment)."""
    command = zygote.launcher(
        [*script_command("fencemigrate"), "-c", str(project.ini), "mcp", "--holder", holder, *options],
        base_env=subprocess_env(),
    )
    params = StdioServerParameters(
        command=command[0],
        args=command[1:],
        cwd=project.path,
        env=subprocess_env(env),
    )
    stderr = project.path / f"mcp-{holder}.stderr"
    with stderr.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            yield Agent(session, stderr, await session.initialize())


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    anyio.run(scenario)
