"""Passwords are never printed: not by a config error, a driver error, env.py, or the Redis backend.

The password below has each character that breaks a naive scrubber: ``%`` (alembic.ini's
interpolation), ``@`` (ends the userinfo of a URL), a space (ends a URL in a message) and ``:``.
No piece of it may appear in stdout or stderr, in text or JSON, whatever the outcome.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.fence_rows import stderr_lines
from support.project import Project, Result, create_project

PASSWORD = "Xylo%9@quartz fjord:wombat"
PIECES = ("Xylo", "quartz", "fjord", "wombat")
ENCODED = "Xylo%259%40quartz%20fjord%3Awombat"  # the same password, percent-encoded as a URL wants it

TEXT_AND_JSON = [pytest.param((), id="text"), pytest.param(("--json",), id="json")]

COMMANDS = [
    pytest.param(("upgrade", "head", "--token=10"), id="upgrade-token"),
    pytest.param(("upgrade", "head"), id="upgrade-own-lease"),
    pytest.param(("downgrade", "base", "--token=10"), id="downgrade"),
    pytest.param(("state",), id="state"),
    pytest.param(("timeline",), id="timeline"),
    pytest.param(("check", "--db"), id="check-db"),
    pytest.param(("lease", "status"), id="lease-status"),
    pytest.param(("lease", "acquire", "--holder", "a"), id="lease-acquire"),
]


def assert_no_password(result: Result) -> None:
    for piece in PIECES:
        assert piece not in result.output, result
    assert "Traceback" not in result.output, result


def message(result: Result, json_flag: tuple[str, ...]) -> str:
    """The one line (or the JSON object's message) the command failed with."""
    if json_flag:
        assert stderr_lines(result.stderr) == [], result
        payload = json.loads(result.stdout)
        return str(payload["message"])
    assert result.stdout == "", result
    lines = stderr_lines(result.stderr)
    assert len(lines) == 1, result
    return lines[0]


def raw_url(project: Project, value: str) -> None:
    """Write ``sqlalchemy.url = value`` into alembic.ini exactly as given (no ``%%`` escaping)."""
    text = re.sub(r"(?m)^sqlalchemy\.url = .*$", lambda _: f"sqlalchemy.url = {value}", project.ini.read_text())
    project.ini.write_text(text)


#: Every command in text and in JSON, and ``install --sql`` (which has no ``--json``) in text.
URL_CASES = [
    *(
        pytest.param(command.values[0], flag.values[0], id=f"{command.id}-{flag.id}")
        for command in COMMANDS
        for flag in TEXT_AND_JSON
    ),
    pytest.param(("install", "--sql"), (), id="install-sql-text"),
]


@pytest.fixture(scope="module")
def unescaped_percent(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """alembic.ini whose URL has the password as typed, ``%`` unescaped: configparser refuses it."""
    project = create_project(tmp_path_factory.mktemp("percent"), "sqlite://")
    raw_url(project, f"postgresql+psycopg://bob:{PASSWORD}@127.0.0.1:1/x")
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1")
    return project


@pytest.mark.parametrize(("args", "json_flag"), URL_CASES)
def test_a_percent_in_alembic_ini_is_a_usage_error_without_the_url(
    unescaped_percent: Project, args: tuple[str, ...], json_flag: tuple[str, ...]
) -> None:
    """configparser's InterpolationSyntaxError quotes the rest of the value; fencemigrate names
    the option instead: exit 2, one line."""
    result = unescaped_percent.run_cli(*args, *json_flag)
    assert result.code == 2, result
    assert_no_password(result)
    assert message(result, json_flag).endswith(
        "option sqlalchemy.url in section [alembic] of the config file: a literal '%' there must be written '%%' "
        "(configparser interpolation); the value is not shown, it may hold a password"
    ), result


@pytest.fixture(scope="module")
def unescaped_at(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A URL whose password has an ``@`` and a space not percent-encoded (``%`` escaped for the ini)."""
    project = create_project(tmp_path_factory.mktemp("at"), f"postgresql+psycopg://bob:{PASSWORD}@127.0.0.1:1/x")
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1")
    return project


@pytest.mark.parametrize(("args", "json_flag"), URL_CASES)
def test_an_unencoded_at_in_the_password_is_refused_without_the_url(
    unescaped_at: Project, args: tuple[str, ...], json_flag: tuple[str, ...]
) -> None:
    """SQLAlchemy would end the password at its first ``@`` and take the rest for the host (and
    print it in the connection error); fencemigrate refuses the URL first: exit 2, one line."""
    result = unescaped_at.run_cli(*args, *json_flag)
    assert result.code == 2, result
    assert_no_password(result)
    assert message(result, json_flag).endswith(
        "sqlalchemy.url: its password has an '@' that is not percent-encoded, so SQLAlchemy would take "
        "part of it for the host; write '@' as %40 (and ':' as %3A, a space as %20, '%' as %25)"
    ), result


@pytest.fixture(scope="module")
def encoded(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """The password percent-encoded, as it should be, on a server that is not there."""
    project = create_project(tmp_path_factory.mktemp("encoded"), f"postgresql+psycopg://bob:{ENCODED}@127.0.0.1:1/x")
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1")
    return project


@pytest.mark.parametrize("json_flag", TEXT_AND_JSON)
@pytest.mark.parametrize("args", COMMANDS)
def test_an_unreachable_database_error_has_no_password(
    encoded: Project, args: tuple[str, ...], json_flag: tuple[str, ...]
) -> None:
    result = encoded.run_cli(*args, *json_flag)
    assert result.code == 1, result
    assert_no_password(result)
    assert "database error: connection failed" in message(result, json_flag), result


@pytest.mark.parametrize("json_flag", TEXT_AND_JSON)
@pytest.mark.parametrize(
    "raise_code",
    [
        pytest.param("raise RuntimeError('cannot use ' + config.get_main_option('sqlalchemy.url'))", id="exception"),
        pytest.param("import sys; sys.exit('cannot use ' + config.get_main_option('sqlalchemy.url'))", id="sys-exit"),
    ],
)
def test_env_py_failures_quoting_the_url_have_no_password(
    tmp_path: Path, raise_code: str, json_flag: tuple[str, ...]
) -> None:
    """env.py's own error message quoting its URL, with a password that has spaces, ``:`` and ``%``
    (and an ``@`` spelled %40): the password is replaced by ***."""
    password = "Xylo%9%40quartz fjord:wombat"
    project = create_project(tmp_path / "env", f"postgresql+psycopg://bob:{password}@127.0.0.1:1/x")
    project.edit_env("config = context.config\n", f"config = context.config\n{raise_code}\n", count=1)
    result = project.run_cli("state", *json_flag)
    assert result.code == 1, result
    assert_no_password(result)
    text = result.output if "sys.exit" in raise_code else message(result, json_flag)
    assert "cannot use postgresql+psycopg://bob:***@127.0.0.1:1/x" in text, result


REDIS_COMMANDS = [
    pytest.param(("lease", "status"), id="lease-status"),
    pytest.param(("lease", "acquire", "--holder", "a"), id="lease-acquire"),
    pytest.param(("lease", "release", "--holder", "a"), id="lease-release"),
    pytest.param(("upgrade", "head"), id="upgrade-own-lease"),
]


@pytest.mark.parametrize("json_flag", TEXT_AND_JSON)
@pytest.mark.parametrize("args", REDIS_COMMANDS)
@pytest.mark.parametrize("where", ["option", "config"])
def test_a_redis_url_with_at_and_space_in_its_password_is_not_printed(
    project: Project, args: tuple[str, ...], json_flag: tuple[str, ...], where: str
) -> None:
    """A Redis lease URL (``--lease-url`` or ``fencemigrate_lease_url``) whose password has an
    ``@``, a space and ``:``, on a port nobody listens on: exit 1, the URL shown as ``:***@``."""
    url = f"redis://:{PASSWORD}@127.0.0.1:1/0"
    project.add_revision("0001", None, "CREATE TABLE t1 (id int)", "DROP TABLE t1")
    if where == "config":
        project.set_ini_option("fencemigrate_lease_url", url)
        result = project.run_cli(*args, *json_flag)
    else:
        result = project.run_cli(*args, "--lease-url", url, *json_flag)
    assert result.code == 1, result
    assert_no_password(result)
    assert "lease service redis://:***@127.0.0.1:1/0 failed" in message(result, json_flag), result


def test_a_short_placeholder_password_does_not_garble_messages(tmp_path: Path) -> None:
    """Alembic's placeholder URL (``driver://user:pass@...``) left in the config: the word "pass"
    in a message is not replaced (a short password without ``@`` or spaces is left to the URL
    pattern), and the placeholder's own password is still hidden."""
    project = create_project(tmp_path / "placeholder", "sqlite://")
    project.set_ini_option("other_url", "driver://user:pass@localhost/dbname")
    result = project.run_cli("upgrade", "head", "--token=")
    assert result.code == 2, result
    assert "empty fencing token: pass --token N" in result.stderr, result


@pytest.mark.parametrize(
    "text",
    [
        "a" * 1_000_000,
        "a://" * 250_000,
        "postgresql://user:" * 50_000,
        "x://u:p" + "@" * 500_000,
    ],
    ids=["word", "schemes", "userinfos", "ats"],
)
def test_scrubbing_an_agents_megabyte_argument_ends(text: str) -> None:
    """Messages echo what an agent sent (a path, a revision): the scrubber must not backtrack on a long
    one (it took 2 s at 20 KB, hours at 1 MB). Bounded: a child process killed after 60 s fails."""
    import subprocess
    import sys

    code = "import sys; from fencemigrate.scrub import scrub_secrets; print(len(scrub_secrets(sys.stdin.read())))"
    done = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) <= len(text)


def test_the_scrubber_still_finds_every_url_password() -> None:
    from fencemigrate.scrub import scrub_secrets

    assert scrub_secrets("postgresql+psycopg://postgres:s3c@r@et@127.0.0.1:5432/x and mysql://a:b@c") == (
        "postgresql+psycopg://postgres:***@127.0.0.1:5432/x and mysql://a:***@c"
    )
    assert scrub_secrets("(x://u:p@h) y://v:q@z, redis://:pw@127.0.0.1/0") == (
        "(x://u:***@h) y://v:***@z, redis://:***@127.0.0.1/0"
    )


@pytest.mark.parametrize(
    ("statement", "shown"),
    [
        ("CREATE ROLE app LOGIN PASSWORD 'hunter2'", "CREATE ROLE app LOGIN PASSWORD '***'"),
        (
            "ALTER ROLE app WITH ENCRYPTED PASSWORD 'a''b' VALID UNTIL 'x'",
            "ALTER ROLE app WITH ENCRYPTED PASSWORD '***' VALID UNTIL 'x'",
        ),
        ("ALTER ROLE app PASSWORD E'a\\'b' LOGIN", "ALTER ROLE app PASSWORD '***' LOGIN"),
        ("ALTER ROLE app PASSWORD $pw$hunter2$pw$", "ALTER ROLE app PASSWORD '***'"),
        ("CREATE USER app IDENTIFIED BY 'hunter2'", "CREATE USER app IDENTIFIED BY '***'"),
        (
            "CREATE USER 'app'@'%' IDENTIFIED WITH mysql_native_password BY 'hunter2'",
            "CREATE USER 'app'@'%' IDENTIFIED WITH mysql_native_password BY '***'",
        ),
        ("GRANT ALL ON db.* TO app IDENTIFIED BY 'hunter2'", "GRANT ALL ON db.* TO app IDENTIFIED BY '***'"),
        ("Can't locate revision identified by '9999'", "Can't locate revision identified by '9999'"),
        (
            "CREATE USER a IDENTIFIED BY 'x1', b IDENTIFIED BY 'y2'",
            "CREATE USER a IDENTIFIED BY '***', b IDENTIFIED BY '***'",
        ),
        ("SET PASSWORD FOR app = 'hunter2'", "SET PASSWORD FOR app = '***'"),
        ("ALTER USER app IDENTIFIED BY 'new' REPLACE 'old'", "ALTER USER app IDENTIFIED BY '***' REPLACE '***'"),
        ("ALTER ROLE app PASSWORD U&'hun\\0074er2'", "ALTER ROLE app PASSWORD '***'"),
        (
            "the user x: Can't locate revision identified by 'abc'",
            "the user x: Can't locate revision identified by 'abc'",
        ),
        ("SELECT replace('abc', 'a', 'b')", "SELECT replace('abc', 'a', 'b')"),
        ("SET PASSWORD FOR app = PASSWORD('hunter2')", "SET PASSWORD FOR app = PASSWORD('***')"),
        ("CREATE ROLE app PASSWORD 'hunter2 cut off by the report", "CREATE ROLE app PASSWORD '***'"),
        ("ALTER ROLE app PASSWORD NULL", "ALTER ROLE app PASSWORD NULL"),
        ("SELECT pg_sleep(60)", "SELECT pg_sleep(60)"),
    ],
)
def test_a_password_in_a_sql_statement_is_withheld(statement: str, shown: str) -> None:
    """What a wait report shows of another writer's statement (docs/cli.md) keeps its passwords back."""
    from fencemigrate.scrub import scrub_secrets

    assert scrub_secrets(statement) == shown


# -- a file's text, as the MCP server's read_file shows it (issue 24, defect 7) -------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param("DB_PASS=s3cr3t-a\nDB_USER=app\n", "DB_PASS=***\nDB_USER=app\n", id="dotenv"),
        pytest.param("export PGPASSWORD='s3 cr3t'\n", "export PGPASSWORD='***'\n", id="shell-quoted"),
        pytest.param("PGPASSWORD s3cr3t-b psql -h db\n", "PGPASSWORD *** psql -h db\n", id="pgpassword-word"),
        pytest.param("MYSQL_PWD=s3cr3t-c mysql\n", "MYSQL_PWD=*** mysql\n", id="mysql-pwd"),
        pytest.param("db:\n  password: s3cr3t-d\n", "db:\n  password: ***\n", id="yaml"),
        pytest.param('api_secret: "x y"\n', 'api_secret: "***"\n', id="yaml-quoted"),
        pytest.param(
            '{"db": {"password": "s3\\"cr3t"}, "port": 5432}', '{"db": {"password": "***"}, "port": 5432}', id="json"
        ),
        pytest.param("[db]\npassword = s3cr3t-e\n", "[db]\npassword = ***\n", id="ini"),
        pytest.param("url = redis://:s3cr3t-f@cache/0\n", "url = redis://:***@cache/0\n", id="url"),
        pytest.param("conninfo: host=db password=s3cr3t-g\n", "conninfo: host=db password=***\n", id="libpq-keyword"),
    ],
)
def test_a_files_passwords_are_redacted_in_every_format(text: str, shown: str) -> None:
    from fencemigrate.scrub import redact_file_text

    assert redact_file_text(text) == shown


