"""Real Alembic projects on disk, and the command lines that run against them.

:func:`create_project` lays out what the real ``alembic init`` writes (so the env.py under
test is exactly what users get; run once per template and copied), points ``alembic.ini`` at a database and returns a
:class:`Project`. Revisions are written as ordinary revision files whose
``upgrade()`` / ``downgrade()`` call ``op.execute(...)``.

``fencemigrate`` runs inside the test process (:mod:`support.in_process`) unless a test asks
for a process (:meth:`Project.run_cli_process`). Subprocesses run the ``fencemigrate`` /
``alembic`` console scripts of the Python
environment running the tests (found next to ``sys.executable``), in the project
directory, with ``PYTHONDONTWRITEBYTECODE=1`` so a rewritten revision file is
always re-read from source.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from support import zygote

#: Seconds after which a command is killed: a fenced migration waiting on a lock
#: must fail the test, not hang CI.
DEFAULT_TIMEOUT = 120.0

#: Name of the migration script directory created by ``alembic init``.
SCRIPT_DIR = "migrations"


@dataclass(frozen=True)
class Result:
    """Outcome of one command: exit ``code``, captured ``stdout`` / ``stderr`` text (and stdout's bytes
    when the command ran in the test process)."""

    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str
    stdout_bytes: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0."""
        return self.code == 0

    @property
    def output(self) -> str:
        """stdout and stderr together, for substring assertions."""
        return self.stdout + self.stderr

    def check(self, code: int = 0) -> Result:
        """Assert the exit status is ``code`` (showing both streams otherwise) and return self."""
        assert self.code == code, f"expected exit {code}\n{self}"
        return self

    def __str__(self) -> str:
        """Render the command, its exit status and both output streams."""
        return (
            f"$ {' '.join(self.args)}\n[exit {self.code}]\n--- stdout ---\n{self.stdout}--- stderr ---\n{self.stderr}"
        )


def script_command(name: str) -> list[str]:
    """Return the argv prefix that runs console script ``name`` of the current environment.

    Prefers the script next to ``sys.executable`` (``.venv/bin/fencemigrate``), falls
    back to ``python -m <name>``.
    """
    candidate = Path(sys.executable).parent / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return [str(candidate)]
    return [sys.executable, "-m", name]


