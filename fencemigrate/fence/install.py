"""Two roles on PostgreSQL: the fence owned by one role, migrations run by another
(``fencemigrate install --grant-to ROLE``; see grant_to_migration_role() in the fence schema).

``fencemigrate install``: the fence schema, its guards, the version table's guard and the grants,
through env.py's connection; or the script that installs the schema. What it did, for its text and
``--json`` output.

An installed schema's guard triggers that were dropped are created again from the install scripts
of the installed version; on PostgreSQL one that was disabled (``ALTER TABLE ... DISABLE
TRIGGER``) is enabled again. A trigger changed into something else, or a replaced function, is
left to ``check --db`` (FM405) and to whoever changed it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from ..alembic_internals import per_migration_transaction
from ..config import default_holder
from ..dialects import dialect_for, ensure_installed, installed_version
from ..dialects.statements import statement
from ..errors import UsageError
from .adoption import adopt_applied_history
from .guard import VersionTable, allow_tokenless_writes, forbid_tokenless_writes, guard_first_write
from .objects import installed_fence_objects

if TYPE_CHECKING:
    from .adoption import Adoption


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
    role could drop its guard trigger, then write without a token), as the ``version_table_owner`` statement
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


@dataclass
class InstallOutcome:
    """``installed``: the fence schema was installed now (else it was there already);
    ``restored``: one line per guard trigger put back; ``tokenless_writes``: "allowed" or
    "refused" when ``--allow-`` / ``--forbid-tokenless-writes`` changed it; ``granted``: what
    ``--grant-to`` granted; ``adopted``: what the version table applied before fencing, adopted now;
    ``sql``: the install script (``--sql``; nothing else is set)."""

    installed: bool = False
    restored: list[str] = field(default_factory=list)
    tokenless_writes: str | None = None
    granted: str | None = None
    adopted: Adoption | None = None
    sql: str | None = None

    def text(self) -> str:
        """The lines ``install`` prints (with ``--sql``: the script)."""
        if self.sql is not None:
            return self.sql
        head = "installed" if self.installed else "already installed"
        if self.tokenless_writes == "allowed":
            head += "; writes to the version table without a fencing token are allowed (opted out)"
        elif self.tokenless_writes == "refused":
            head += "; writes to the version table without a fencing token are refused"
        adopted = [] if self.adopted is None else self.adopted.lines()
        return "\n".join([head, *adopted, *self.restored, *([self.granted] if self.granted is not None else [])])

    def as_json(self) -> dict[str, Any]:
        """JSON form, in ``install --json`` (with ``--sql``, on stderr: the script owns stdout)."""
        if self.sql is not None:
            return {"status": "ok", "offline": True}
        return {
            "status": "ok",
            "offline": False,
            "installed": self.installed,
            "restored": self.restored,
            "tokenless_writes": self.tokenless_writes,
            "granted": self.granted,
            "adopted": None if self.adopted is None else self.adopted.as_json(),
        }


def restore_guards(connection: Connection, quoted_schema: str, version: str) -> list[str]:
    """Recreate missing guard triggers and enable disabled ones; one line per trigger put back."""
    dialect = dialect_for(connection)
    expected = dialect.expected_fence_objects(quoted_schema, version) or []
    installed = installed_fence_objects(connection, quoted_schema)
    triggers = {item.name: item for item in expected if item.kind == "trigger"}
    done = dict.fromkeys(dialect.enable_disabled_triggers(connection, quoted_schema, set(triggers)), "disabled")
    for name, trigger in triggers.items():
        if ("trigger", name) not in installed and trigger.definition is not None:
            connection.exec_driver_sql(trigger.definition, execution_options={"no_parameters": True})
            done[name] = "missing"
    return [f"put back guard trigger {name} (it was {done[name]})" for name in sorted(done)]


def install_through(
    context: MigrationContext,
    schema: str,
    grant_to: str | None,
    tokenless_writes: str | None,
    outcome: InstallOutcome,
    resource: str,
) -> None:
    """Install the fence schema (or put back the guards of an installed one), guard Alembic's version
    table unless ``tokenless_writes`` is "allow", adopt what the version table applied before fencing
    (for ``resource``), and grant ``grant_to`` what it needs, in one transaction; what was done goes
    into ``outcome``."""

    assert context.connection is not None
    quoted = context.dialect.identifier_preparer.quote(schema)
    with per_migration_transaction(context):
        outcome.installed = ensure_installed(context.connection, quoted)
        if not outcome.installed:
            version = installed_version(context.connection, quoted)
            assert version is not None
            outcome.restored = restore_guards(context.connection, quoted, version)
        relation = VersionTable.of(context).relation(context)
        # The version table's owner can drop its guard: with two roles, the fence's owner owns it.
        taken_from = None if grant_to is None else take_version_table(context.connection, quoted, grant_to, relation)
        if tokenless_writes == "allow":
            allow_tokenless_writes(context, quoted)
            outcome.tokenless_writes = "allowed"
        else:
            if tokenless_writes == "forbid":
                forbid_tokenless_writes(context, quoted)
                outcome.tokenless_writes = "refused"
            guard_first_write(context, quoted)
        outcome.adopted = adopt_applied_history(context, quoted, resource, default_holder())
        if grant_to is not None:
            outcome.granted = grant_to_migration_role(context.connection, quoted, grant_to, relation, taken_from)
