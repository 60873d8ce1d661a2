"""The incident from the design notes as its pieces: the agents' revisions, their checkouts and the
FENCED answers they get. ``test_incident`` replays it on PostgreSQL, ``test_sqlite_fencing`` on SQLite,
``test_mysql_precheck`` on MariaDB (pre-check mode); ``test_tokenless_writes`` runs ``fm``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from support.fence_rows import FENCED_STALE_LINES, stderr_lines, without_progress
from support.project import Project, Result

SLUG = "add_invoice_currency"

# Both agents' 0042 create the table the migration is named after, with different columns.
A_CREATE = "CREATE TABLE invoice_currency (invoice_id int PRIMARY KEY, currency char(3) NOT NULL)"
A_COLUMNS = ["invoice_id", "currency"]
B_UPGRADE = [
    "CREATE TABLE invoice_currency (invoice_id int PRIMARY KEY, currency_code text NOT NULL DEFAULT 'EUR')",
    "INSERT INTO invoice_currency VALUES (1, 'USD')",
]
B_COLUMNS = ["invoice_id", "currency_code"]
DOWNGRADE = ["DROP TABLE invoice_currency"]
# A's renumbered 0043, "fixed" so that it applies on top of B's 0042 (the agent routing
# around "relation already exists"): it replaces B's table with A's.
A_RENUMBERED_UPGRADE = ["DROP TABLE IF EXISTS invoice_currency", A_CREATE]

STALE_REASON = "token 34 has since written to db/migrations"

# -- the two agents' checkouts ----------------------------------------------------------------


def write_a_0042(checkout: Project) -> Path:
    """A's 0042: ``invoice_currency(invoice_id, currency)``."""
    return checkout.add_revision("0042", None, [A_CREATE], DOWNGRADE, slug=SLUG)


def write_b_0042(checkout: Project) -> Path:
    """B's rewrite of 0042: ``invoice_currency(invoice_id, currency_code)`` and a row in it."""
    return checkout.add_revision("0042", None, B_UPGRADE, DOWNGRADE, slug=SLUG)


def write_a_0043(checkout: Project) -> Path:
    """A's renumbered copy: B's 0042 pulled in, A's table as 0043 on top of it."""
    write_b_0042(checkout)
    return checkout.add_revision("0043", "0042", A_RENUMBERED_UPGRADE, DOWNGRADE, slug=SLUG)


def replay_with_plain_alembic(a: Project, b: Project) -> None:
    """The control's first half: A applies its 0042, B rolls it back and applies its own, all plain alembic."""
    write_a_0042(a)
    a.run_alembic("upgrade", "head").check(0)
    write_a_0042(b)
    b.run_alembic("downgrade", "base").check(0)
    write_b_0042(b)
    b.run_alembic("upgrade", "head").check(0)


def clone_checkout(pristine: Project, name: str, url: str) -> Project:
    """A copy of a freshly initialised project (no revisions yet), pointed at ``url``.

    Cheaper than another ``alembic init`` for the control's checkouts.
    """
    assert not any(pristine.versions.glob("*.py")), "clone only a project without revisions"
    target = pristine.path.parent / name
    shutil.copytree(pristine.path, target)
    clone = Project(path=target, url=url, template=pristine.template)
    clone.set_url(url)
    return clone


def fm(checkout: Project, *args: str, token: int, holder: str, as_json: bool = False) -> Result:
    """Run ``fencemigrate ARGS --token T --holder H [--json]`` in ``checkout``."""
    extra = ["--json"] if as_json else []
    return checkout.run_cli(*args, "--token", str(token), "--holder", holder, *extra)


def assert_fenced_text(result: Result, token: int, fence: int) -> None:
    """Exit 3, nothing on stdout, the agent message's key lines on stderr (after the progress of the
    revisions that ran before the rejection), no traceback."""
    result.check(3)
    assert result.stdout == ""
    lines = without_progress(stderr_lines(result.stderr))
    for expected in FENCED_STALE_LINES:
        assert expected.format(token=token, fence=fence) in lines, result
    assert lines[0] == "FENCED: you no longer own db/migrations."
    assert "Traceback" not in result.stderr


def assert_fenced_json(result: Result, token: int, fence: int, reason: str) -> dict[str, Any]:
    """Exit 3 and exactly one JSON object on stdout describing the rejection."""
    result.check(3)
    assert len(result.stdout.strip().splitlines()) == 1, result
    payload: dict[str, Any] = json.loads(result.stdout)
    assert payload["status"] == "fenced"
    assert payload["resource"] == "db/migrations"
    assert payload["token"] == token
    assert payload["fence_token"] == fence
    assert payload["reason"] == reason
    assert payload["message"].splitlines()[0].startswith("FENCED: ")
    assert "Do not retry, rebase, renumber, or re-apply." in payload["message"]
    assert "Traceback" not in result.stderr
    return payload
