"""Alembic's authoring commands (``init``, ``list_templates``, ``revision``, ``merge``, ``edit``,
``branches``): they write or show an environment or revision files and never change the database,
so they take no token and no lease.

``init`` writes fencemigrate's fence-aware template (the default) or any template of the installed
Alembic, which ``init -t NAME`` writes exactly as ``alembic init -t NAME`` does. Revision files come
from Alembic's own ``RevisionContext`` and ``ScriptDirectory.generate_revision``, so they are byte
for byte what ``alembic`` writes, except that ``--autogenerate`` leaves out the fence's own tables
and schema (:mod:`..fence.objects`), for which Alembic writes ``op.drop_table``. Other differences,
each a refusal of input Alembic accepts: a ``--rev-id`` that already exists (Alembic writes a second
file with it) and a merge of fewer than two revisions (Alembic writes an ordinary revision). Bad
input is a UsageError and leaves no file behind.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command as alembic_command
from alembic import util as alembic_util
from alembic.autogenerate import RevisionContext
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import Script, ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ..alembic_internals import script_by_id, version_directories
from ..config import FENCE_AWARE, fence_schema, template_dir
from ..errors import FencemigrateError, UsageError
from ..fence.objects import fence_left_out


@dataclass(frozen=True)
class Template:
    """One template ``init -t`` can write."""

    name: str
    synopsis: str
    fence_aware: bool

    def as_json(self) -> dict[str, Any]:
        """JSON form, in ``list_templates --json``."""
        return {
            "name": self.name,
            "synopsis": self.synopsis,
            "fence_aware": self.fence_aware,
            "default": self.name == FENCE_AWARE,
        }


@dataclass(frozen=True)
class KeptConfig:
    """An ini file ``init`` found and left as it was (as ``alembic init`` does): what it still says."""

    url: str | None  # its sqlalchemy.url, password hidden (None: unset or unreadable)
    script_location: str | None  # its script_location, as written (None: unset or unreadable)
    runs_directory: bool  # its script_location is the directory init wrote

    def as_json(self) -> dict[str, Any]:
        """JSON form, ``"config_kept"`` in ``init --json``."""
        return {
            "sqlalchemy_url": self.url,
            "script_location": self.script_location,
            "runs_directory": self.runs_directory,
        }


@dataclass(frozen=True)
class InitOutcome:
    """What ``init`` wrote."""

    directory: str
    template: str
    fence_aware: bool
    package: bool
    config_file: str
    kept: KeptConfig | None = None  # the config file existed and was not written

    def as_json(self) -> dict[str, Any]:
        """JSON form, in ``init --json``."""
        return {
            "status": "ok",
            "directory": self.directory,
            "template": self.template,
            "fence_aware": self.fence_aware,
            "package": self.package,
            "config_file": self.config_file,
            "config_kept": None if self.kept is None else self.kept.as_json(),
        }


def available_templates() -> list[Template]:
    """fencemigrate's template first, then Alembic's by name."""
    alembic_templates = sorted(
        path for path in Path(Config().get_template_directory()).iterdir() if (path / "README").is_file()
    )
    return [Template(FENCE_AWARE, _synopsis(template_dir()), True)] + [
        Template(path.name, _synopsis(path), False) for path in alembic_templates
    ]


def init_environment(config: Config, directory: str, template: str, package: bool) -> InitOutcome:
    """Write a new environment in ``directory`` from ``template`` (see :func:`available_templates`)."""
    target = Path(directory)
    if target.exists() and any(target.iterdir()):
        raise UsageError(f"directory {directory!r} exists and is not empty")
    if template == FENCE_AWARE:
        config = _FenceAwareTemplates(
            config.config_file_name,
            toml_file=config.toml_file_name,
            ini_section=config.config_ini_section,
            cmd_opts=config.cmd_opts,
        )
        name = template_dir().name
    else:
        name = template
        if not (Path(config.get_template_directory()) / name / "README").is_file():
            names = ", ".join(found.name for found in available_templates())
            raise UsageError(f"no template {template!r}: choose one of {names} (see `fencemigrate list_templates`)")
    config_file = Path(config.config_file_name or "alembic.ini").resolve()
    writes_ini = (Path(config.get_template_directory()) / name / "alembic.ini.mako").is_file()
    kept = None
    if writes_ini and config_file.exists():
        kept = _kept_config(config_file, config.config_ini_section, Path(directory).resolve())
    try:
        alembic_command.init(config, directory, template=name, package=package)
    except CommandError as error:
        raise UsageError(str(error)) from None
    return InitOutcome(directory, template, template == FENCE_AWARE, package, str(config_file), kept)


def _kept_config(path: Path, section: str, directory: Path) -> KeptConfig:
    """What the ini file at ``path`` that ``init`` keeps says in ``section`` (as written), and
    whether its script_location is ``directory``."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return KeptConfig(None, None, False)
    url = parser.get(section, "sqlalchemy.url", fallback=None)
    location = parser.get(section, "script_location", fallback=None)
    here = str(path.parent)
    runs = location is not None and (path.parent / location.replace("%(here)s", here)).resolve() == directory
    return KeptConfig(_hidden_password(url), location, runs)


