"""Every statement the package loads from ``sql/queries/<dialect>.sql`` exists for each dialect that
runs it, no statement is left unused or written twice, and the advisory-lock keys are named once.

Statements are loaded by name with :func:`fencemigrate.dialects.statements.statement` (``name``, the fence
schema, the dialect: PostgreSQL when none is given), directly or through a function that passes
its own parameter on as the name (``self._run("lease_peek")``). This test reads the package's
source (``ast``), finds those functions and every call of them, and the statement names each call
can load (a string, either string of a conditional, a local variable set to those, the default of
the parameter). A call with a literal dialect runs there; a call with the connection's dialect runs
where its code is for (a module ``sqlite.py``, a class ``SqliteGrantLocks``), else on every
database, unless ``RUNS_ONLY_ON`` says which ones the code around it serves.

The advisory-lock keys: ``sql/advisory_locks.conf`` names them, the PostgreSQL statements use the
names, and the extension scripts (read by CREATE EXTENSION as they are) spell out those keys only.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.pool import NullPool
from support.project import MakeProject

import fencemigrate
from fencemigrate.config import sql_dir
from fencemigrate.dialects import dialect_for
from fencemigrate.dialects.postgresql import default_version
from fencemigrate.dialects.statements import advisory_lock_keys, sections, statement, statements_of

PACKAGE = Path(fencemigrate.__file__).resolve().parent
QUERIES = sql_dir() / "queries"
DIALECTS = frozenset({"postgresql", "sqlite", "mysql"})
LOADER = "statement"

# Statements loaded with the connection's dialect from code that runs on some databases only
# (the code around the call says so; everything else loaded this way runs on all three).
_PRECHECK = frozenset({"postgresql", "mysql"})  # pre-check mode, dirty revisions, resolve: not SQLite
_PREFIXED = frozenset({"sqlite", "mysql"})  # prefixed tables, no stored functions
RUNS_ONLY_ON: dict[str, frozenset[str]] = {
    "grant_replication": frozenset({"postgresql"}),  # state: how a grant was replicated (schema 0.6)
    # Plain statements where PostgreSQL calls the fence's functions (claim(), record_apply(), ...).
    "applied_token": _PREFIXED,
    "record_stamp": _PREFIXED,
    "seed_fence": _PREFIXED,
    "unguard_version_table": _PREFIXED,  # PostgreSQL: allow_tokenless_writes() drops its trigger
    "lease_held": _PREFIXED,  # renew / release without RETURNING
    "record_redis_grant": _PREFIXED,  # PostgreSQL: the Redis grant's advance_fence() records it
    "begin_apply": _PRECHECK,
    "begin_rollback": _PRECHECK,
    "forget_revision": _PRECHECK,
    "named_lock": _PRECHECK,
    "named_lock_holder": _PRECHECK,
    "named_lock_name": _PRECHECK,
    "named_lock_release": _PRECHECK,
    "named_lock_session": _PRECHECK,
    "preempt_writer": _PRECHECK,  # a grant's --preempt on MySQL; a pre-check run's, with --token
    "settle_revision": _PRECHECK,
    "unsettled_revisions": _PRECHECK,
    # MySQL: a mark is settled by its own statement (PostgreSQL: record_steps()), and a refused
    # write without a token is recorded in a MyISAM table.
    "settle_apply": frozenset({"mysql"}),
    "settle_rollback": frozenset({"mysql"}),
    "rollback_detail": frozenset({"mysql"}),  # the ROLLBACK event's detail, for the ledger trigger
    "forget_tokenless_write": frozenset({"mysql"}),
    "tokenless_writes": frozenset({"mysql"}),
}


@dataclass(frozen=True)
class Load:
    """A call that loads statement ``name`` on ``dialects`` (None: the connection's)."""

    name: str
    dialects: frozenset[str] | None
    where: str


def _callee(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return call.func.id if isinstance(call.func, ast.Name) else None


def _strings(node: ast.expr | None) -> set[str] | None:
    """The strings ``node`` can be (a literal, either branch of a conditional), None if not literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        body, orelse = _strings(node.body), _strings(node.orelse)
        return None if body is None or orelse is None else body | orelse
    return None


@dataclass(frozen=True)
class Loader:
    """A function that loads the statement its parameter names: ``statement`` itself or a wrapper."""

    index: int  # of the parameter, among the call's positional arguments
    parameter: str
    default: ast.expr | None
    dialects: frozenset[str] | None  # None: the connection's


@dataclass
class _Function:
    node: ast.FunctionDef
    owner: str  # "module:Class" for methods, "module" otherwise
    params: list[str]  # without self / cls
    defaults: dict[str, ast.expr]


_BASES: dict[str, list[str]] = {}  # class name -> the names of its bases


def _functions(tree: ast.Module, module: str) -> list[_Function]:
    found: list[_Function] = []

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                _BASES[child.name] = [ast.unparse(base).split(".")[-1] for base in child.bases]
                visit(child, f"{module}:{child.name}")
            elif isinstance(child, ast.FunctionDef):
                arguments = [*child.args.posonlyargs, *child.args.args]
                params = [a.arg for a in arguments]
                if owner != module and params and params[0] in ("self", "cls"):
                    params = params[1:]
                positional_defaults = dict(zip(reversed(params), reversed(child.args.defaults), strict=False))
                keyword_defaults = {
                    a.arg: d for a, d in zip(child.args.kwonlyargs, child.args.kw_defaults, strict=True) if d
                }
                found.append(
                    _Function(
                        child,
                        owner,
                        params + [a.arg for a in child.args.kwonlyargs],
                        positional_defaults | keyword_defaults,
                    )
                )
                visit(child, module)  # nested functions are called by their plain name
            else:
                visit(child, owner)

    visit(tree, module)
    return found


def _own_calls(function: ast.FunctionDef) -> list[ast.Call]:
    """The calls in ``function``'s body, not in the functions defined inside it."""
    calls: list[ast.Call] = []
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(node, ast.Call):
            calls.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return sorted(calls, key=lambda call: (call.lineno, call.col_offset))


def _assigned(function: ast.FunctionDef, variable: str) -> set[str] | None:
    """The strings the local ``variable`` of ``function`` is assigned (None: not only literals)."""
    values = [
        _strings(node.value)
        for node in ast.walk(function)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == variable for t in node.targets)
    ]
    names: set[str] = set()
    for value in values:
        if value is None:
            return None
        names |= value
    return names or None


_IMPORTS: dict[tuple[str, str], tuple[str, str]] = {}  # (module, name) -> (module defining it, its name)


def _record_imports(tree: ast.Module, module: str) -> None:
    """Note where each name a module imports from the package (``from .x import f``) is defined."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level and node.module:
            package = Path(module).parent
            for _ in range(node.level - 1):
                package = package.parent
            source = package.joinpath(*node.module.split("."))
            for alias in node.names:
                for candidate in (source.with_suffix(".py"), source / "__init__.py"):
                    if (PACKAGE / candidate).is_file():
                        _IMPORTS[(module, alias.asname or alias.name)] = (candidate.as_posix(), alias.name)


_DIALECT_WORDS = {"postgres": "postgresql", "sqlite": "sqlite", "mysql": "mysql", "mariadb": "mysql"}


def _dialect_of_code(owner: str) -> frozenset[str] | None:
    """The dialect a module (``dialects/sqlite.py``) or a class (``SqliteFenceOnGrant``) is for, if any."""
    module, _, cls = owner.partition(":")
    for word, dialect in _DIALECT_WORDS.items():
        if Path(module).stem.startswith(word) or cls.lower().startswith(word):
            return frozenset({dialect})
    return None


def _argument(call: ast.Call, index: int, name: str) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    return call.args[index] if index < len(call.args) else None


def collect_loads() -> list[Load]:
    """Every statement load in the package: its name and where it runs."""
    functions: list[_Function] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions += _functions(tree, module)
        _record_imports(tree, module)

    # loader key -> its statement-name parameter (index, name, default), its dialects (None: the connection's)
    loaders: dict[tuple[str, str], Loader] = {}

    def resolve(call: ast.Call, function: _Function) -> Loader | None:
        callee = _callee(call)
        if callee == LOADER and isinstance(call.func, ast.Name):
            dialect = _argument(call, 2, "dialect")
            literal = _strings(dialect) if dialect is not None else {"postgresql"}
            return Loader(0, "name", None, None if literal is None else frozenset(dialect_for(d).name for d in literal))
        if callee is None:
            return None
        if isinstance(call.func, ast.Attribute):
            if not (isinstance(call.func.value, ast.Name) and call.func.value.id in ("self", "cls")):
                # another object's method (``recorder.statement(...)``): a loader when no other method
                # in the package has that name
                named = [f for f in functions if f.node.name == callee and ":" in f.owner]
                return loaders.get((named[0].owner, callee)) if len(named) == 1 else None
            classes = [function.owner.partition(":")[2]]
            while classes:  # the method of the class, or of a base class
                name = classes.pop(0)
                found = next(
                    (v for (owner, f), v in loaders.items() if f == callee and owner.endswith(f":{name}")), None
                )
                if found:
                    return found
                classes += _BASES.get(name, [])
            return None
        module = function.owner.split(":")[0]
        source, name = _IMPORTS.get((module, callee), (module, callee))
        return loaders.get((source, name)) or loaders.get((f"{source}:{name}", "__init__"))  # a function, a class

    changed = True
    while changed:  # functions that pass their own parameter on as a statement name, to a fixpoint
        changed = False
        for function in functions:
            key = (function.owner, function.node.name)
            if key in loaders:
                continue
            for call in _own_calls(function.node):
                target = resolve(call, function)
                argument = target and _argument(call, target.index, target.parameter)
                if target and isinstance(argument, ast.Name) and argument.id in function.params:
                    default = function.defaults.get(argument.id)
                    loaders[key] = Loader(function.params.index(argument.id), argument.id, default, target.dialects)
                    changed = True
                    break

    loads: list[Load] = []
    for function in functions:
        for call in _own_calls(function.node):
            target = resolve(call, function)
            if target is None:
                continue
            argument = _argument(call, target.index, target.parameter)
            where = f"{function.owner.split(':')[0]}:{call.lineno}"
            dialects = target.dialects if target.dialects is not None else _dialect_of_code(function.owner)
            if isinstance(argument, ast.Name) and argument.id in function.params:
                continue  # a loader passing its parameter on: its callers' names are collected
            if argument is None:
                names = _strings(target.default)
            elif isinstance(argument, ast.Name):
                names = _assigned(function.node, argument.id)
            else:
                names = _strings(argument)
            assert names is not None, f"{where}: cannot tell which statement {ast.unparse(call)} loads"
            loads += [Load(name, dialects, where) for name in sorted(names)]
    return loads


LOADS = collect_loads()


def dialects_of(load: Load) -> frozenset[str]:
    if load.dialects is not None:
        return load.dialects
    return RUNS_ONLY_ON.get(load.name, DIALECTS)


def statement_names() -> set[tuple[str, str]]:
    """``(dialect, name)`` of every statement each dialect can load (SQLite and MySQL: with the shared ones)."""
    return {(dialect, name) for dialect in DIALECTS for name in statements_of(dialect)}


def test_the_query_files_are_one_per_database_and_one_shared() -> None:
    """Four files of named sections: no name twice in a file or in a database's file and the shared
    one (the reader refuses both), no statement written out twice across the files."""
    assert sorted(path.name for path in QUERIES.iterdir()) == [
        "mysql.sql",
        "postgresql.sql",
        "prefixed.sql",
        "sqlite.sql",
    ]
    texts: dict[str, list[str]] = defaultdict(list)
    for path in sorted(QUERIES.glob("*.sql")):
        # aiosql starts a section at every "-- name:" it finds: only the section lines may say it.
        assert len(re.findall(r"--\s*name\s*:", path.read_text(encoding="utf-8"))) == len(sections(path.stem))
        for name, text in sections(path.stem).items():
            assert re.fullmatch(r"[a-z][a-z0-9_]*", name), name
            code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--")).strip()
            assert code, f"{path.name}: {name} has no statement"
            texts[text].append(f"{path.stem}.{name}")
    assert [names for names in texts.values() if len(names) > 1] == []
    assert len(statement_names()) > 200


def test_the_package_loads_statements() -> None:
    """The collection sees the loads (a control for the tests below): direct, through wrappers, with
    a literal dialect, with the connection's."""
    names = {load.name for load in LOADS}
    assert {"claim", "lease_peek", "named_lock_release", "schema_version_unlocked", "fence_source"} <= names
    assert {"clock_lead", "kill_query"} <= names
    assert len(names) > 70


@pytest.mark.parametrize("load", LOADS, ids=lambda load: f"{load.name}@{load.where}")
def test_every_loaded_statement_exists_for_each_dialect_that_runs_it(load: Load) -> None:
    missing = sorted(dialect for dialect in dialects_of(load) if (dialect, load.name) not in statement_names())
    assert missing == [], f"{load.where} loads {load.name!r}, which sql/queries/ lacks for {', '.join(missing)}"


def test_no_statement_is_unused() -> None:
    """Each statement a dialect can load is loaded by some call that runs on that dialect."""
    used = {(dialect, load.name) for load in LOADS for dialect in dialects_of(load)}
    assert sorted(statement_names() - used) == []


def test_runs_only_on_names_only_statements_the_package_loads() -> None:
    assert sorted(set(RUNS_ONLY_ON) - {load.name for load in LOADS}) == []


# -- advisory-lock keys -------------------------------------------------------------------------

_KEY_IN_CALL = re.compile(r"\bpg_(?:try_)?advisory_\w+\(\s*(\d+)\s*,")
_KEY_IN_CLASSID = re.compile(r"\bclassid\s*=\s*(\d+)")


def test_the_extension_scripts_take_only_the_named_advisory_locks() -> None:
    """sql/advisory_locks.conf names every key; the extension scripts, which CREATE EXTENSION reads
    as they are, spell out only those, and the query files none (the loader puts them in)."""
    named = set(advisory_lock_keys().values())
    spelled: dict[str, set[str]] = defaultdict(set)
    for script in sorted(sql_dir().glob("fencemigrate--*.sql")):
        source = script.read_text(encoding="utf-8")
        for key in _KEY_IN_CALL.findall(source) + _KEY_IN_CLASSID.findall(source):
            spelled[key].add(script.name)
    assert spelled, "the extension scripts take advisory locks"
    assert sorted(set(spelled) - named) == []
    full = f"fencemigrate--{default_version()}.sql"
    assert {key for key, scripts in spelled.items() if full in scripts} == {
        advisory_lock_keys()["claim_lock_class"],
        advisory_lock_keys()["named_lock_class"],
    }

    for name, source in sections("postgresql").items():
        code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("--"))
        assert not _KEY_IN_CALL.search(code) and not _KEY_IN_CLASSID.search(code), name
        assert not re.search(r"hashtext\(\s*'", code), name  # a one-key lock spelled out


