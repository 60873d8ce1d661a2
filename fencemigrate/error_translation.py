"""Database and Alembic errors turned into fencemigrate's outcomes, for every layer that talks to a
database (runs, the lease service, read-only commands)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from alembic.util import CommandError
from sqlalchemy.exc import DBAPIError, NoSuchModuleError, SQLAlchemyError

from .connections import is_driver_error
from .errors import DatabaseError, FencemigrateError, UsageError, from_database_error, sqlstate_of
from .scrub import scrub_secrets


class KnowsToken(Protocol):
    """Where a run's token is read when an error is raised (``runtime.run_token.TokenSource``)."""

    @property
    def token(self) -> int | None: ...


@contextmanager
def translated_errors(resource: str = "", tokens: KnowsToken | None = None) -> Iterator[None]:
    """Turn database and Alembic errors into fencemigrate outcomes (FENCED by its SQLSTATE); a FENCED
    without the claim's own detail names the token ``tokens`` holds when it is raised."""
    try:
        yield
    except FencemigrateError:
        raise
    except DBAPIError as error:
        mapped = from_database_error(error, resource, _fallback_token(tokens))
        if mapped is not None:
            raise mapped from None
        raise DatabaseError(_one_line(error)) from None
    except NoSuchModuleError as error:
        raise UsageError(unknown_url_scheme(error)) from None
    except SQLAlchemyError as error:
        raise DatabaseError(_one_line(error)) from None
    except CommandError as error:
        raise FencemigrateError(scrub_secrets(str(error))) from None
    except Exception as error:
        # The fence calls and the named locks go straight to the driver: FENCED and the others are
        # told by their SQLSTATE; one without (a lost session, any on MySQL) is a database error.
        if sqlstate_of(error) is None and not is_driver_error(error):
            raise
        mapped = from_database_error(error, resource, _fallback_token(tokens))
        raise (mapped or DatabaseError(_one_line(error))) from None


def unknown_url_scheme(error: NoSuchModuleError) -> str:
    """Bad config: the database URL names a dialect or driver SQLAlchemy cannot load (its message
    names the plugin, ``sqlalchemy.dialects:postgres``, never the URL's password)."""
    plugin = str(error).rpartition(":")[2].strip()
    scheme = plugin.replace(".", "+")
    name, _, driver = plugin.partition(".")
    if name == "postgres":
        return (
            f"bad database URL: SQLAlchemy has no dialect {scheme}:// (it dropped the postgres spelling in 1.4); "
            f"write postgresql+{driver or 'psycopg'}:// instead"
        )
    return f"bad database URL: SQLAlchemy cannot load the dialect or driver of {scheme}:// (is its driver installed?)"


def _fallback_token(tokens: KnowsToken | None) -> int:
    """The token a FENCED error names when the database's detail does not (0: none is known)."""
    token = tokens.token if tokens is not None else None
    return 0 if token is None else token


def _one_line(error: BaseException) -> str:
    original = getattr(error, "orig", None) or error
    text = str(original).strip().splitlines()
    first = text[0] if text else type(original).__name__
    return "database error: " + scrub_secrets(first)
