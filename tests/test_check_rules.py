"""Every rule of ``fencemigrate check`` on data: ``tests/check_cases/<case>/`` holds the revision
files of one case. Each rule has a case that must fire (exactly the findings listed, nothing
else) and a near miss, ``<case>_near_miss``, that must not fire at all.

The cases run through the API on a copy of the directory as ``migrations/versions`` of a
project with a bare alembic.ini: ``check`` with ``db=False`` (``--no-db``) reads files only, never env.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fencemigrate import api, load_config
from fencemigrate.lint.findings import CheckReport
from fencemigrate.lint.rules import RULES

CASES_DIR = Path(__file__).resolve().parent / "check_cases"
AUTOCOMMIT = (
    "`op.get_context().autocommit_block()` commits separately: what runs in it is outside the migration's "
    "transaction and stays applied even if the run is then FENCED (fencemigrate claims the fence again before "
    "and after the block; the step is reported not atomic)"
)
CONCURRENTLY = "cannot run inside the migration's transaction block: PostgreSQL refuses it there"

# case -> (rule id, file:line under migrations/versions/, message) of every finding, in report order.
FIRES: dict[str, list[tuple[str, str, str]]] = {
    "autocommit_block": [
        ("FM201", "0001_analyze.py:15", AUTOCOMMIT),
        # PostgreSQL's documented pattern, CONCURRENTLY in an autocommit_block(): the block, not FM202
        ("FM201", "0002_invoice_number_index.py:14", AUTOCOMMIT),
        ("FM201", "0002_invoice_number_index.py:20", AUTOCOMMIT),
    ],
    "bad_suppression": [
        (
            "FM902",
            "0001_no_reason.py:8",
            "`# fencemigrate: allow FM301` gives no reason (`because <reason>`), so it suppresses nothing",
        ),
        ("FM301", "0001_no_reason.py:18", "downgrade() is empty: this revision cannot be rolled back"),
        ("FM902", "0002_unknown_rule.py:8", "`# fencemigrate: allow FM999` names no rule: it suppresses nothing"),
        (
            "FM902",
            "0003_malformed.py:8",
            "`# fencemigrate: ignore FM301 please` is not `# fencemigrate: allow RULE-ID because <reason>`",
        ),
    ],
    "concurrently": [
        (
            "FM202",
            "0001_indexes.py:14",
            "`CREATE UNIQUE INDEX CONCURRENTLY ix_invoice_number ON inv...` " + CONCURRENTLY,
        ),
        (
            "FM202",
            "0001_indexes.py:15",
            "`op.create_index('ix_invoice_date', 'invoice', ['date'], p...` works CONCURRENTLY, which " + CONCURRENTLY,
        ),
        (
            "FM202",
            "0001_indexes.py:16",
            "`REINDEX INDEX CONCURRENTLY ix_invoice_customer` " + CONCURRENTLY,
        ),
        (
            "FM202",
            "0001_indexes.py:17",
            "`ALTER TABLE invoice DETACH PARTITION invoice_2019 CONCURR...` " + CONCURRENTLY,
        ),
        (
            "FM202",
            "0001_indexes.py:21",
            "`DROP INDEX CONCURRENTLY ix_invoice_number` " + CONCURRENTLY,
        ),
    ],
    "duplicate_revision_id": [
        ("FM103", "0002_add_orders.py:9", "revision id 0002 is also used by migrations/versions/0002_add_invoices.py"),
    ],
    "enum_add_value": [
        (
            "FM206",
            "0001_mood.py:14",
            "`ALTER TYPE mood ADD VALUE IF NOT EXISTS 'meh' AFTER 'ok'` adds an enum value that cannot be used before the transaction commits (by this revision, or a later one in the same transaction)",
        ),
    ],
    "explicit_commit": [
        (
            "FM203",
            "0001_backfill.py:15",
            "`op.get_bind().commit()` ends the migration's transaction: what follows is not covered by the fence claim",
        ),
        (
            "FM203",
            "0001_backfill.py:18",
            "`raw.rollback()` ends the migration's transaction: what follows is not covered by the fence claim",
        ),
    ],
    "missing_down_revision": [
        ("FM102", "0002_orphan.py:10", "down_revision names 0001, which no revision file has"),
    ],
    "missing_downgrade": [
        ("FM301", "0001_base.py:17", "downgrade() is empty: this revision cannot be rolled back"),
        ("FM301", "0002_no_downgrade.py:8", "there is no downgrade(): this revision cannot be rolled back"),
    ],
    "multiple_heads": [
        ("FM101", "0002_add_invoices.py:9", "0002a is one of 2 heads (0002a, 0002b): the branches are not merged"),
        ("FM101", "0002_add_orders.py:9", "0002b is one of 2 heads (0002a, 0002b): the branches are not merged"),
    ],
    "no_transaction_statement": [
        (
            "FM205",
            "0001_maintenance.py:14",
            "`VACUUM (ANALYZE) invoice` cannot run inside a transaction block, so this revision cannot be fenced atomically",
        ),
        (
            "FM205",
            "0001_maintenance.py:15",
            "`ALTER SYSTEM SET work_mem = '64MB'` cannot run inside a transaction block, so this revision cannot be fenced atomically",
        ),
        (
            "FM205",
            "0001_maintenance.py:16",
            "`CREATE DATABASE reporting` cannot run inside a transaction block, so this revision cannot be fenced atomically",
        ),
        (
            "FM205",
            "0001_maintenance.py:20",
            "`DROP DATABASE reporting` cannot run inside a transaction block, so this revision cannot be fenced atomically",
        ),
    ],
    "renumbered_copy": [
        (
            "FM105",
            "0043_invoice_currency_again.py:13",
            "upgrade() is the same as in 0042 (migrations/versions/0042_add_invoice_currency.py): a renumbered copy",
        ),
        (
            "FM105",
            "0044_currency_not_null.py:13",
            "upgrade() is nearly the same as in 0042 (migrations/versions/0042_add_invoice_currency.py): a renumbered copy",
        ),
    ],
    "renumbered_slug": [
        (
            "FM106",
            "0043_add_invoice_currency.py:9",
            "0043 has the same slug as 0042, 'add_invoice_currency' (migrations/versions/0042_add_invoice_currency.py): a renumbered copy",
        ),
    ],
    "revision_cycle": [
        ("FM104", "0001_base.py:10", "down_revision forms a cycle: 0001 -> 0003 -> 0002 -> 0001"),
    ],
    "transaction_control_sql": [
        (
            "FM204",
            "0001_backfill.py:14",
            "`COMMIT` ends or starts a transaction from SQL: what follows is not covered by the fence claim",
        ),
        (
            "FM204",
            "0001_backfill.py:15",
            "`BEGIN` ends or starts a transaction from SQL: what follows is not covered by the fence claim",
        ),
        (
            "FM204",
            "0001_backfill.py:16",
            "`END` ends or starts a transaction from SQL: what follows is not covered by the fence claim",
        ),
    ],
    "unparsable": [
        ("FM901", "0002_broken.py:8", "this revision file does not parse: invalid syntax"),
        ("FM901", "helpers.py:1", 'this revision file has no `revision = "..."` string at module level'),
    ],
}

# case -> what it must not mistake for the rule its name says.
NEAR_MISSES = {
    "unparsable_near_miss": "annotated `revision: str = ...` assignments; a non-Python __init__.py (Alembic skips it)",
    "bad_suppression_near_miss": "an allow comment by rule name with a reason; the same text inside a SQL string",
    "multiple_heads_near_miss": "two branches joined by a merge revision",
    "missing_down_revision_near_miss": "down_revision as a one-element tuple of an existing revision",
    "duplicate_revision_id_near_miss": "a copied docstring still saying `Revision ID: 0002`",
    "revision_cycle_near_miss": "the same three revisions as a chain",
    "renumbered_copy_near_miss": "the same upgrade() shape on another table; a column whose name extends another's",
    "renumbered_slug_near_miss": "a slug that extends another; two merge revisions both named `merge`",
    "autocommit_block_near_miss": "autocommit_block() named in a comment and in a SQL string",
    "concurrently_near_miss": "REFRESH MATERIALIZED VIEW CONCURRENTLY, a column named concurrently, a SQL comment, "
    "postgresql_concurrently=False",
    "explicit_commit_near_miss": "commit() of a savepoint and of an ORM session",
    "transaction_control_sql_near_miss": "BEGIN/END of a plpgsql body and of BEGIN ATOMIC; 'COMMIT' as a string value",
    "no_transaction_statement_near_miss": "ANALYZE, a table named vacuum_log, CLUSTER of one table",
    "enum_add_value_near_miss": "CREATE TYPE ... AS ENUM and ALTER TYPE ... RENAME VALUE",
    "missing_downgrade_near_miss": "a downgrade() that raises; an empty upgrade() with an empty downgrade()",
}

# The comment (or pyproject entry) that each case's suppressions come from, and their reason.
SUPPRESSED = {
    "autocommit_block": [("FM301", "0001_analyze.py:8", "ANALYZE changes no schema")],
    "autocommit_block_near_miss": [("FM301", "0001_analyze.py:8", "ANALYZE changes no schema")],
    "bad_suppression_near_miss": [("FM301", "0001_with_reason.py:8", "the table holds an append-only audit log")],
}


def check_case(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CheckReport:
    """``check`` (all rules, no database) over a copy of ``check_cases/<case>``."""
    shutil.copytree(CASES_DIR / case, tmp_path / "migrations" / "versions")
    (tmp_path / "alembic.ini").write_text("[alembic]\nscript_location = migrations\n")
    monkeypatch.chdir(tmp_path)
    return api.check(load_config(["alembic.ini"]), db=False)


def findings_of(report: CheckReport) -> list[tuple[str, str, str]]:
    return [
        (finding.rule, finding.location.removeprefix("migrations/versions/"), finding.message)
        for finding in report.findings
    ]


def suppressed_of(report: CheckReport) -> list[tuple[str, str, str]]:
    return [
        (item.finding.rule, item.by.removeprefix("migrations/versions/"), item.reason) for item in report.suppressed
    ]


@pytest.mark.parametrize("case", sorted(FIRES))
def test_case_fires(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = check_case(case, tmp_path, monkeypatch)
    assert findings_of(report) == FIRES[case]
    assert suppressed_of(report) == SUPPRESSED.get(case, [])
    assert report.exit_status == (1 if report.errors else 0)


@pytest.mark.parametrize("case", sorted(NEAR_MISSES))
def test_near_miss_does_not_fire(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = check_case(case, tmp_path, monkeypatch)
    assert findings_of(report) == []
    assert suppressed_of(report) == SUPPRESSED.get(case, [])
    assert report.exit_status == 0


def test_every_file_rule_has_a_case_and_a_near_miss() -> None:
    fired = {rule for findings in FIRES.values() for rule, _, _ in findings}
    file_rules = {rule.id for rule in RULES if not rule.needs_database}
    assert fired == file_rules
    assert {f"{case}_near_miss" for case in FIRES} == set(NEAR_MISSES)
    assert {path.name for path in CASES_DIR.iterdir()} == set(FIRES) | set(NEAR_MISSES)


def test_warnings_alone_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = check_case("missing_downgrade", tmp_path, monkeypatch)
    assert (report.errors, report.warnings, report.exit_status) == (0, 2, 0)
    assert {finding.severity.value for finding in report.findings} == {"warning"}


def test_each_rule_alone_fires_its_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for case, findings in FIRES.items():
        rule = findings[0][0]
        project = tmp_path / case
        report = check_case(case, project, monkeypatch)
        selected = api.check(load_config(["alembic.ini"]), db=False, select=[rule])
        assert findings_of(selected) == [item for item in findings_of(report) if item[0] == rule], case


def test_a_revision_file_is_never_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that would fail (or do anything) on import is only read."""
    report = check_case("unparsable_near_miss", tmp_path, monkeypatch)
    exploding = tmp_path / "migrations" / "versions" / "0003_explodes.py"
    exploding.write_text(
        '"""explodes"""\nfrom alembic import op\n\nraise SystemExit("imported!")\n\n'
        'revision = "0003"\ndown_revision = "0002"\n\n\ndef upgrade():\n    op.execute("CREATE TABLE v (id int)")\n\n\n'
        'def downgrade():\n    op.execute("DROP TABLE v")\n'
    )
    again = api.check(load_config(["alembic.ini"]), db=False)
    assert report.revision_files == 2
    assert (again.revision_files, findings_of(again)) == (3, [])


def test_autocommit_block_is_a_warning_unless_the_project_makes_it_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CONCURRENTLY in an autocommit_block() (PostgreSQL's documented pattern) is FM201's warning and
    passes; ``errors = ["autocommit-block"]`` in ``[tool.fencemigrate.check]`` fails it again."""
    report = check_case("autocommit_block", tmp_path, monkeypatch)
    assert (report.errors, report.warnings, report.exit_status) == (0, 3, 0)
    (tmp_path / "pyproject.toml").write_text('[tool.fencemigrate.check]\nerrors = ["autocommit-block"]\n')
    again = api.check(load_config(["alembic.ini"]), db=False)
    assert [(finding.rule, finding.severity.value) for finding in again.findings] == [("FM201", "error")] * 3
    assert (again.errors, again.exit_status) == (3, 1)
