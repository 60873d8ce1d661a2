"""What a command loads: only its own code. Every deploy pays for starting (bench/README.md,
"Startup"), so a real `fencemigrate upgrade head --token N` on PostgreSQL must not import the lint
rules, another database's code or the other commands' modules (each function of fencemigrate/api.py
imports its command's module when it is called)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from support.project import Project, run_command

#: Runs the CLI as the console script does, and writes the modules it imported to LOADED_FILE when
#: the process ends (the CLI ends with os._exit).
PROBE = """
import json, os, sys
loaded_file = sys.argv.pop(1)
real_exit = os._exit
def exit_and_record(status):
    loaded = sorted(sys.modules)
    with open(loaded_file, "w") as out:
        json.dump(loaded, out)
    real_exit(status)
os._exit = exit_and_record
sys.argv[0] = "fencemigrate"
from fencemigrate.cli import run
run()
"""


#: What a fenced upgrade on PostgreSQL must not run the code of.
NOT_LOADED = {
    "MySQL code": ("fencemigrate.dialects.mysql", "sqlalchemy.dialects.mysql"),
    "SQLAlchemy's SQLite dialect": ("sqlalchemy.dialects.sqlite",),
    "the check rules and engine": ("fencemigrate.lint.",),
    "the MCP server": ("mcp", "fencemigrate.agent_server.launch", "fencemigrate.agent_server.tool"),
    "the authoring": ("fencemigrate.runtime.authoring", "fencemigrate.runtime.listings"),
    "the readers": ("fencemigrate.fence.state", "fencemigrate.fence.timeline", "fencemigrate.runtime.reads"),
    "the other commands": ("fencemigrate.runtime.lease_commands", "fencemigrate.examples.incident"),
}


def test_a_fenced_upgrade_on_postgresql_loads_only_its_own_code(project: Project, tmp_path: Path) -> None:
    """A real upgrade of two revisions, probed as it exits. Control: the probe does see the modules
    the upgrade runs."""
    project.add_revision("s1", None, "CREATE TABLE s1 (id int)", "DROP TABLE s1")
    project.add_revision("s2", "s1", "CREATE TABLE s2 (id int)", "DROP TABLE s2")
    loaded_file = tmp_path / "loaded.json"
    argv = [sys.executable, "-c", PROBE, str(loaded_file), "upgrade", "head", "--token", "1"]
    run_command(argv, project.path).check(0)
    loaded: list[str] = json.loads(loaded_file.read_text())

    found = {what: [name for name in loaded if name.startswith(prefixes)] for what, prefixes in NOT_LOADED.items()}
    assert found == {what: [] for what in NOT_LOADED}
    ran = {"fencemigrate.runtime.commands", "fencemigrate.dialects.postgresql", "fencemigrate.runtime.fenced_run"}
    assert ran <= set(loaded)
