"""What fencemigrate needs of a database, one subclass per dialect, found by name; and the fence
schema on whichever database a connection is to (its version, its install).

As Alembic's ``ddl/impl.py`` finds its impls: a subclass that names its SQLAlchemy dialect in
``__dialect__`` registers itself, and :func:`dialect_for` finds it (MariaDB is MySQL's). Code
elsewhere asks the dialect instead of comparing dialect names. A dialect's module is imported the
first time a database of its kind is met (:data:`_MODULES`): a run on PostgreSQL never loads MySQL's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from alembic.runtime.migration import MigrationContext
from sqlalchemy import URL, Connection, Engine, RootTransaction

from ..errors import DatabaseError, UsageError, refused_step, register_error_reader
from .statements import statement
from .waits import UNHEARD, LockProgress, WaitBound

if TYPE_CHECKING:
    from .fence_calls import FenceCalls


TRANSACTIONAL = "transactional"
PRECHECK = "precheck"
MODES = (TRANSACTIONAL, PRECHECK)

_registry: dict[str, type[Dialect]] = {}
#: The module (in this package) of every SQLAlchemy dialect name fencemigrate fences.
_MODULES = {"postgresql": "postgresql", "sqlite": "sqlite", "mysql": "mysql", "mariadb": "mysql"}


@dataclass(frozen=True)
class FenceObject:
    """A table, trigger or function of the fence schema; ``definition`` is None for a table."""

    kind: str
    name: str
    definition: str | None = None
    enabled: bool = True


@dataclass(frozen=True)
class SchemaScripts:
    """One database's fence schema scripts in ``directory``, laid out as ``CREATE EXTENSION`` reads
    them: a version's full install script ``fencemigrate--<v>.sql`` and the upgrade scripts
    ``fencemigrate--<a>--<b>.sql``. ``version`` is the one installed here. Every database installs
    and upgrades through it; tests point it at a directory of their own."""

    directory: Path
    version: str

    def paths(self, start: str | None, target: str | None = None) -> list[Path] | None:
        """The scripts that bring the fence schema from ``start`` (None: not installed) to ``target``
        (:attr:`version`), in order. A fresh install is the target's full script when there is one,
        else the newest full script with upgrades leading to the target, then those upgrades. None
        when no scripts lead there."""
        target = target or self.version
        if start is not None:
            return self._upgrades(start, target)
        if (self.directory / f"fencemigrate--{target}.sql").is_file():
            return [self.directory / f"fencemigrate--{target}.sql"]
        full = (path.name[len("fencemigrate--") : -len(".sql")] for path in self.directory.glob("fencemigrate--*.sql"))
        for base in sorted((name for name in full if "--" not in name), key=_version_key, reverse=True):
            upgrades = self._upgrades(base, target)
            if upgrades is not None:
                return [self.directory / f"fencemigrate--{base}.sql", *upgrades]
        return None

    def texts(self, start: str | None, target: str | None = None) -> list[str] | None:
        """The text of each of :meth:`paths`."""
        paths = self.paths(start, target)
        return None if paths is None else [path.read_text(encoding="utf-8") for path in paths]

    def _upgrades(self, start: str, target: str) -> list[Path] | None:
        steps: dict[str, tuple[str, Path]] = {}
        for path in self.directory.glob("fencemigrate--*--*.sql"):
            source, step_target = path.name[len("fencemigrate--") : -len(".sql")].split("--")
            steps[source] = (step_target, path)
        chain: list[Path] = []
        version = start
        while version != target:
            if version not in steps or len(chain) > len(steps):
                return None
            version, path = steps[version]
            chain.append(path)
        return chain


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def refuse_pre_release(quoted_schema: str, found: str, version: str, removal: str) -> None:
    """Refuse a fence schema at ``found`` when a pre-release of fencemigrate installed it (0.x): fence
    schema 1.0 squashed those versions and upgrades none of them. ``removal``: how to drop it here."""
    if _version_key(found) >= (1, 0):
        return
    raise DatabaseError(
        f"fence schema {quoted_schema} is at version {found}, from a pre-release of fencemigrate: this "
        f"fencemigrate installs {version} and does not upgrade pre-release fence schemas. Stop every writer, "
        f"remove the fence schema ({removal}) and run `fencemigrate install`, which adopts what the version "
        "table has applied (docs/adopting.md, A pre-release fence schema). Nothing was changed"
    )


class GuardedTable(Protocol):
    """Alembic's version table as the guard names it (``fence.guard.VersionTable``)."""

    @property
    def name(self) -> str:
        """The ledger's name for it: ``schema.table`` or ``table``."""

    @property
    def table(self) -> str:
        """The table's own name."""

    def relation(self, context: MigrationContext) -> str:
        """The table's quoted, schema-qualified name."""


