"""What a command loads when it starts: only its own code. Every deploy pays for starting
(bench/README.md), so `upgrade` on PostgreSQL must not import the lint rules or another
database's code."""

from __future__ import annotations

import subprocess
import sys

import pytest

#: Starting the upgrade command on PostgreSQL: the CLI, the fenced commands, the dialect.
UPGRADE_ON_POSTGRESQL = (
    "import sys, fencemigrate.cli, fencemigrate.fenced_commands\n"
    "from fencemigrate.dialects import dialect_for\n"
    "dialect_for('postgresql')\n"
)


def loaded_after_upgrade_starts(prefixes: tuple[str, ...]) -> list[str]:
    """The modules starting with ``prefixes`` that starting an upgrade on PostgreSQL imported."""
    code = UPGRADE_ON_POSTGRESQL + f"print('\\n'.join(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return result.stdout.split()


@pytest.mark.parametrize(
    ("what", "prefixes"),
    [
        (
            "MySQL's dialect, fencemigrate's and SQLAlchemy's",
            ("fencemigrate.dialects.mysql", "sqlalchemy.dialects.mysql"),
        ),
        ("the check rules and their engine", ("fencemigrate.check.rules", "fencemigrate.check.engine")),
        ("the MCP SDK", ("mcp",)),
    ],
)
def test_starting_an_upgrade_on_postgresql_does_not_load(what: str, prefixes: tuple[str, ...]) -> None:
    assert loaded_after_upgrade_starts(prefixes) == [], what


def test_the_probe_sees_what_starting_loads() -> None:
    """The control: the same probe finds the modules an upgrade does load."""
    loaded = loaded_after_upgrade_starts(("fencemigrate.fenced_commands", "fencemigrate.dialects.postgresql"))
    assert {"fencemigrate.fenced_commands", "fencemigrate.dialects.postgresql"} <= set(loaded)