def _hidden_password(url: str | None) -> str | None:
    """``url`` with its password as ``***`` (None when it is unset; a placeholder when it is no URL)."""
    if not url:
        return None
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "(not a database URL)"


def _synopsis(template: Path) -> str:
    """The first line of the template's README, as ``alembic list_templates`` shows it."""
    with (template / "README").open() as readme:
        return next(readme).rstrip()


class _FenceAwareTemplates(Config):
    """A Config whose template directory is fencemigrate's data directory."""

    def get_template_directory(self) -> str:
        return str(template_dir().parent)


RunEnv = Callable[..., None]
"""Runs env.py with a migration function and extra EnvironmentContext options (``api`` passes
its read-only runner: the database is read, never written)."""


@dataclass(frozen=True)
class WrittenRevision:
    """A revision file ``revision`` or ``merge`` wrote."""

    id: str
    path: str
    message: str | None
    down_revisions: tuple[str, ...]
    branch_labels: tuple[str, ...]
    depends_on: tuple[str, ...]

    @classmethod
    def of(cls, script: Script) -> WrittenRevision:
        """The file Alembic generated, as ``script``."""
        return cls(
            id=script.revision,
            path=str(Path(script.path).resolve()),
            message=script.doc or None,
            down_revisions=tuple(alembic_util.to_tuple(script.down_revision, default=())),
            branch_labels=tuple(sorted(script.branch_labels)),
            depends_on=tuple(alembic_util.to_tuple(script.dependencies, default=())),
        )

    def as_json(self) -> dict[str, Any]:
        """JSON form, in ``revision --json`` and ``merge --json``."""
        return {
            "id": self.id,
            "path": self.path,
            "message": self.message,
            "down_revisions": list(self.down_revisions),
            "branch_labels": list(self.branch_labels),
            "depends_on": list(self.depends_on),
        }


@dataclass(frozen=True)
class BranchPoint:
    """A revision with more than one child, and its lines in Alembic's ``branches`` output."""

    revision: str
    children: tuple[str, ...]
    text: str

    def as_json(self) -> dict[str, Any]:
        """JSON form, in ``branches --json``."""
        return {"revision": self.revision, "children": list(self.children)}


def new_revisions(
    config: Config,
    script: ScriptDirectory,
    run_env: RunEnv,
    *,
    message: str | None = None,
    autogenerate: bool = False,
    sql: bool = False,
    head: str = "head",
    splice: bool = False,
    branch_label: str | Sequence[str] | None = None,
    version_path: str | None = None,
    rev_id: str | None = None,
    depends_on: str | Sequence[str] | None = None,
) -> list[WrittenRevision]:
    """``alembic revision``: the files written (one, unless env.py's ``process_revision_directives``
    makes it none or several). With ``autogenerate`` (or ``revision_environment`` set), env.py
    runs first and reads the database; the database is never written."""
    environment = autogenerate or alembic_util.asbool(config.get_alembic_option("revision_environment"))
    if autogenerate and sql:
        raise UsageError("Using --sql with --autogenerate does not make any sense")
    if sql and not environment:
        raise UsageError(
            "Using --sql with the revision command when revision_environment is not configured does not make any sense"
        )
    if rev_id is not None:
        _require_new_id(script, rev_id)
    context = RevisionContext(
        config,
        script,
        {
            "message": message,
            "autogenerate": autogenerate,
            "sql": sql,
            "head": head,
            "splice": splice,
            "branch_label": _ids(branch_label),
            "version_path": version_path,
            "rev_id": rev_id,
            "depends_on": _ids(depends_on),
        },
    )
    if environment:

        def retrieve_migrations(heads: tuple[str, ...], migration_context: MigrationContext) -> list[Any]:
            if autogenerate:
                with fence_left_out(migration_context, fence_schema(config)):
                    context.run_autogenerate(heads, migration_context)
            else:
                context.run_no_autogenerate(heads, migration_context)
            return []

        run_env(retrieve_migrations, as_sql=sql, template_args=context.template_args, revision_context=context)
    with _nothing_left_on_failure(script):
        return [WrittenRevision.of(written) for written in context.generate_scripts() if written is not None]