class Dialect(ABC):
    """One database fencemigrate fences: its fence schema, fence calls, modes, guard and times.

    Subclasses set ``__dialect__`` (the SQLAlchemy dialect name, which also names its file of
    ``sql/queries/``) and register themselves; ``aliases`` are other SQLAlchemy names they serve.
    """

    __dialect__: ClassVar[str]
    aliases: ClassVar[tuple[str, ...]] = ()
    display_name: ClassVar[str]
    """How messages name the database."""
    prefixes_tables: ClassVar[bool] = False
    """The fence tables are named ``<schema>_<table>`` beside the application's, not in a schema of their own."""
    default_mode: ClassVar[str] = TRANSACTIONAL
    refused_modes: ClassVar[dict[str, str]] = {}
    """``--mode`` values this database cannot run, with the reason given."""
    commits_ddl: ClassVar[bool] = False
    """Every DDL statement commits the open transaction (MySQL): a pre-check mark is committed so."""
    writes_precheck_scripts: ClassVar[bool] = False
    """``--sql`` in pre-check mode writes a script that checks and marks as the runner does (MySQL)."""
    replication_known: ClassVar[bool] = False
    """The server tells whether a COMMIT waits for a synchronous standby, and its incarnation, which
    changes when a standby is promoted (PostgreSQL)."""
    returning_updates: ClassVar[bool] = False
    """A lease renew or release changes the lease row and returns it in one statement (RETURNING)."""
    grants_to_roles: ClassVar[bool] = False
    """The fence schema can be owned by one role and used by another (``install --grant-to``)."""
    can_preempt: ClassVar[bool] = True
    """A grant can cancel another session's migration (``--preempt``)."""
    shell_scripts: ClassVar[bool] = False
    """A --sql script runs in the database's shell (sqlite3), and starts with its settings."""
    renews_in_migration_transaction: ClassVar[bool] = False
    """A run's lease is renewed inside the migration's own transaction (SQLite's single writer)."""
    context_options: ClassVar[dict[str, Any]] = {}
    """``EnvironmentContext.configure`` defaults for a connection to this database."""
    tracks_dirty: ClassVar[bool] = True
    """The ledger has a ``state``: pre-check mode leaves revisions dirty here."""
    records_tokenless_writes: ClassVar[bool] = False
    """The fence schema records the version-table writes its guard refused (MySQL)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__dialect__" in vars(cls):
            for name in (cls.__dialect__, *cls.aliases):
                _registry[name] = cls
            register_error_reader(cls)

    @property
    def name(self) -> str:
        """The SQLAlchemy dialect name (``mysql`` for MariaDB too)."""
        return self.__dialect__

    # -- its driver's errors (read by :mod:`fencemigrate.errors`) ----------------------------

    @classmethod
    def read_only_reason(cls, error: BaseException) -> str | None:
        """Why this database refused ``error``'s write as read-only (:func:`~fencemigrate.errors.read_only_words`);
        None when it is another error."""
        return None

    @classmethod
    def is_lock_contention(cls, error: BaseException) -> bool:
        """Whether ``error`` is this database's lock wait running out or deadlock broken."""
        return False

    @classmethod
    def refusal_words(cls, error: BaseException) -> tuple[str | None, str | None]:
        """The message and DETAIL of a refusal this database's driver raised (``error``, the driver's
        own), where the driver keeps them apart from its text; (None, None) elsewhere."""
        return None, None

    # -- the fence schema ------------------------------------------------------------------

    @abstractmethod
    def schema_scripts(self) -> SchemaScripts:
        """The fence schema scripts shipped for this database (in ``sql/``)."""

    def schema_version(self) -> str:
        """The fence schema version this fencemigrate installs here."""
        return self.schema_scripts().version

    @abstractmethod
    def installed_version(self, connection: Connection, quoted_schema: str) -> str | None:
        """The fence schema version in the database, or None when it is not installed."""

    @abstractmethod
    def ensure_installed(
        self, connection: Connection, quoted_schema: str, scripts: SchemaScripts | None = None
    ) -> bool:
        """Install (or upgrade) the fence schema inside the caller's transaction unless current, from
        ``scripts`` (:meth:`schema_scripts`). True if it ran."""

    @abstractmethod
    def offline_install_script(self, schema: str) -> str:
        """The install script to run by hand with this database's own client."""

    @abstractmethod
    def expected_fence_objects(self, quoted_schema: str, version: str) -> list[FenceObject] | None:
        """The tables, triggers and functions fencemigrate's scripts create at ``version`` (None: unknown)."""

    @abstractmethod
    def fence_object_parameters(self, quoted_schema: str) -> dict[str, str]:
        """The parameters of the ``check_fence_objects`` statement, which lists the installed ones."""

    def enable_disabled_triggers(self, connection: Connection, quoted_schema: str, triggers: set[str]) -> list[str]:
        """Enable those of ``triggers`` that were disabled; their names (only PostgreSQL disables triggers)."""
        return []

    # -- runs ------------------------------------------------------------------------------

    @abstractmethod
    def grant_locks(self, connection: Connection, quoted_schema: str) -> GrantLocks:
        """The transactions and waits of a lease service's grants on its own ``connection``."""

    @abstractmethod
    def fence_calls(self, context: MigrationContext, quoted_schema: str) -> FenceCalls:
        """The claim, re-apply check and ledger writes for a run on ``context``."""

    def mode(self, requested: str | None) -> str:
        """The mode of a run here: ``requested``, else the default; UsageError if it cannot run here."""
        if requested in self.refused_modes:
            raise UsageError(self.refused_modes[requested])
        return requested or self.default_mode

    def autocommits(self, connection: Connection) -> bool:
        """True when the DBAPI connection commits every statement on its own."""
        dbapi_connection = connection.connection.dbapi_connection
        assert dbapi_connection is not None
        return bool(connection.dialect.detect_autocommit_setting(dbapi_connection))

    def managed_transactions(self) -> AbstractContextManager[None]:
        """What connections opened inside need for fencemigrate's transactions (nothing unless told)."""
        return nullcontext()

    def notifying_driver(self, connection: Connection) -> Any:
        """The driver connection under ``connection`` when it can wait for notifications (``LISTEN``),
        else None: a lease waiter then polls."""
        return None

    def session_id(self, connection: Connection) -> int | None:
        """The server's id of ``connection``'s session, where a ``KILL`` takes one (None elsewhere)."""
        return None

    def cancel_statement(self, engine: Engine, session_id: int) -> None:  # noqa: B027 (a hook)
        """After a stop signal cut a statement short on the client: end it on the server, which would
        otherwise run it to the end, DDL included, after the run has gone (``session_id``: what
        :meth:`session_id` read before). Nothing by default: psycopg cancels its own on PostgreSQL;
        SQLite runs in-process."""

    def scratch_database(self, server: URL, name: str) -> AbstractContextManager[str] | None:
        """A database ``name`` of its own on the server at ``server``, made empty and dropped after
        (``fencemigrate demo --url``), as the URL of it; None where fencemigrate makes none."""
        return None

    # -- the version table's guard ---------------------------------------------------------

    def guarding_turns(self, connection: Connection, quoted_schema: str) -> AbstractContextManager[None]:
        """Held while a first write creates and guards the version table: concurrent first runs take
        turns where the guard is DDL that commits on its own (MySQL); nothing elsewhere."""
        return nullcontext()

    @abstractmethod
    def guard_version_table(self, context: MigrationContext, quoted_schema: str, table: GuardedTable) -> None:
        """Put the guard on ``table`` unless it is there, the table does not exist yet, or tokenless
        writes were allowed. In the caller's transaction; offline, written to the script."""

    @abstractmethod
    def allow_tokenless_writes(self, context: MigrationContext, quoted_schema: str, table: GuardedTable) -> None:
        """Record that ``table`` takes writes without a token and remove its guard."""

    @abstractmethod
    def forbid_tokenless_writes(self, context: MigrationContext, quoted_schema: str, table: GuardedTable) -> None:
        """Forget the opt-out and guard ``table`` again (once it exists)."""

    @abstractmethod
    def guard_state(self, context: MigrationContext, quoted_schema: str, table: GuardedTable) -> tuple[Any, bool]:
        """When tokenless writes were allowed (None: never), and whether ``table`` is guarded now."""

    def mark_version_write(self, connection: Connection, quoted_schema: str) -> None:  # noqa: B027 (a hook)
        """Before a fenced run writes the version table: let the guard know (SQLite; nothing elsewhere)."""

    def clear_version_write(self, connection: Connection, quoted_schema: str) -> None:  # noqa: B027 (a hook)
        """After the version row is written: writes without a mark are refused again (SQLite)."""

    def wait_at_begins(self, resource: str, bound: WaitBound | None) -> None:  # noqa: B027 (a hook)
        """A fenced run's BEGINs, from its mode's choice to its end (``bound`` None): where BEGIN itself
        waits for another writer (SQLite's write lock), they wait within ``bound`` in slices that
        report it; elsewhere the claim waits instead (:meth:`FenceCalls.wait_for_fence`)."""

    def register_resource(  # noqa: B027 (a hook)
        self, connection: Connection, quoted_schema: str, resource: str, bound: WaitBound | None, token: int
    ) -> None:
        """Before a run's first claim under ``token``, in a transaction that commits before it:
        PostgreSQL gives ``resource`` its advisory lock key, so that a grant of another resource finds
        it taken (waiting within ``bound`` for a first claim of it in flight)."""

    # -- times -----------------------------------------------------------------------------

    def utc(self, value: datetime | str) -> datetime:
        """A time the database returned, in UTC: a datetime with a zone (PostgreSQL), one without
        that is UTC (MySQL's DATETIME) or ISO-8601 text (SQLite)."""
        moment = datetime.fromisoformat(value) if isinstance(value, str) else value
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)

    def time_text(self, value: datetime | str) -> str:
        """ISO 8601 text of a time the database returned, for ``state``; text as the database wrote it."""
        return value if isinstance(value, str) else self.utc(value).isoformat()

    def time_param(self, moment: datetime) -> datetime | str:
        """``moment`` as a statement parameter compared with (or stored as) this database's times."""
        return moment


