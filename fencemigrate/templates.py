"""Environment templates for ``init`` and ``list_templates``: fencemigrate's fence-aware one (the
default) and every template of the installed Alembic, which ``init -t NAME`` writes exactly as
``alembic init -t NAME`` does."""

from __future__ import annotations

import configparser
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command as alembic_command
from alembic.config import Config
from alembic.util import CommandError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from .config import template_dir
from .errors import UsageError

FENCE_AWARE = "fencemigrate"
"""The name of fencemigrate's own template, ``init``'s default."""


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
