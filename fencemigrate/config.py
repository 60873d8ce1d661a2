"""Find and load the Alembic configuration exactly as the ``alembic`` command does, check what the
user gave (before anything touches the database), read durations (``250ms``, ``30s``, ``5m``,
``2h``; a bare number is seconds), and find where the shipped SQL and the Alembic template live,
installed or in a checkout."""

from __future__ import annotations

import configparser
import os
import re
import socket
import tomllib
import unicodedata
from argparse import Namespace
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from fractions import Fraction
from pathlib import Path

from alembic.config import Config
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from .errors import UsageError
from .scrub import password_name, remember_password, remember_url_password, url_password

FENCE_AWARE = "fencemigrate"
"""The name of fencemigrate's own environment template, ``init``'s default."""

_DURATION = re.compile(r"\s*(?P<amount>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>ms|s|m|h)?\s*", re.ASCII)
_MILLISECONDS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, None: 1000}
MAX_TTL_MS = 24 * 3_600_000  # a lease is a heartbeat, not a reservation
MAX_WAIT_MS = 24 * 3_600_000


def parse_duration_ms(option: str, value: str | int | float) -> int:
    """``value`` in whole milliseconds; UsageError naming ``option`` when it is not a duration."""
    if isinstance(value, bool):
        raise UsageError(f"invalid {option} {value!r}: expected a duration such as 30s, 5m or 250ms")
    if isinstance(value, (int, float)):
        value = str(value)
    if value.strip().startswith("-"):
        raise UsageError(f"invalid {option} {value!r}: a duration cannot be negative")
    match = _DURATION.fullmatch(value)
    if match is None:
        raise UsageError(f"invalid {option} {value!r}: expected a duration such as 30s, 5m or 250ms")
    return round(Fraction(match["amount"]) * _MILLISECONDS[match["unit"]])  # exact: no float overflow


def parse_ttl_ms(value: str | int | float) -> int:
    """A lease TTL: more than zero, at most 24 hours."""
    ttl = parse_duration_ms("--ttl", value)
    if ttl <= 0:
        raise UsageError(f"invalid --ttl {value!r}: a lease TTL must be more than zero")
    if ttl > MAX_TTL_MS:
        raise UsageError(
            f"invalid --ttl {value!r}: at most 24h; a lease is renewed while its holder makes "
            "progress, so pick a short TTL"
        )
    return ttl


def parse_wait_ms(value: str | int | float, option: str = "--wait") -> int:
    """How long to wait for a busy lease or lock: zero (do not wait) up to 24 hours; ``option`` names
    it in the error."""
    wait = parse_duration_ms(option, value)
    if wait > MAX_WAIT_MS:
        raise UsageError(f"invalid {option} {value!r}: at most 24h")
    return wait


def format_duration(milliseconds: int) -> str:
    """The shortest exact form: ``5m``, ``90s``, ``250ms``."""
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if milliseconds % size == 0:
            return f"{milliseconds // size}{unit}"
    return f"{milliseconds}ms"


MAX_TOKEN = 2**62
"""The largest fencing token: a grant issues one above the fence, which must still fit a bigint,
and the bits above leave room for an epoch (4611686018427387904)."""
MAX_NAME_LENGTH = 255
DEFAULT_RESOURCE = "db/migrations"
_DECIMAL = re.compile(r"\s*[0-9]+\s*", re.ASCII)
_CONTROL = frozenset({"Cc", "Cs", "Zl", "Zp"})
"""Control characters (C0, DEL, C1), lone surrogates (bytes the locale could not decode) and line
or paragraph separators: a name with one breaks the line it is printed on."""
_FORMAT = frozenset({"Cf"})
"""Invisible formatting characters: bidirectional overrides and isolates (U+202E...), zero-width
ones, soft hyphens: a name with one prints as another name (or as the same name as another)."""


def parse_token(token: str | int) -> int:
    """A fencing token: an integer in 1..2**62."""
    if isinstance(token, str) and not token.strip():
        raise UsageError(
            "empty fencing token: pass --token N, or leave --token out (and FENCEMIGRATE_TOKEN unset) "
            "to have fencemigrate take a lease"
        )
    if isinstance(token, bool) or not isinstance(token, (int, str)):
        raise UsageError(f"invalid token {token!r}: must be an integer from 1 to {MAX_TOKEN}")
    if isinstance(token, str) and not _DECIMAL.fullmatch(token):
        raise UsageError(f"invalid token {token!r}: must be an integer from 1 to {MAX_TOKEN}")
    number = int(token)
    if not 1 <= number <= MAX_TOKEN:
        raise UsageError(f"invalid token {token!r}: must be an integer from 1 to {MAX_TOKEN}")
    return number


def _check_name(kind: str, value: str) -> str:
    if not value or not value.strip():
        raise UsageError(f"{kind} name must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise UsageError(f"{kind} name is {len(value)} characters long; the limit is {MAX_NAME_LENGTH}")
    if any(unicodedata.category(ch) in _CONTROL for ch in value):
        raise UsageError(f"{kind} name must not contain control characters")
    hidden = next((ch for ch in value if unicodedata.category(ch) in _FORMAT), None)
    if hidden is not None:
        raise UsageError(
            f"{kind} name must not contain invisible formatting characters (it has U+{ord(hidden):04X} "
            f"{unicodedata.name(hidden, 'FORMAT CHARACTER')}): they make a name print as another"
        )
    return value


def check_resource(value: str | None) -> str:
    """A fenced resource name (default ``db/migrations``)."""
    return _check_name("resource", DEFAULT_RESOURCE if value is None else value)


def check_holder(value: str | None) -> str:
    """Who is writing; defaults to ``host:pid``."""
    return _check_name("holder", value if value is not None else default_holder())


def default_holder() -> str:
    """``host:pid`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def check_schema(value: str) -> str:
    """The schema the fence tables live in."""
    _check_name("schema", value)
    if len(value) > 63:
        raise UsageError(f"schema name {value!r} is longer than PostgreSQL's 63-byte limit")
    return value


_PACKAGE = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    installed = _PACKAGE / "_data" / name
    if installed.is_dir():
        return installed
    checkout = _PACKAGE.parent / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"fencemigrate data directory {name!r} is missing from the installation")


def sql_dir() -> Path:
    """The ``sql/`` directory: extension control file, install scripts, queries."""
    return _data_dir("sql")


def template_dir() -> Path:
    """The ``alembic_template/`` directory used by ``fencemigrate init``."""
    return _data_dir("alembic_template")


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