LEASE_ROW_WAIT_MS = 5000
"""How long ``lease renew``, ``release`` and ``status`` (no ``--wait`` of their own) wait for a lock
held by another lease transaction (PostgreSQL, MySQL): then busy."""
PREEMPT_GRACE_MS = 5000
"""With ``--preempt``, how long a grant waits at least for the sessions it ended to be gone."""
STUCK_LEASE_TRANSACTION_MS = 1000
"""Idle this long inside a lease transaction: its process is not running (``--preempt`` ends it)."""
SYNCHRONOUS_WAIT_FLOOR_MS = 5000
"""A lease transaction's COMMIT waits at least this long for a synchronous standby."""
IN_FLIGHT = (
    "a migration under an older token is still in flight (its holder's lease has expired); "
    "wait for it, or pass --preempt to cancel it"
)


class GrantLocks(ABC):
    """A lease service's transactions on its own connection, and the waits of its grants: for
    in-flight writers, for other grants, for a stuck lease transaction. One subclass per dialect
    (:meth:`Dialect.grant_locks`); what a grant does in them is the lease service's
    (``fencemigrate.leases``)."""

    def __init__(self, connection: Connection, quoted_schema: str) -> None:
        self._connection = connection
        self._schema = quoted_schema
        self.waited_for_writer = False
        """Whether the last :meth:`transaction` began only after another writer finished (SQLite):
        that writer may have done what the grant's caller came to do."""
        self.commit_cut_short = False
        """Whether the last :meth:`transaction`'s COMMIT stopped waiting for a synchronous standby
        before one confirmed it (PostgreSQL): committed on the primary only."""
        self.progress: LockProgress = UNHEARD
        """Hears a grant's wait for an in-flight writer (:meth:`lock_fence`, SQLite's BEGIN): set by
        the lease service for the grant it makes."""

    @abstractmethod
    def install(self) -> None:
        """When the lease service opens: install the fence schema unless it is current."""

    @abstractmethod
    def transaction(self, resource: str, wait_ms: int | None = None) -> AbstractContextManager[RootTransaction]:
        """A transaction of the lease connection. A grant passes ``wait_ms``, what is left of
        ``--wait``: LeaseBusy when another writer holds the database longer (SQLite)."""

    @contextmanager
    def in_transaction(self, resource: str, within: Connection | None = None) -> Iterator[Connection]:
        """The connection for a lease operation, in a transaction: ``within``, in its owner's open
        transaction (which its owner commits), or else the lease connection in one of its own."""
        if within is not None:
            yield within
            return
        with self.transaction(resource):
            yield self._connection

    def enter_lease(self, resource: str, remaining_ms: int, preempt: bool) -> tuple[int, ...] | None:
        """Before a grant, renew or release touches the lease row: with ``preempt``, end the lease
        transactions stuck on it (:meth:`cancel_stuck_lease_transactions`); their session ids.
        None when another lease transaction keeps the lease longer than ``remaining_ms`` (MySQL)."""
        return self.cancel_stuck_lease_transactions(resource, remaining_ms) if preempt else ()

    def cancel_stuck_lease_transactions(self, resource: str, remaining_ms: int) -> tuple[int, ...]:
        """``--preempt``: end the lease transactions stuck on ``resource`` (their process paused with the
        lease row changed or locked) while the lease has no live holder; their backend pids.

        PostgreSQL here; MySQL in :meth:`enter_lease` (by the lease lock); SQLite refuses ``--preempt``.
        """
        return ()

    def cancel_stuck_grants(self, resource: str, remaining_ms: int) -> tuple[int, ...]:
        """``--preempt`` by a grant holding the Redis lease key (no other lease on ``resource`` is
        live): end the other grants' transactions stuck in :meth:`serialise_grants` (their process
        paused); their backend pids. PostgreSQL; on MySQL :meth:`lock_fence` kills whoever holds the
        resource's named lock, a stuck grant too; SQLite refuses ``--preempt``."""
        return ()

    def check_before_grant(self, resource: str, check: Callable[[Connection], None]) -> None:
        """Run ``check`` (a refusal by the resource's token source) in a short transaction of its
        own before a grant's, so that a grant it refuses waits for no migration and preempts nobody.
        The grant checks again once it has locked the fence (``fence.tokens.recorded_source``)."""
        with self.transaction(resource):
            check(self._connection)

    def check_clock(self) -> None:  # noqa: B027 (a hook: most dialects have nothing to check)
        """Before the built-in service grants on this database's clock: ImplausibleClock when that
        clock cannot be trusted. A server's clock (PostgreSQL, MySQL) is everyone's: nothing to check."""

    @abstractmethod
    def serialise_grants(self, resource: str, remaining_ms: int) -> None:
        """Make other grants of ``resource`` wait until this transaction ends (a lease service
        with no lease row to lock: Redis). LeaseBusy after ``remaining_ms``."""

    @abstractmethod
    def lock_fence(self, resource: str, remaining_ms: int, preempt: bool) -> tuple[int | None, tuple[int, ...]]:
        """Wait for the in-flight migration on ``resource``; returns the fence token (None before the
        first claim) and the backend pids of the stale writers cancelled. LeaseBusy when the wait
        runs out."""

    def record_redis_grant(self, resource: str, token: int) -> None:
        """Before a Redis grant's fence advance, in its transaction: record ``token`` as the last token
        Redis issued for ``resource`` (the ``record_redis_grant`` statement, never lowered), which the
        lease guard holds a Redis-sourced fence to."""
        self._run("record_redis_grant", resource=resource, token=token)

    def _run(self, name: str, **params: Any) -> Any:
        return self._connection.execute(statement(name, self._schema, self._connection.dialect.name), params)


