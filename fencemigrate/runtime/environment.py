"""Run the project's own env.py with a fenced migration function: the one place connections open."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from alembic.config import Config
from alembic.runtime.environment import EnvironmentContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from ..errors import DatabaseError, FencemigrateError, from_database_error
from ..scrub import scrub_secrets

FENCED_RUN_ATTRIBUTE = "fencemigrate.run"
"""``config.attributes`` key telling the fence-aware env.py template that fencing is on."""


def run_env(
    config: Config,
    script: ScriptDirectory,
    fn: Callable[..., Any],
    *,
    resource: str = "",
    token: int = 0,
    single_transaction: bool = False,
    **context_options: Any,
) -> bool:
    """Run env.py with ``fn`` as Alembic's migration function; map failures to our outcomes.

    With ``single_transaction``, ``transaction_per_migration=True`` from env.py is overridden;
    returns True when that happened.
    """
    context = EnvironmentContext(config, script, fn=fn, **context_options)
    forced: list[bool] = []
    if single_transaction:
        _force_one_transaction(context, forced)
    with translated_errors(resource, token), context:
        script.run_env()
    return bool(forced)


def _force_one_transaction(context: EnvironmentContext, forced: list[bool]) -> None:
    """Make env.py's configure() run every step in the one outer transaction."""
    configure = context.configure

    def configure_one_transaction(*args: Any, **kw: Any) -> None:
        if kw.get("transaction_per_migration"):
            kw["transaction_per_migration"] = False
            forced.append(True)
        configure(*args, **kw)

    context.configure = configure_one_transaction  # type: ignore[method-assign]


@contextmanager
def translated_errors(resource: str = "", token: int = 0) -> Iterator[None]:
    """Turn database and Alembic errors into fencemigrate outcomes (FENCED by its SQLSTATE)."""
    try:
        yield
    except FencemigrateError:
        raise
    except DBAPIError as error:
        mapped = from_database_error(error, resource, token)
        if mapped is not None:
            raise mapped from None
        raise DatabaseError(_one_line(error)) from None
    except SQLAlchemyError as error:
        raise DatabaseError(_one_line(error)) from None
    except CommandError as error:
        raise FencemigrateError(scrub_secrets(str(error))) from None


def _one_line(error: BaseException) -> str:
    original = getattr(error, "orig", None) or error
    text = str(original).strip().splitlines()
    first = text[0] if text else type(original).__name__
    return "database error: " + scrub_secrets(first)