# Placeholders the code that loads the statement fills in itself: the fence schema (dialects/statements.py), the
# version table and its guard triggers (fence/guard.py), what a SQLite --sql script's checks say
# (fence_calls.py: SqliteScriptCalls).
FILLED_BY_THE_LOADER = {
    "schema",
    "database",  # the demo's scratch databases (dialects/postgresql.py)
    "version_table",
    "version_table_name",
    "insert_guard",
    "update_guard",
    "delete_guard",
    "resource",
    "heads",
    "schema_version",
}


def test_every_advisory_lock_key_is_used_and_every_placeholder_is_known() -> None:
    placeholders: set[str] = set()
    for path in sorted(QUERIES.glob("*.sql")):
        placeholders |= set(re.findall(r"\{(\w+)\}", path.read_text(encoding="utf-8")))
    keys = set(advisory_lock_keys())
    assert keys <= placeholders
    assert sorted(placeholders - keys - FILLED_BY_THE_LOADER) == []
    assert not keys & FILLED_BY_THE_LOADER


# -- information_schema on MariaDB --------------------------------------------------------------

_CATALOG_TABLE = re.compile(r"\binformation_schema\.(\w+)", re.IGNORECASE)


def catalog_reads() -> list[str]:
    """The MySQL statements that read an information_schema table other than PROCESSLIST."""
    return sorted(
        name
        for name, text in statements_of("mysql").items()
        if any(table.lower() != "processlist" for table in _CATALOG_TABLE.findall(text))
    )


