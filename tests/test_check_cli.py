"""``fencemigrate check`` on the command line: exact output in each format, exit statuses,
rule selection, and suppression by comment and by pyproject.toml.

Projects are a bare alembic.ini and a copy of a directory of ``tests/check_cases/``: with
``--no-db`` the check reads files only (no env.py, no database).
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.in_process import run_in_process
from support.project import Result

from fencemigrate.lint.rules import RULES

NOT_COMPARED = "--no-db: neither the database nor the models compared (FM408, what alembic check does)"
CASES_DIR = Path(__file__).resolve().parent / "check_cases"
RULES_DOC = Path(__file__).resolve().parent.parent / "docs" / "check-rules.md"
RULE_IDS = (
    "FM101, FM102, FM103, FM104, FM105, FM106, FM201, FM202, FM203, FM204, FM205, FM206, "
    "FM301, FM401, FM402, FM403, FM404, FM405, FM406, FM407, FM408, FM410, FM411, FM412, FM413, FM901, FM902"
)
SLUG_FIX = (
    "do not re-add a migration under a new number: run `fencemigrate state` and re-plan "
    "(or, if both are meant, `# fencemigrate: allow FM106 because <why>`)"
)
SUPPRESSION_FIX = (
    "write `# fencemigrate: allow RULE-ID because <reason>` with a rule id from `fencemigrate check --help`"
)
DOWNGRADE_FIX = (
    "write downgrade() to undo upgrade(), or `# fencemigrate: allow FM301 because <why it cannot be undone>`"
)
VACUUM_MESSAGE = (
    "`VACUUM invoice -- 100%, nightly` cannot run inside a transaction block, "
    "so this revision cannot be fenced atomically"
)
VACUUM_FIX = (
    "run it outside migrations (a maintenance job), or in an autocommit_block() with "
    "`# fencemigrate: allow FM201,FM205 because <why>`"
)

AUTOCOMMIT_MESSAGE = (
    "`op.get_context().autocommit_block()` commits separately: what runs in it is outside the migration's "
    "transaction and stays applied even if the run is then FENCED (fencemigrate claims the fence again before "
    "and after the block; the step is reported not atomic)"
)
AUTOCOMMIT_FIX = (
    "nothing, if what runs in it cannot run in a transaction (CREATE INDEX CONCURRENTLY); otherwise move it into "
    "the transaction. To silence: `# fencemigrate: allow FM201 because <why>`; to fail on it: "
    '`errors = ["FM201"]` in [tool.fencemigrate.check]'
)


def project_with(tmp_path: Path, case: str) -> Path:
    """A project whose migrations/versions is a copy of ``check_cases/<case>``."""
    path = tmp_path / "project"
    shutil.copytree(CASES_DIR / case, path / "migrations" / "versions")
    (path / "alembic.ini").write_text("[alembic]\nscript_location = migrations\n")
    return path


def check(project: Path, *args: str, config: str | None = None, db: bool = False) -> Result:
    """``fencemigrate [-c CONFIG] check --no-db ARGS`` (without ``db``) in ``project``, without an
    inherited ALEMBIC_CONFIG."""
    options = [] if config is None else ["-c", config]
    lint_only = [] if db else ["--no-db"]
    return run_in_process(project, *options, "check", *lint_only, *args, env={"ALEMBIC_CONFIG": None})


def check_json(project: Path, *args: str, code: int, db: bool = False) -> dict[str, Any]:
    """``check [--no-db] --json ARGS``: the exit status, and the one JSON object it printed."""
    result = check(project, "--json", *args, db=db).check(code)
    assert len(result.stdout.splitlines()) == 1, result
    payload = json.loads(result.stdout)
    assert isinstance(payload, dict)
    return payload


def write_revision(project: Path, name: str, body: str) -> None:
    (project / "migrations" / "versions" / name).write_text(textwrap.dedent(body).lstrip("\n"))


# -- exit statuses and formats -----------------------------------------------------------------


def test_a_clean_directory_passes(tmp_path: Path) -> None:
    result = check(project_with(tmp_path, "revision_cycle_near_miss")).check(0)
    assert (result.stdout, result.stderr) == (f"no problems found in 3 revision files; {NOT_COMPARED}\n", "")


def test_an_error_prints_the_table_and_exits_1(tmp_path: Path) -> None:
    result = check(project_with(tmp_path, "renumbered_slug")).check(1)
    location = "migrations/versions/0043_add_invoice_currency.py:9"
    assert result.stdout.splitlines() == [
        f"{'LOCATION'.ljust(len(location))}  RULE   SEVERITY  MESSAGE",
        f"{location}  FM106  error     0043 has the same slug as 0042, 'add_invoice_currency' "
        "(migrations/versions/0042_add_invoice_currency.py): a renumbered copy",
        f"{' ' * (len(location) + 19)}fix: {SLUG_FIX}",
        "",
        f"1 error, 0 warnings in 2 revision files; {NOT_COMPARED}",
    ]
    assert result.stderr == ""


def test_warnings_alone_exit_0(tmp_path: Path) -> None:
    result = check(project_with(tmp_path, "missing_downgrade")).check(0)
    assert result.stdout.splitlines()[-1] == f"0 errors, 2 warnings in 2 revision files; {NOT_COMPARED}"


def test_json_has_every_finding_and_every_suppression(tmp_path: Path) -> None:
    project = project_with(tmp_path, "autocommit_block")
    (project / "migrations" / "versions" / "0002_invoice_number_index.py").unlink()
    payload = check_json(project, code=0)
    path = "migrations/versions/0001_analyze.py"
    assert payload == {
        "status": "ok",
        "errors": 0,
        "warnings": 1,
        "revision_files": 1,
        "database_checked": False,
        "findings": [
            {
                "rule": "FM201",
                "name": "autocommit-block",
                "severity": "warning",
                "file": path,
                "line": 15,
                "revision": "0001",
                "message": AUTOCOMMIT_MESSAGE,
                "fix": AUTOCOMMIT_FIX,
            }
        ],
        "suppressed": [
            {
                "rule": "FM301",
                "name": "missing-downgrade",
                "severity": "warning",
                "file": path,
                "line": 19,
                "revision": "0001",
                "message": "downgrade() is empty: this revision cannot be rolled back",
                "fix": DOWNGRADE_FIX,
                "reason": "ANALYZE changes no schema",
                "suppressed_by": f"{path}:8",
            }
        ],
        "notes": [NOT_COMPARED],
    }


def test_no_db_says_the_models_were_not_compared(tmp_path: Path) -> None:
    """`alembic check` compares the models with the database; `fencemigrate check --no-db` does not,
    and says so."""
    project = project_with(tmp_path, "revision_cycle_near_miss")
    note = "--no-db: neither the database nor the models compared (FM408, what alembic check does)"
    assert check(project).check(0).stdout == f"no problems found in 3 revision files; {note}\n"
    assert check(project, "--format", "github").check(0).stdout.splitlines()[-1] == (
        f"no problems found in 3 revision files; {note}"
    )
    assert check_json(project, code=0)["notes"] == [note]


def test_json_of_a_clean_directory(tmp_path: Path) -> None:
    payload = check_json(project_with(tmp_path, "multiple_heads_near_miss"), code=0)
    assert payload == {
        "status": "ok",
        "errors": 0,
        "warnings": 0,
        "revision_files": 4,
        "database_checked": False,
        "findings": [],
        "suppressed": [],
        "notes": [NOT_COMPARED],
    }


def test_github_format_prints_workflow_annotations(tmp_path: Path) -> None:
    result = check(project_with(tmp_path, "bad_suppression"), "--format", "github").check(1)
    versions = "migrations/versions"
    assert result.stdout.splitlines() == [
        f"::error file={versions}/0001_no_reason.py,line=8,title=FM902 bad-suppression::"
        "`# fencemigrate: allow FM301` gives no reason (`because <reason>`), so it suppresses nothing"
        f"%0Afix: {SUPPRESSION_FIX}",
        f"::warning file={versions}/0001_no_reason.py,line=18,title=FM301 missing-downgrade::"
        f"downgrade() is empty: this revision cannot be rolled back%0Afix: {DOWNGRADE_FIX}",
        f"::error file={versions}/0002_unknown_rule.py,line=8,title=FM902 bad-suppression::"
        f"`# fencemigrate: allow FM999` names no rule: it suppresses nothing%0Afix: {SUPPRESSION_FIX}",
        f"::error file={versions}/0003_malformed.py,line=8,title=FM902 bad-suppression::"
        "`# fencemigrate: ignore FM301 please` is not `# fencemigrate: allow RULE-ID because <reason>`"
        f"%0Afix: {SUPPRESSION_FIX}",
        f"3 errors, 1 warning in 3 revision files; {NOT_COMPARED}",
    ]


def test_github_format_escapes_properties_and_message(tmp_path: Path) -> None:
    project = project_with(tmp_path, "revision_cycle_near_miss")
    write_revision(
        project,
        "0004_vacuum,nightly.py",
        '''
        """vacuum"""
        from alembic import op

        revision = "0004"
        down_revision = "0003"


        def upgrade():
            op.execute("VACUUM invoice -- 100%, nightly")


        def downgrade():
            pass
    ''',
    )
    result = check(project, "--format", "github", "--select", "FM205").check(1)
    escaped_message = VACUUM_MESSAGE.replace("%", "%25")
    assert result.stdout.splitlines() == [
        "::error file=migrations/versions/0004_vacuum%2Cnightly.py,line=9,title=FM205 no-transaction-statement::"
        f"{escaped_message}%0Afix: {VACUUM_FIX}",
        f"1 error, 0 warnings in 4 revision files; {NOT_COMPARED}",
    ]


def test_a_broken_file_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    result = check(project_with(tmp_path, "unparsable"), "--select", "unparsable-revision").check(1)
    assert result.stdout.splitlines()[1].split()[:3] == ["migrations/versions/0002_broken.py:8", "FM901", "error"]
    assert result.stdout.splitlines()[-1] == f"2 errors, 0 warnings in 3 revision files; {NOT_COMPARED}"
    assert result.stderr == ""


# -- rule selection ----------------------------------------------------------------------------


def test_select_keeps_only_the_rules_named(tmp_path: Path) -> None:
    payload = check_json(project_with(tmp_path, "bad_suppression"), "--select", "FM301", code=0)
    assert [(f["rule"], f["line"]) for f in payload["findings"]] == [("FM301", 18)]


def test_ignore_takes_ids_and_names(tmp_path: Path) -> None:
    result = check(project_with(tmp_path, "bad_suppression"), "--ignore", "FM902, missing-downgrade").check(0)
    assert result.stdout == f"no problems found in 3 revision files; {NOT_COMPARED}\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--select", "FM999"), f"unknown rule 'FM999' in --select; the rules are {RULE_IDS}"),
        (("--ignore", "FM902,no-such-rule"), f"unknown rule 'no-such-rule' in --ignore; the rules are {RULE_IDS}"),
        (("--select", " , "), "--select names no rule"),
        (
            ("--select", "FM202,checksum-drift,FM404"),
            "--select FM402,FM404 needs the database, which --no-db leaves out",
        ),
    ],
)
def test_bad_rule_lists_are_usage_errors(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    project = project_with(tmp_path, "bad_suppression")
    result = check(project, *args).check(2)
    assert (result.stdout, result.stderr) == ("", f"fencemigrate: usage: {message}\n")
    assert check_json(project, *args, code=2) == {"status": "usage", "message": message}


def test_json_and_github_format_exclude_each_other(tmp_path: Path) -> None:
    payload = check_json(project_with(tmp_path, "bad_suppression"), "--format", "github", code=2)
    assert payload == {"status": "usage", "message": "--json and --format github exclude each other"}


def test_an_unknown_format_is_a_usage_error(tmp_path: Path) -> None:
    result = check(project_with(tmp_path, "bad_suppression"), "--format", "xml").check(2)
    assert "Invalid value for '--format': 'xml' is not one of 'text', 'github'." in result.stderr


def test_a_missing_config_is_a_usage_error(tmp_path: Path) -> None:
    result = check(tmp_path).check(2)
    assert result.stderr == (
        "fencemigrate: usage: no Alembic configuration found: 'alembic.ini' does not exist "
        "(pass -c/--config, or set ALEMBIC_CONFIG)\n"
    )


# -- suppression -------------------------------------------------------------------------------


def test_an_allow_comment_may_name_several_rules(tmp_path: Path) -> None:
    project = project_with(tmp_path, "revision_cycle_near_miss")
    write_revision(
        project,
        "0004_index_concurrently.py",
        '''
        """index concurrently"""
        from alembic import op

        # fencemigrate: allow FM201,concurrently because invoice has 40 M rows; the fence is re-claimed after it
        revision = "0004"
        down_revision = "0003"


        def upgrade():
            with op.get_context().autocommit_block():
                op.execute("CREATE INDEX CONCURRENTLY ix_invoice_date ON invoice (date)")


        def downgrade():
            op.execute("DROP INDEX CONCURRENTLY ix_invoice_date")
    ''',
    )
    payload = check_json(project, code=0)
    assert payload["findings"] == []
    assert [(s["rule"], s["line"], s["suppressed_by"], s["reason"]) for s in payload["suppressed"]] == [
        (
            "FM201",
            10,
            "migrations/versions/0004_index_concurrently.py:4",
            "invoice has 40 M rows; the fence is re-claimed after it",
        ),
        (
            "FM202",
            15,
            "migrations/versions/0004_index_concurrently.py:4",
            "invoice has 40 M rows; the fence is re-claimed after it",
        ),
    ]
    result = check(project).check(0)
    assert result.stdout == f"no problems found in 4 revision files; 2 suppressed; {NOT_COMPARED}\n"


PYPROJECT = """\
[project]
name = "billing"