def merge(
    config: Config,
    script: ScriptDirectory,
    run_env: RunEnv,
    revisions: Sequence[str],
    *,
    message: str | None = None,
    branch_label: str | Sequence[str] | None = None,
    rev_id: str | None = None,
    splice: bool = False,
) -> WrittenRevision:
    """``alembic merge``: one revision whose parents are ``revisions`` (at least two, after
    resolving symbols such as ``heads``)."""
    targets = _resolved(script, revisions)
    if len(targets) < 2:
        names = f"only {targets[0]}" if targets else "no revision"
        raise UsageError(f"merge needs two or more revisions; {' '.join(revisions)!r} names {names}: nothing to merge")
    if rev_id is not None:
        _require_new_id(script, rev_id)
    template_args: dict[str, Any] = {"config": config}
    if alembic_util.asbool(config.get_alembic_option("revision_environment")):
        run_env(lambda heads, context: [], template_args=template_args)
    with _nothing_left_on_failure(script):
        written = script.generate_revision(
            rev_id or alembic_util.rev_id(),
            message,
            refresh=True,
            head=list(revisions),
            branch_labels=_ids(branch_label),
            splice=splice,
            **template_args,
        )
    if written is None:
        raise FencemigrateError("Alembic wrote no merge revision")
    return WrittenRevision.of(written)


def revision_files(script: ScriptDirectory, revision: str) -> list[str]:
    """The files of the revisions ``revision`` names (``edit``), other than ``current``."""
    with _as_usage():
        found = [sc.path for sc in script.get_revisions(revision) if sc is not None]
    if not found:
        raise UsageError(f"No revision files indicated by symbol '{revision}'")
    return found


def open_in_editor(paths: Sequence[str]) -> None:
    """Open each file in ``$EDITOR`` (or ``$VISUAL``, or a common editor), as ``alembic edit``."""
    for path in paths:
        try:
            alembic_util.open_in_editor(path)
        except CommandError as error:
            raise FencemigrateError(str(error)) from None


def branch_points(script: ScriptDirectory, verbose: bool) -> list[BranchPoint]:
    """``alembic branches``: every revision with several children, newest first."""
    points = []
    for sc in script.walk_revisions():
        if not sc.is_branch_point:
            continue
        children = [script.get_revision(rev) for rev in sc.nextrev]
        lines = "\n".join(
            f"{' ' * len(str(sc.revision))} -> " + child.cmd_format(False, include_branches=True, include_doc=verbose)
            for child in children
            if child is not None
        )
        points.append(
            BranchPoint(
                sc.revision, tuple(sorted(sc.nextrev)), f"{sc.cmd_format(verbose, include_branches=True)}\n{lines}\n"
            )
        )
    return points


def _ids(value: str | Sequence[str] | None) -> str | tuple[str, ...] | None:
    """One id or label, several, or none, as Alembic takes them."""
    return value if value is None or isinstance(value, str) else tuple(value)


def _require_new_id(script: ScriptDirectory, rev_id: str) -> None:
    try:
        Script.verify_rev_id(rev_id)
    except RevisionError as error:
        raise UsageError(str(error.args[0])) from None
    existing = script_by_id(script, rev_id)
    if existing is not None:
        raise UsageError(
            f"revision id {rev_id!r} already exists ({Path(existing.path).resolve()}); choose another --rev-id"
        )


def _resolved(script: ScriptDirectory, revisions: Sequence[str]) -> list[str]:
    found: list[str] = []
    with _as_usage():
        for target in revisions:
            found += [sc.revision for sc in script.get_revisions(target) if sc is not None]
    return sorted(set(found))


@contextmanager
def _as_usage() -> Iterator[None]:
    """Alembic's complaints about the arguments (unknown revision, not a head, ...) as UsageError."""
    try:
        yield
    except (CommandError, RevisionError) as error:
        raise UsageError(str(error)) from None


@contextmanager
def _nothing_left_on_failure(script: ScriptDirectory) -> Iterator[None]:
    """Alembic writes the file before some of its checks (a branch label in use): remove what it
    wrote when generating fails, and report the failure as bad usage."""
    before = _version_files(script)
    try:
        with _as_usage():
            yield
    except BaseException:
        for path in _version_files(script) - before:
            os.unlink(path)
        raise


def _version_files(script: ScriptDirectory) -> set[str]:
    return {
        os.path.join(root, name)
        for location in version_directories(script)
        if location.is_dir()
        for root, _, names in os.walk(location)
        for name in names
    }
