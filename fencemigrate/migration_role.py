"""Two roles on PostgreSQL: the fence owned by one role, migrations run by another
(``fencemigrate install --grant-to ROLE``; see grant_to_migration_role() in the fence schema)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from .dialects import dialect_for
from .errors import UsageError
from .queries import statement


def check_grant_to(role: str | None, backend: str | None, sql: bool) -> None:
    """Refuse ``--grant-to`` where it cannot work, before anything is touched (UsageError)."""
    if role is None:
        return
    if not role.strip():
        raise UsageError("--grant-to names no role")
    if sql:
        raise UsageError(
            "--grant-to changes the database and --sql only prints: run the printed script, then "
            "`SELECT <schema>.grant_to_migration_role('ROLE');` as the owner of the fence schema"
        )
    if backend is not None and not dialect_for(backend).grants_to_roles:
        raise UsageError(f"--grant-to is for PostgreSQL: {backend} has no roles that can own the fence apart")


def check_version_table_owner(connection: Connection, quoted_schema: str, role: str, version_relation: str) -> Any:
    """The version table ``version_relation`` when a role other than the fence's owner owns it (that
    role could drop its guard trigger, then write without a token), as ``version_table_owner.sql``
    reads it; None when the fence's owner does. A UsageError naming the one statement that gives it
    to the fence's owner when the installing role may not do that itself (nothing is changed)."""
    params = {"relation": version_relation, "quoted_schema": quoted_schema}
    row = connection.execute(statement("version_table_owner", quoted_schema), params).one_or_none()
    if row is not None and not row.can_take:
        raise UsageError(
            f"the version table {version_relation} belongs to {row.owner}, which could drop its guard and "
            f"write without a token: run `{row.statement};` as a superuser, then `fencemigrate install "
            f"--grant-to {role}` again (nothing was changed)"
        )
    return row


def take_version_table(connection: Connection, quoted_schema: str, role: str, version_relation: str) -> str | None:
    """Before the version table is guarded for ``role``: give it to the owner of the fence schema when
    another role owns it (:func:`check_version_table_owner`), in the caller's transaction; the role
    it was taken from (None: nothing to take)."""
    row = check_version_table_owner(connection, quoted_schema, role, version_relation)
    if row is None:
        return None
    connection.exec_driver_sql(row.statement, execution_options={"no_parameters": True})
    return str(row.owner)


def grant_to_migration_role(
    connection: Connection, quoted_schema: str, role: str, version_relation: str, taken_from: str | None = None
) -> str:
    """Grant ``role`` what fencemigrate's runs need, in the caller's transaction; the line to show.
    That is the fence schema's tables and functions, and the rows (not the table) of Alembic's
    version table ``version_relation`` when it exists (install created it as the owner, or took it
    from ``taken_from``: :func:`take_version_table`).

    An unknown role, a superuser, the owner itself or a caller who does not own the fence
    schema is a UsageError (the caller's transaction is then doomed: nothing is changed).
    """
    check_grant_to(role, connection.dialect.name, sql=False)
    try:
        connection.execute(statement("grant_to_migration_role", quoted_schema), {"role": role})
        grant = connection.execute(
            statement("grant_version_table", quoted_schema), {"relation": version_relation, "role": role}
        ).scalar_one_or_none()
        if grant is not None:
            connection.exec_driver_sql(grant, execution_options={"no_parameters": True})
    except DBAPIError as error:
        reason = str(error.orig).splitlines()[0] if error.orig is not None else str(error)
        raise UsageError(f"cannot grant to {role}: {reason}") from None
    taken = "" if taken_from is None else f" (the version table, {taken_from}'s until now, is the fence owner's)"
    return (
        f"granted {role} what fencemigrate runs need in the fence schema {quoted_schema}, "
        f"which it does not own, and the rows of the version table{taken}: it cannot switch the guard off"
    )
