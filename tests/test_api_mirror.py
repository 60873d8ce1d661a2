"""The Python API mirrors the command line: every command (``lease acquire`` too) is a function at
the package top level with the command's name (``lease_acquire``), whose parameters take every
option and argument of the command, as a parameter of its own or as a key of the typed options it
takes through ``**options: Unpack[...]``. The walk reads the click group itself, so a command added
later without its function fails here.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Unpack, get_args, get_origin

import click

import fencemigrate
from fencemigrate.cli import main

# Options that only shape the output, and so have no parameter in the API.
OUTPUT_ONLY = {"as_json", "output"}  # --json; check's --format


def parameter_names(function: Callable[..., Any]) -> set[str]:
    """The names ``function`` takes: its parameters, and the keys of its ``**options: Unpack[...]``."""
    names = set()
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind is not parameter.VAR_KEYWORD:
            names.add(parameter.name)
            continue
        hint = eval(parameter.annotation, function.__globals__)  # the annotation as a string (PEP 563)
        assert get_origin(hint) is Unpack, f"{function.__name__}: **{parameter.name} is not Unpack[TypedDict]"
        names |= set(get_args(hint)[0].__annotations__)
    return names


def commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command]]:
    """(API name, command) of every command under ``group``: ``lease acquire`` is ``lease_acquire``."""
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None
        if isinstance(command, click.Group):
            yield from commands(command, (*prefix, name))
        else:
            yield "_".join((*prefix, name)), command


def mirror_problems(group: click.Group, package: object) -> list[str]:
    """What is missing from ``package`` for the API to mirror ``group``'s commands."""
    problems = []
    for name, command in commands(group):
        function = getattr(package, name, None)
        if not inspect.isfunction(function):
            problems.append(f"{name}: no function fencemigrate.{name} (found {function!r})")
            continue
        if name not in getattr(package, "__all__", ()):
            problems.append(f"{name}: not in fencemigrate.__all__")
        parameters = parameter_names(function)
        for param in command.params:
            if param.name is None or param.name in OUTPUT_ONLY or param.name in parameters:
                continue
            problems.append(f"{name}: no parameter for {'/'.join(param.opts)} ({param.name})")
    return problems


def test_every_command_is_a_top_level_function_taking_its_options() -> None:
    assert mirror_problems(main, fencemigrate) == []


def test_the_mirror_covers_the_lease_subcommands_and_the_authoring_commands() -> None:
    names = {name for name, _ in commands(main)}
    assert {"lease_acquire", "lease_renew", "lease_release", "lease_status", "lease_detach"} <= names
    assert {"revision", "merge", "branches", "edit", "ensure_version", "list_templates", "init"} <= names
    assert "lease" not in names


def test_a_command_added_without_its_function_is_caught() -> None:
    group = click.Group("fencemigrate", commands=dict(main.commands))

    @group.command("frobnicate")
    def frobnicate() -> None:
        """A command nobody mirrored."""

    @group.command("timeline")
    @click.option("--color", is_flag=True)
    def timeline(color: bool) -> None:
        """timeline with an option its function does not take."""

    assert mirror_problems(group, fencemigrate) == [
        "frobnicate: no function fencemigrate.frobnicate (found None)",
        "timeline: no parameter for --color (color)",
    ]


def test_no_submodule_shares_a_name_with_a_command() -> None:
    """A submodule named like a command would replace the command's function on the package when
    it is first imported (``fencemigrate.timeline`` was once the module): none exists. Control: the
    import system does bind a submodule over a function of the same name."""
    package = Path(fencemigrate.__file__).parent
    children = {path.stem for path in package.iterdir() if path.suffix == ".py" or (path / "__init__.py").exists()}
    assert children & set(fencemigrate.__all__) == set()
    code = (
        "import inspect, fencemigrate\n"
        "import fencemigrate.lint.rules, fencemigrate.fence.state, fencemigrate.fence.timeline\n"
        "import fencemigrate.fence.version_table, fencemigrate.examples.incident\n"
        "names = ('check', 'state', 'timeline', 'ensure_version', 'demo')\n"
        "print([inspect.isfunction(getattr(fencemigrate, name)) for name in names])\n"
        "import fencemigrate.fence\n"
        "fencemigrate.fence.state = lambda: None\n"
        "import importlib, sys; del sys.modules['fencemigrate.fence.state']\n"
        "importlib.import_module('fencemigrate.fence.state')\n"
        "print(inspect.ismodule(fencemigrate.fence.state))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout == "[True, True, True, True, True]\nTrue\n"


def test_timeline_is_callable_from_the_top_level() -> None:
    """The README's promise, which used to raise TypeError (the submodule was called)."""
    assert fencemigrate.timeline.__module__ == "fencemigrate.api"
    assert fencemigrate.timeline is fencemigrate.api.timeline


def test_every_command_prints_one_json_object_with_json() -> None:
    """Every command takes --json (the issue: one JSON object from every command)."""
    missing = [
        name
        for name, command in commands(main)
        if not any("--json" in param.opts for param in command.params if isinstance(param, click.Option))
    ]
    assert missing == []


def test_the_fenced_commands_and_the_lease_calls_resolve_their_annotations() -> None:
    """``typing.get_type_hints`` works on the commands a program calls most (their modules are loaded
    anyway); the other commands' result types are imported only when those commands run."""
    commands = (fencemigrate.upgrade, fencemigrate.downgrade, fencemigrate.reapply, fencemigrate.stamp)
    for function in (*commands, fencemigrate.lease_renew, fencemigrate.lease_release):
        hints = typing.get_type_hints(function)
        assert "return" in hints, function.__name__