def dialect_named(name: str | None) -> Dialect | None:
    """The dialect of the SQLAlchemy dialect ``name``; None when fencemigrate does not know it."""
    return dialect_for(name) if name in _MODULES else None


def dialect_for(database: str | Connection | Engine | MigrationContext) -> Dialect:
    """The dialect of ``database`` (a SQLAlchemy dialect name, or what has one); UsageError when
    fencemigrate does not know it."""
    name = database if isinstance(database, str) else database.dialect.name
    if name not in _MODULES:
        raise UsageError(
            f"fencemigrate does not support the {name!r} database: it fences {', '.join(sorted(_MODULES))}"
        )
    if name not in _registry:
        import_module(f"{__package__}.{_MODULES[name]}")  # registers its class
    return _instance(_registry[name])


@cache
def _instance(cls: type[Dialect]) -> Dialect:
    return cls()


def installed_version(connection: Connection, quoted_schema: str) -> str | None:
    """The fence schema version in the database, or None when it is not installed."""
    return dialect_for(connection).installed_version(connection, quoted_schema)


def ensure_installed(connection: Connection, quoted_schema: str) -> bool:
    """Install (or update) the fence schema inside the caller's transaction unless current. True if it ran.
    A read-only database's refusal is :class:`~fencemigrate.errors.ReadOnlyDatabase`."""
    with refused_step("the install of the fence schema"):
        return dialect_for(connection).ensure_installed(connection, quoted_schema)


def offline_install_script(backend: str | None, schema: str) -> str:
    """The install script to run by hand for the database ``backend`` names (SQLAlchemy's backend
    name; PostgreSQL's psql when None): for the sqlite3 shell on SQLite, the mysql client on MySQL
    and MariaDB."""
    return dialect_for(backend or "postgresql").offline_install_script(schema)