#: Multi-line values and decorated ones: (text, shown).
MULTI_LINE_CASES = [
    pytest.param(
        "db:\n  password: |\n    s3cr3t-h\n  host: db\n",
        "db:\n  password: |\n    ***\n  host: db\n",
        id="yaml-block",
    ),
    pytest.param(
        "password: >-\n  s3cr3t\n  -i\nuser: app\n", "password: >-\n  ***\n  ***\nuser: app\n", id="yaml-folded"
    ),
    pytest.param("passwords:\n  - s3cr3t-j\n  - s3cr3t-k\n", "passwords:\n  ***\n  ***\n", id="yaml-list"),
    pytest.param("- password:\n    s3cr3t-l\n  host: db\n", "- password:\n    ***\n  host: db\n", id="yaml-item"),
    pytest.param("password: &pw s3cr3t-m\nother: *pw\n", "password: &pw ***\nother: *pw\n", id="yaml-anchor"),
    pytest.param("password: !!str s3cr3t-n\n", "password: !!str ***\n", id="yaml-tag"),
    pytest.param(
        "[db]\npassword =\n    s3cr3t\n    -o\n[x]\n",
        "[db]\npassword =\n    ***\n    ***\n[x]\n",
        id="ini-continued",
    ),
    pytest.param('password = """\ns3cr3t-p"""\n', 'password = """***"""\n', id="toml-multi-line"),
    pytest.param("password = '''\ns3cr3t-q'''\n", "password = '''***'''\n", id="toml-literal"),
    pytest.param('DB_PASS="s3cr3t\n-r"\nDB_USER=app\n', 'DB_PASS="***"\nDB_USER=app\n', id="dotenv-multi-line"),
    pytest.param('PASSWORD = ("s3cr3t"\n    "-s")\n', "PASSWORD = (***)\n", id="python-concatenated"),
    pytest.param("<db><password>s3cr3t-t</password></db>\n", "<db><password>***</password></db>\n", id="xml"),
    pytest.param(
        "db.example:5432:app:bob:s3cr3t-u\n*:*:*:app:s3:cr3t\n",
        "db.example:5432:app:bob:***\n*:*:*:app:***\n",
        id="pgpass-lines",
    ),
    pytest.param(
        "machine db.example login bob password s3cr3t-v\n",
        "machine db.example login bob password ***\n",
        id="netrc",
    ),
    pytest.param(
        "machine db.example\n  login bob\n  password s3cr3t-w\n",
        "machine db.example\n  login bob\n  password ***\n",
        id="netrc-lines",
    ),
    pytest.param(
        "op.execute(\"CREATE ROLE app LOGIN PASSWORD 's3cr3t-z'\")\nALTER USER u IDENTIFIED BY 's3cr3t-zz';\n",
        "op.execute(\"CREATE ROLE app LOGIN PASSWORD '***'\")\nALTER USER u IDENTIFIED BY '***';\n",
        id="sql",
    ),
    pytest.param(
        "DB_PASS = b\"s3cr3t-x\"\nAPI_SECRET = rb's3cr3t-y'\n",
        "DB_PASS = b\"***\"\nAPI_SECRET = rb'***'\n",
        id="python-prefixed",
    ),
]


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize(("text", "shown"), MULTI_LINE_CASES)
def test_a_password_across_lines_or_behind_a_decoration_is_redacted(text: str, shown: str, newline: str) -> None:
    """Multi-line values (YAML block scalars and lists, ini continuations, TOML and dotenv strings),
    YAML anchors and tags, XML elements and .pgpass lines, with Unix or Windows line ends: the
    password never comes through."""
    from fencemigrate.scrub import redact_file_text

    redacted = redact_file_text(text.replace("\n", newline))
    assert redacted == shown.replace("\n", newline)
    assert "cr3t" not in redacted