def subprocess_env(extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """Return the environment for child processes.

    A copy of ``os.environ`` with ``PYTHONDONTWRITEBYTECODE=1``, unbuffered output and
    the interpreter's bin directory first on ``PATH``; ``extra`` entries override it,
    and an entry whose value is ``None`` removes that variable.
    """
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_command(
    argv: Sequence[str],
    cwd: Path,
    env: Mapping[str, str | None] | None = None,
    input: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> Result:
    """Run ``argv`` in ``cwd`` (see :func:`subprocess_env` for ``env``) and capture its output.

    ``input`` is fed to stdin (otherwise stdin is empty). A timeout raises
    :class:`subprocess.TimeoutExpired` after killing the process. This environment's ``alembic``
    and ``fencemigrate`` console scripts are started by fork from a process that imported their
    libraries already (:mod:`support.zygote`), other programs as usual.
    """
    full_env = subprocess_env(env)
    forked = zygote.run(argv, cwd, full_env, input or "", timeout, base_env=subprocess_env())
    if forked is not None:
        return Result(tuple(argv), *forked)
    completed = subprocess.run(
        list(argv),
        cwd=cwd,
        env=full_env,
        input=input if input is not None else "",
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Result(tuple(argv), completed.returncode, completed.stdout, completed.stderr)


def start_process(argv: Sequence[str], cwd: Path, env: Mapping[str, str | None] | None = None) -> zygote.Process:
    """Start ``argv`` in ``cwd`` in the background (see :func:`subprocess_env` for ``env``), stdin empty,
    stdout and stderr into text pipes; this environment's console scripts by fork (:mod:`support.zygote`)."""
    return zygote.popen(argv, cwd, subprocess_env(env), base_env=subprocess_env())


def run_all_at_once(cwd: Path, argv: Sequence[Sequence[str]], timeout: float = 300.0) -> list[tuple[int, str]]:
    """Start every command line of ``argv`` in ``cwd`` at once; their ``(exit status, stderr)``."""
    processes = [start_process(args, cwd) for args in argv]
    results = []
    for process in processes:
        _, stderr = process.communicate(timeout=timeout)
        results.append((process.returncode, stderr))
    return results


def ini_escape(value: str) -> str:
    """Escape a value for alembic.ini, whose ConfigParser interpolates ``%``."""
    return value.replace("%", "%%")


def _python_block(code: str) -> str:
    """Dedent ``code`` and indent it by four spaces, for a function body."""
    return textwrap.indent(textwrap.dedent(code).strip("\n"), "    ")


def _as_list(sql: str | Sequence[str]) -> list[str]:
    """Normalise one SQL string or a sequence of them to a list."""
    return [sql] if isinstance(sql, str) else list(sql)


@dataclass
class Project:
    """An Alembic project created by ``alembic init`` in :attr:`path`."""

    path: Path
    url: str
    template: str
    _revision_files: dict[str, Path] = field(default_factory=dict, repr=False)

    # -- layout -------------------------------------------------------------

    @property
    def ini(self) -> Path:
        """The project's ``alembic.ini``."""
        return self.path / "alembic.ini"

    @property
    def script_dir(self) -> Path:
        """The migration script directory (holds ``env.py`` and ``versions/``)."""
        return self.path / SCRIPT_DIR

    @property
    def env_py(self) -> Path:
        """The project's ``env.py``."""
        return self.script_dir / "env.py"

    @property
    def versions(self) -> Path:
        """The ``versions/`` directory holding revision files."""
        return self.script_dir / "versions"

    # -- revisions ----------------------------------------------------------

    def add_revision(
        self,
        rev_id: str,
        down_revision: str | Sequence[str] | None,
        upgrade_sql: str | Sequence[str] = (),
        downgrade_sql: str | Sequence[str] = (),
        slug: str = "rev",
        extra_upgrade_code: str = "",
        extra_downgrade_code: str = "",
        branch_labels: str | Sequence[str] | None = None,
        depends_on: str | Sequence[str] | None = None,
    ) -> Path:
        """Write ``versions/<rev_id>_<slug>.py`` and return its path.

        ``upgrade()`` runs ``op.execute(sql)`` for each statement of ``upgrade_sql``
        and then ``extra_upgrade_code`` (Python source, any indentation; ``op`` and
        ``sa`` are imported); ``downgrade()`` likewise. Calling it again for the same
        ``rev_id`` replaces the earlier file. SQL goes through SQLAlchemy ``text()``,
        so a ``:word`` in it is a bind parameter: escape it as ``\\:word``.
        """
        old = self._revision_files.pop(rev_id, None)
        if old is not None and old.exists():
            old.unlink()

        def body(statements: str | Sequence[str], extra: str) -> str:
            lines = [f"    op.execute({sql!r})" for sql in _as_list(statements)]
            if extra.strip():
                lines.append(_python_block(extra))
            return "\n".join(lines) if lines else "    pass"

        def ids(value: str | Sequence[str] | None) -> str:
            return repr(value if value is None or isinstance(value, str) else tuple(value))

        source = (
            f'"""{slug}\n\nRevision ID: {rev_id}\nRevises: {down_revision}\n"""\n'
            "import sqlalchemy as sa  # noqa: F401\n"
            "from alembic import op\n\n"
            f"revision = {rev_id!r}\n"
            f"down_revision = {ids(down_revision)}\n"
            f"branch_labels = {ids(branch_labels)}\n"
            f"depends_on = {ids(depends_on)}\n\n\n"
            f"def upgrade() -> None:\n{body(upgrade_sql, extra_upgrade_code)}\n\n\n"
            f"def downgrade() -> None:\n{body(downgrade_sql, extra_downgrade_code)}\n"
        )
        path = self.versions / f"{rev_id}_{slug}.py"
        path.write_text(source)
        self._revision_files[rev_id] = path
        self.remove_pycache()
        return path

    def add_chain(self, count: int) -> None:
        """Revisions ``r01`` .. ``rNN`` in a chain, each creating its table ``tNN``."""
        for number in range(1, count + 1):
            down = f"r{number - 1:02d}" if number > 1 else None
            self.add_revision(
                f"r{number:02d}",
                down,
                f"CREATE TABLE t{number:02d} (id int)",
                f"DROP TABLE t{number:02d}",
                slug=f"t{number:02d}",
            )

    def remove_revision(self, rev_id: str) -> None:
        """Delete the file written by :meth:`add_revision` for ``rev_id``."""
        path = self._revision_files.pop(rev_id)
        path.unlink()
        self.remove_pycache()

    def remove_pycache(self) -> None:
        """Delete every ``__pycache__`` under the project so edited files are re-read."""
        for cache in self.path.rglob("__pycache__"):
            shutil.rmtree(cache, ignore_errors=True)

    # -- env.py and alembic.ini ----------------------------------------------

    def edit_env(self, old: str, new: str, count: int = -1) -> None:
        """Replace ``old`` by ``new`` in env.py (all occurrences unless ``count``).

        Fails if ``old`` does not occur, so a template change cannot silently
        turn a test variant into the default.
        """
        text = self.env_py.read_text()
        assert old in text, f"{old!r} not found in {self.env_py}:\n{text}"
        self.env_py.write_text(text.replace(old, new, count))
        self.remove_pycache()

    def set_env_option(self, name: str, value: object, raw: bool = False) -> None:
        """Add ``name=value`` to every ``context.configure(...)`` call in env.py.

        ``value`` is rendered with ``repr()`` (``True``, ``"schema"``, ``3``) unless
        ``raw`` is true, in which case it is inserted as Python source.
        Example: ``set_env_option("transaction_per_migration", True)``.
        """
        code = value if raw and isinstance(value, str) else repr(value)
        self.edit_env("target_metadata=target_metadata", f"target_metadata=target_metadata, {name}={code}")

    def set_ini_option(self, key: str, value: str, section: str = "alembic") -> None:
        """Set ``key = value`` in ``[section]`` of alembic.ini (``%`` is escaped).

        Replaces an existing (uncommented) ``key =`` line of that section, or adds
        the line right after the section header, or appends the section.
        """
        lines = self.ini.read_text().splitlines()
        new_line = f"{key} = {ini_escape(value)}"
        header = f"[{section}]"
        current: str | None = None
        header_index: int | None = None
        for index, line in enumerate(lines):
            stripped = line.strip()
            if stripped.startswith("[") and stripped.endswith("]"):
                current = stripped
                if current == header:
                    header_index = index
                continue
            if current == header and re.match(rf"{re.escape(key)}\s*=", stripped):
                lines[index] = new_line
                break
        else:
            if header_index is None:
                lines += ["", header, new_line]
            else:
                lines.insert(header_index + 1, new_line)
        self.ini.write_text("\n".join(lines) + "\n")

    def set_url(self, url: str) -> None:
        """Point ``sqlalchemy.url`` in alembic.ini at ``url``."""
        self.set_ini_option("sqlalchemy.url", url)
        self.url = url

    # -- commands ------------------------------------------------------------

    def run_cli(
        self,
        *args: str,
        env: Mapping[str, str | None] | None = None,
        input: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        process: bool = False,
    ) -> Result:
        """Run ``fencemigrate *args`` in the project directory, inside the test process
        (:mod:`support.in_process`) unless ``process`` (see :meth:`run_cli_process`)."""
        if process:
            return self.run_cli_process(*args, env=env, input=input, timeout=timeout)
        from support.in_process import run_in_process  # it imports this module

        return run_in_process(self.path, *args, env=env, input=input, timeout=timeout)

    def run_cli_process(
        self,
        *args: str,
        env: Mapping[str, str | None] | None = None,
        input: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Result:
        """Run the ``fencemigrate`` console script in a process of its own, for what only a process
        shows: signals, its exit (``os._exit``, atexit, threads joined), runs beside another one."""
        return run_command(script_command("fencemigrate") + list(args), self.path, env, input, timeout)

    def run_alembic(
        self,
        *args: str,
        env: Mapping[str, str | None] | None = None,
        input: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Result:
        """Run plain ``alembic *args`` (the control) in the project directory."""
        return run_command(script_command("alembic") + list(args), self.path, env, input, timeout)

    def allow_tokenless_writes(self) -> None:
        """Opt the database out of the version-table guard, so that a plain ``alembic`` control can
        write to a fenced database (``fencemigrate install --allow-tokenless-writes``)."""
        self.run_cli("install", "--allow-tokenless-writes").check()


def sqlite_url(database: Path) -> str:
    """SQLAlchemy URL of the SQLite file ``database`` (default pysqlite driver): ``sqlite:////abs/path``."""
    return f"sqlite:///{database.resolve()}"


#: What the real ``alembic init`` wrote for each template in this process, to copy (see :func:`alembic_init`).
_PRISTINE_INITS: dict[str, Path] = {}


def _run_alembic_init(path: Path, template: str) -> None:
    """Run ``alembic init -t <template> migrations`` in ``path``; fail the test if it fails."""
    result = run_command(script_command("alembic") + ["init", "-t", template, SCRIPT_DIR], path)
    assert result.ok, f"alembic init failed\n{result}"


def alembic_init(path: Path, template: str) -> None:
    """Lay out in the empty directory ``path`` what ``alembic init -t <template> migrations`` writes there.

    The real ``alembic init`` runs once per template and test process, in a directory of its own;
    each later project is a copy of that output, which is relocatable (``alembic.ini`` names
    ``%(here)s/migrations``). This spares a subprocess per project. A ``path`` that already
    holds files gets the real ``alembic init``, whose checks then decide.
    """
    if any(path.iterdir()):
        _run_alembic_init(path, template)
        return
    pristine = _PRISTINE_INITS.get(template)
    if pristine is None:
        pristine = Path(tempfile.mkdtemp(prefix="fm-alembic-init-"))
        atexit.register(shutil.rmtree, pristine, True)
        _run_alembic_init(pristine, template)
        _PRISTINE_INITS[template] = pristine
    shutil.copytree(pristine, path, dirs_exist_ok=True)


def create_project(path: Path, url: str, template: str | Path = "generic") -> Project:
    """Create an Alembic project in ``path`` with what the real ``alembic init`` writes.

    ``alembic init -t <template> migrations`` with ``path`` as working directory (see
    :func:`alembic_init`), so ``alembic.ini`` lands in ``path`` and scripts in
    ``path/migrations``. ``template`` is an Alembic template name ("generic",
    "async", "pyproject", ...) or the absolute path of a template directory.
    ``sqlalchemy.url`` is then set to ``url``.
    """
    path.mkdir(parents=True, exist_ok=True)
    alembic_init(path, str(template))
    project = Project(path=path, url=url, template=str(template))
    assert project.ini.is_file(), f"alembic init did not write {project.ini}"
    project.set_url(url)
    return project


class MakeProject(Protocol):
    """Signature of the ``make_project`` fixture."""

    def __call__(self, template: str | Path = "generic", url: str | None = None, name: str = "project") -> Project:
        """Create an Alembic project under ``tmp_path / name`` pointing at ``url`` (default ``pg_url``)."""
        ...
