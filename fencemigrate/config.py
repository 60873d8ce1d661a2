"""Find and load the Alembic configuration exactly as the ``alembic`` command does."""

from __future__ import annotations

import configparser
import os
import re
import tomllib
from argparse import Namespace
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from alembic.config import Config
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from .errors import UsageError
from .scrub import password_name, remember_password, remember_url_password, url_password
from .validation import check_resource, check_schema

_UTF8_BOM = b"\xef\xbb\xbf"

DEFAULT_SCHEMA = "fencemigrate"


def load_config(config_files: Sequence[str] = (), name: str = "alembic", x_arguments: Sequence[str] = ()) -> Config:
    """An Alembic ``Config`` from ``-c`` files (ini and/or pyproject.toml), ``-n`` and ``-x``."""
    toml, ini = _config_paths(config_files)
    explicit = {Path(path) for path in config_files}
    for path in (ini, toml):
        if path in explicit and not path.is_file():
            raise UsageError(f"config file {str(path)!r} does not exist")
    with _utf8(toml, read=False):
        has_toml_config = toml.is_file() and "[tool.alembic]" in toml.read_text(encoding="utf-8")
    if not ini.is_file() and not has_toml_config:
        raise UsageError(
            f"no Alembic configuration found: {str(ini)!r} does not exist (pass -c/--config, or set ALEMBIC_CONFIG)"
        )
    config = Config(
        file_=str(ini) if ini.is_file() else None,
        toml_file=str(toml) if has_toml_config else None,
        ini_section=name,
        cmd_opts=Namespace(x=list(x_arguments), config=list(config_files), name=name),
    )
    with _utf8(ini):
        if ini.is_file() and not config.file_config.has_section(name):
            raise UsageError(f"config file {str(ini)!r} has no [{name}] section")
        _remember_passwords(config.file_config)
    with _utf8(toml, read=has_toml_config):
        script_location = config.get_alembic_option("script_location")
    if not script_location:
        raise UsageError(f"no script_location in the [{name}] section of {str(ini)!r}")
    return config


@contextmanager
def _utf8(path: Path, read: bool = True) -> Iterator[None]:
    """A config file that is not UTF-8 text (Alembic reads both as UTF-8; a byte order mark or a NUL
    byte, UTF-16's, included) or that is not TOML (pyproject.toml) is bad config: one line that
    names the file and the first bad byte or line, never its content. ``read``: Alembic reads the
    file (a pyproject.toml without ``[tool.alembic]`` is not read, a BOM or a NUL there is no matter)."""
    data = path.read_bytes() if read and path.is_file() else b""
    if data.startswith(_UTF8_BOM):
        raise UsageError(
            f"config file {str(path)!r} starts with a byte order mark (0xef 0xbb 0xbf), which Alembic reads as "
            "text before its first line: save it as UTF-8 without a BOM"
        )
    # UTF-16 text (a NUL byte beside each ASCII one), not a stray NUL in a value (refused where it is read);
    # text that does not decode has the read below name its first byte that is not UTF-8
    if data.count(0) * 4 >= len(data) > 0 and _decodes(data):
        raise UsageError(
            f"config file {str(path)!r} has the byte 0x00 (UTF-16 text?): Alembic reads it as UTF-8; save it as UTF-8"
        )
    try:
        yield
    except UnicodeDecodeError as error:
        byte = error.object[error.start : error.start + 1].hex()
        raise UsageError(
            f"config file {str(path)!r} is not UTF-8 text (it has the byte 0x{byte}): "
            "Alembic reads it as UTF-8; is it the right file?"
        ) from None
    except tomllib.TOMLDecodeError as error:
        where = re.search(r"at line (\d+)", str(error))
        line = f" (line {where[1]})" if where else ""
        raise UsageError(f"config file {str(path)!r} is not valid TOML{line}: Alembic cannot read it") from None


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def init_config(config_files: Sequence[str] = (), name: str = "alembic") -> Config:
    """The Config ``init`` writes: the ini file (and pyproject.toml) that ``-c`` or
    ``ALEMBIC_CONFIG`` name, or the defaults, none of which need exist yet."""
    toml, ini = _config_paths(config_files)
    return Config(file_=str(ini), toml_file=str(toml), ini_section=name)