def test_a_known_password_percent_encoded_outside_a_url_is_redacted() -> None:
    """A password the server knows raw (a config key, the environment) is withheld percent-encoded
    too, also where no scheme marks a URL (a DSN, a query string), in either case of hex digits."""
    from fencemigrate.scrub import redact_file_text, remember_password

    remember_password("Pe@rc:w/rd Z")
    assert redact_file_text("dsn u:Pe%40rc%3Aw%2Frd%20Z@db\nq=Pe%40rc%3aw%2frd+Z&x=1\n") == "dsn u:***@db\nq=***&x=1\n"


def test_a_known_password_escaped_as_pgpass_writes_it_is_redacted() -> None:
    from fencemigrate.scrub import redact_file_text, remember_password

    remember_password("Kn:own\\pw")
    assert redact_file_text("note: Kn\\:own\\\\pw\n") == "note: ***\n"


@pytest.mark.parametrize(
    "text",
    [
        "password_hash = sa.Column(sa.String(60))\n",
        'op.add_column("users", sa.Column("password", sa.String()))\n',
        "bypass = true\npassenger_count = 3\ncompass: north\n",
        "the password field is required\n",
    ],
)
def test_code_and_prose_about_passwords_are_left_alone(text: str) -> None:
    from fencemigrate.scrub import redact_file_text

    assert redact_file_text(text) == text


def test_a_known_password_is_redacted_wherever_it_stands_as_a_word() -> None:
    from fencemigrate.scrub import redact_file_text, remember_environment_passwords

    remember_environment_passwords({"APP_DB_PASSWORD": "Qv7-known", "PWD": "/srv/app", "PGPASSFILE": "/srv/.pgpass"})
    assert redact_file_text("a Qv7-known b, (Qv7-known) xQv7-known /srv/app /srv/.pgpass") == (
        "a *** b, (***) xQv7-known /srv/app /srv/.pgpass"
    )


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("PGPASSWORD", True),
        ("DB_PASS", True),
        ("MYSQL_PWD", True),
        ("api_secret", True),
        ("PWD", False),
        ("OLDPWD", False),
        ("PGPASSFILE", False),
        ("BYPASS", False),
        ("PATH", False),
    ],
)
def test_password_names(name: str, secret: bool) -> None:
    from fencemigrate.scrub import password_name

    assert password_name(name) is secret