def test_mariadb_reads_the_catalog_of_the_current_database_only(make_project: MakeProject, mysql_url: str) -> None:
    """Each information_schema read filters on a column MariaDB looks up (EXPLAIN: "Scanned 1
    database" or fewer). Filtering triggers on TRIGGER_SCHEMA has MariaDB open every database's
    triggers: slow on a server of many databases, and meanwhile PROCESSLIST shows the session in
    each of them (a control below)."""
    make_project(url=mysql_url).run_cli("install").check()
    names = catalog_reads()
    assert {"check_fence_objects", "version_guard_state"} <= set(names)
    engine = sa.create_engine(mysql_url, poolclass=NullPool)
    try:
        with engine.connect() as connection:

            def scans(sql: sa.TextClause) -> list[str]:
                """The "Scanned" notes of EXPLAIN for each part of ``sql`` that reads the catalog (a
                script's ``SET @v = expr`` as ``SELECT expr``)."""
                extras: list[str] = []
                for part in sql.text.split(";\n"):
                    if _CATALOG_TABLE.search(part):
                        query = sa.text("EXPLAIN " + re.sub(r"^SET @\w+ = ", "SELECT ", part.strip()))
                        params = {name: "x" for name in query.compile(dialect=connection.dialect).params}
                        rows = connection.execute(query, params).all()
                        extras += [str(row.Extra) for row in rows if "Scanned" in str(row.Extra)]
                return extras

            found = {name: scans(statement(name, "`fencemigrate`", "mysql")) for name in names}
            control = scans(
                sa.text(
                    "SELECT 1 FROM information_schema.triggers WHERE trigger_schema = DATABASE() AND trigger_name = :n"
                )
            )
    finally:
        engine.dispose()
    assert [extra for extra in control if "Scanned all databases" in extra] != []
    assert all(extras for extras in found.values()), found
    assert {name: extras for name, extras in found.items() if any("all databases" in e for e in extras)} == {}