def _remember_passwords(parser: configparser.ConfigParser) -> None:
    """Keep the password of every URL in the config file, and the value of every password key
    (``password = ...``), as written and as interpolated, out of everything printed, before
    anything can quote them."""
    for section in parser.sections():
        for key, value in parser.items(section, raw=True):
            for spelt in (value, value.replace("%%", "%")):
                remember_url_password(spelt)
                if password_name(key):
                    remember_password(spelt.strip())


def config_error(error: configparser.Error) -> UsageError:
    """A config file that configparser refuses, in one line that never quotes a value (it may
    hold a password: configparser's own messages quote the rest of the value, or the line)."""
    if isinstance(error, configparser.InterpolationError):
        return UsageError(
            f"option {error.option} in section [{error.section}] of the config file: a literal '%' there "
            "must be written '%%' (configparser interpolation); the value is not shown, it may hold a password"
        )
    first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
    return UsageError(f"config file: {first_line}")


def check_url_password(url: str | None) -> None:
    """UsageError for a ``sqlalchemy.url`` whose password has an ``@`` that is not percent-encoded:
    SQLAlchemy ends the password at the first ``@`` and takes the rest for the host, which its
    connection error would then print."""
    password = url_password(url) if url else None
    if password is not None and "@" in password:
        raise UsageError(
            "sqlalchemy.url: its password has an '@' that is not percent-encoded, so SQLAlchemy would take "
            "part of it for the host; write '@' as %40 (and ':' as %3A, a space as %20, '%' as %25)"
        )


def _config_paths(config_files: Sequence[str]) -> tuple[Path, Path]:
    environment = os.environ.get("ALEMBIC_CONFIG")
    toml: str | None = None
    ini: str | None = None
    for path in config_files:
        if os.path.basename(path) == "pyproject.toml":
            if toml is not None:
                raise UsageError("pyproject.toml given more than once")
            toml = path
        else:
            if ini is not None:
                raise UsageError("only one ini file may be given")
            ini = path
    if environment and os.path.basename(environment) == "pyproject.toml":
        toml = toml or environment
    elif environment:
        ini = ini or environment
    return Path(toml or "pyproject.toml"), Path(ini or "alembic.ini")


def fence_schema(config: Config) -> str:
    """The schema the fence tables live in: ``fencemigrate_schema`` in the config, or ``fencemigrate``;
    a name fencemigrate cannot use is a UsageError."""
    return check_schema(config.get_alembic_option("fencemigrate_schema") or DEFAULT_SCHEMA)


def checked_resource(config: Config, resource: str | None) -> str:
    """``resource``, or without it the configured one (:func:`configured_resource`), checked."""
    return check_resource(resource if resource is not None else configured_resource(config))


def configured_backend(config: Config) -> str | None:
    """The database ``sqlalchemy.url`` names, as SQLAlchemy's backend name (``postgresql``,
    ``sqlite``, ``mysql``, ``mariadb``...); None when it is unset or not a URL."""
    url = config.get_main_option("sqlalchemy.url")
    if not url:
        return None
    check_url_password(url)
    try:
        return make_url(url).get_backend_name()
    except (ArgumentError, ValueError):
        return None


def configured_resource(config: Config) -> str | None:
    """``fencemigrate_resource`` from the config, if set."""
    return config.get_alembic_option("fencemigrate_resource")


def configured_lease_url(config: Config) -> str | None:
    """``fencemigrate_lease_url`` from the config (e.g. ``redis://host:6379/0``), if set."""
    return config.get_alembic_option("fencemigrate_lease_url")