[[tool.fencemigrate.check.allow]]
rules = ["FM205"]
revisions = ["0001"]
reason = "the nightly VACUUM runs from migrations on this database"

[[tool.fencemigrate.check.allow]]
rules = ["multiple-heads"]
reason = "tenants keep independent branches"

[[tool.fencemigrate.check.allow]]
rules = ["FM301"]

[[tool.fencemigrate.check.allow]]
rules = ["FM777"]
reason = "typo"
"""


def test_pyproject_next_to_alembic_ini_allows_findings(tmp_path: Path) -> None:
    project = project_with(tmp_path, "multiple_heads")
    write_revision(
        project,
        "0000_vacuum.py",
        '''
        """vacuum"""
        from alembic import op

        revision = "0001"
        down_revision = None


        def upgrade():
            op.execute("VACUUM invoice")
    ''',
    )
    (project / "migrations" / "versions" / "0001_base.py").unlink()
    (project / "pyproject.toml").write_text(PYPROJECT)
    payload = check_json(project, code=1)
    assert [(f["rule"], f["file"], f["line"], f["message"]) for f in payload["findings"]] == [
        (
            "FM301",
            "migrations/versions/0000_vacuum.py",
            4,
            "there is no downgrade(): this revision cannot be rolled back",
        ),
        ("FM902", "pyproject.toml", 13, "the allow entry for FM301 gives no reason, so it suppresses nothing"),
        ("FM902", "pyproject.toml", 16, "the allow entry names no rule 'FM777': it suppresses nothing"),
    ]
    assert [(s["rule"], s["revision"], s["suppressed_by"]) for s in payload["suppressed"]] == [
        ("FM205", "0001", "pyproject.toml:4"),
        ("FM101", "0002a", "pyproject.toml:9"),
        ("FM101", "0002b", "pyproject.toml:9"),
    ]


def test_pyproject_is_read_next_to_the_config_file_not_in_the_current_directory(tmp_path: Path) -> None:
    project = project_with(tmp_path, "missing_downgrade")
    config = project / "deploy"
    config.mkdir()
    (config / "alembic.ini").write_text("[alembic]\nscript_location = %(here)s/../migrations\n")
    allow = '[[tool.fencemigrate.check.allow]]\nrules = ["FM301"]\nreason = "append-only tables"\n'
    (project / "pyproject.toml").write_text(allow)
    assert check(project, config="deploy/alembic.ini").check(0).stdout.splitlines()[-1] == (
        f"0 errors, 2 warnings in 2 revision files; {NOT_COMPARED}"
    )
    (config / "pyproject.toml").write_text(allow)
    assert check(project, config="deploy/alembic.ini").check(0).stdout == (
        f"no problems found in 2 revision files; 2 suppressed; {NOT_COMPARED}\n"
    )


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (
            '[tool.fencemigrate.check]\nallow = "FM301"\n',
            ": `allow` must be an array of tables ([[tool.fencemigrate.check.allow]])",
        ),
        (
            '[tool.fencemigrate.check]\nselect = ["FM301"]\n',
            ": the keys are `allow`, an array of tables, and `errors`, a list of rule ids",
        ),
        ('[tool.fencemigrate.check]\nerrors = "FM201"\n', ": `errors` must be a list of rule ids"),
        (
            '[[tool.fencemigrate.check.allow]]\nrule = ["FM301"]\nreason = "x"\n',
            ", allow entry at line 1: unknown key 'rule' (keys: rules, revisions, reason)",
        ),
        (
            '[[tool.fencemigrate.check.allow]]\nrules = "FM301"\nreason = "x"\n',
            ", allow entry at line 1: `rules` must be a non-empty list of rule ids",
        ),
    ],
)
def test_a_malformed_pyproject_section_is_a_usage_error(tmp_path: Path, section: str, message: str) -> None:
    project = project_with(tmp_path, "missing_downgrade")
    (project / "pyproject.toml").write_text(section)
    result = check(project).check(2)
    assert result.stderr == f"fencemigrate: usage: [tool.fencemigrate.check] in pyproject.toml{message}\n"


def test_invalid_toml_is_a_usage_error(tmp_path: Path) -> None:
    project = project_with(tmp_path, "missing_downgrade")
    (project / "pyproject.toml").write_text("[tool.fencemigrate.check\n")
    result = check(project).check(2)
    assert result.stderr.startswith("fencemigrate: usage: cannot read pyproject.toml: ")


# -- autocommit_block(): a warning, an error where the project says so ----------------------------


def test_concurrently_in_an_autocommit_block_is_a_warning(tmp_path: Path) -> None:
    """PostgreSQL's documented pattern (CREATE INDEX CONCURRENTLY, postgresql_concurrently=True in an
    autocommit_block(), in upgrade and downgrade) passes: one warning per block, no FM202."""
    result = check(project_with(tmp_path, "autocommit_block")).check(0)
    location = "migrations/versions/0002_invoice_number_index.py"
    rows = [line.split()[:3] for line in result.stdout.splitlines() if line.startswith(location)]
    assert rows == [[f"{location}:14", "FM201", "warning"], [f"{location}:20", "FM201", "warning"]]
    assert result.stdout.splitlines()[-1] == f"0 errors, 3 warnings in 2 revision files; 1 suppressed; {NOT_COMPARED}"
    # Outside a block, CONCURRENTLY is still an error: PostgreSQL refuses it in the transaction.
    assert check(project_with(tmp_path / "outside", "concurrently")).check(1).stdout.splitlines()[-1] == (
        f"5 errors, 0 warnings in 1 revision file; {NOT_COMPARED}"
    )


@pytest.mark.parametrize("key", ["FM201", "autocommit-block"])
def test_the_project_can_make_autocommit_block_an_error(tmp_path: Path, key: str) -> None:
    project = project_with(tmp_path, "autocommit_block")
    (project / "pyproject.toml").write_text(f'[tool.fencemigrate.check]\nerrors = ["{key}"]\n')
    payload = check_json(project, code=1)
    assert [(f["rule"], f["severity"], f["line"]) for f in payload["findings"]] == [
        ("FM201", "error", 15),
        ("FM201", "error", 14),
        ("FM201", "error", 20),
    ]
    assert (payload["status"], payload["errors"], payload["warnings"]) == ("failed", 3, 0)
    # An allow entry with a reason still silences it.
    (project / "pyproject.toml").write_text(
        '[tool.fencemigrate.check]\nerrors = ["FM201"]\n\n'
        '[[tool.fencemigrate.check.allow]]\nrules = ["FM201"]\nrevisions = ["0002"]\nreason = "40 M rows"\n'
    )
    assert check_json(project, code=1)["errors"] == 1


def test_an_unknown_rule_in_errors_is_a_usage_error(tmp_path: Path) -> None:
    project = project_with(tmp_path, "autocommit_block")
    (project / "pyproject.toml").write_text('[tool.fencemigrate.check]\nerrors = ["autocommit-blocks"]\n')
    result = check(project).check(2)
    assert result.stderr == (
        "fencemigrate: usage: unknown rule 'autocommit-blocks' in `errors` of [tool.fencemigrate.check] in "
        f"pyproject.toml; the rules are {RULE_IDS}\n"
    )


# -- documentation -----------------------------------------------------------------------------


def test_help_and_the_rules_doc_list_every_rule(tmp_path: Path) -> None:
    help_text = check(tmp_path, "--help").check(0).stdout
    rules_doc = RULES_DOC.read_text()
    for rule in RULES:
        database = ", --db" if rule.needs_database else ""
        assert f"{rule.id} {rule.name} ({rule.severity.value}{database}): " in help_text
        assert f"| {rule.id} | `{rule.name}` | {rule.severity.value} |" in rules_doc
