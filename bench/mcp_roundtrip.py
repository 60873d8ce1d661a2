"""What an agent saves per call through ``fencemigrate mcp``: an MCP round trip to a running server
against the same command through the CLI, process start included.

Two calls an agent makes most: ``read_state`` (CLI: ``fencemigrate state --json``) and an
``upgrade`` with nothing to do, at head (CLI: ``fencemigrate upgrade head --token N --holder H
--json``). One project (SQLite file, no server needed; ``--url`` for another database) with
``--revisions`` applied revisions; the MCP server is started once and holds the lease, as a harness
keeps it. Each measurement is the median of ``--rounds`` calls, MCP and CLI alternating; the
ratio is CLI time over MCP time. ``read_state`` does more than ``state`` (the live lease and the
drift rules too), so its ratio understates what the server saves on the same work.

    .venv/bin/python bench/mcp_roundtrip.py [--rounds 15] [--revisions 50] [--url URL]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from common import host_line
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

FENCEMIGRATE = str(Path(sys.executable).parent / "fencemigrate")
HOLDER = "bench-agent"


def make_project(root: Path, revisions: int, url: str | None) -> Path:
    """A fence-aware project (``fencemigrate init``) with ``revisions`` small revisions."""
    subprocess.run([FENCEMIGRATE, "init", "migrations"], cwd=root, check=True, capture_output=True)
    if url is not None:
        ini = root / "alembic.ini"
        lines = [
            f"sqlalchemy.url = {url}" if line.startswith("sqlalchemy.url") else line
            for line in ini.read_text().splitlines()
        ]
        ini.write_text("\n".join(lines) + "\n")
    for number in range(1, revisions + 1):
        down = "None" if number == 1 else repr(f"{number - 1:04d}")
        (root / "migrations" / "versions" / f"{number:04d}_t.py").write_text(
            f"from alembic import op\nrevision = '{number:04d}'\ndown_revision = {down}\n"
            "branch_labels = None\ndepends_on = None\n\n\n"
            f"def upgrade():\n    op.execute('CREATE TABLE t{number} (id int)')\n\n\n"
            f"def downgrade():\n    op.execute('DROP TABLE t{number}')\n"
        )
    return root


def cli_seconds(project: Path, args: list[str]) -> float:
    """One CLI call, process start included; it must succeed."""
    start = time.perf_counter()
    done = subprocess.run([FENCEMIGRATE, *args], cwd=project, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"fencemigrate {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return elapsed


async def mcp_seconds(call: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await call()
    return time.perf_counter() - start


async def measure(project: Path, rounds: int) -> dict[str, tuple[float, float]]:
    """Median seconds (MCP, CLI) of each call."""
    params = StdioServerParameters(command=FENCEMIGRATE, args=["mcp", "--holder", HOLDER, "--ttl", "10m"], cwd=project)
    with open(project / "mcp.stderr", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            granted = await session.call_tool("acquire_lease", {})
            assert not granted.is_error and granted.structured_content is not None, granted
            token = str(granted.structured_content["server_token"])
            applied = await session.call_tool("upgrade", {"revision": "head"})
            assert not applied.is_error, applied

            async def read_state() -> None:
                result = await session.call_tool("read_state", {})
                assert not result.is_error, result

            async def upgrade_at_head() -> None:
                result = await session.call_tool("upgrade", {"revision": "head"})
                assert not result.is_error and result.structured_content is not None, result
                assert result.structured_content["outcome"]["steps"] == [], result

            calls = {
                "read_state": (read_state, ["state", "--json"]),
                "upgrade at head": (
                    upgrade_at_head,
                    ["upgrade", "head", "--token", token, "--holder", HOLDER, "--json"],
                ),
            }
            medians = {}
            for name, (mcp_call, cli_args) in calls.items():
                await mcp_call()  # warm: the first call imports the revision files
                mcp, cli = [], []
                for _ in range(rounds):
                    mcp.append(await mcp_seconds(mcp_call))
                    cli.append(cli_seconds(project, cli_args))
                medians[name] = (statistics.median(mcp), statistics.median(cli))
            return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--revisions", type=int, default=50)
    parser.add_argument("--url", help="sqlalchemy.url of an empty database (default: a fresh SQLite file)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fm_mcp_bench_") as directory:
        project = make_project(Path(directory), options.revisions, options.url)
        medians = anyio.run(measure, project, options.rounds)
    print(host_line())
    print(f"{options.revisions} applied revisions, {options.rounds} rounds, {options.url or 'SQLite file'}")
    for name, (mcp, cli) in medians.items():
        print(f"{name:16} MCP {mcp * 1000:7.1f} ms   CLI {cli * 1000:7.1f} ms   CLI/MCP {cli / mcp:5.2f}")
    print(json.dumps({name: {"mcp_s": m, "cli_s": c, "ratio": c / m} for name, (m, c) in medians.items()}))


if __name__ == "__main__":
    main()
