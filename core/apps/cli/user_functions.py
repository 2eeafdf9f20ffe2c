"""``--functions FILE.py``: the user's own Python functions as tools.

Every public function defined in the file (its name does not start with ``_``;
imported names are left out) becomes a tool, its schema derived from the type
annotations and the docstring as :func:`toolwire.tool` derives it; a
:class:`toolwire.Tool` the file defines (``@toolwire.tool``) is taken as it is.
They change things unless ``--read-only-functions`` says they do not (then a
read-only session offers them and no approval is asked). A file that cannot be
imported, defines no function, or a function whose annotations cannot be
described is an input error that names the file and the line; a parameter
without a type is accepted with a warning (the model's value for it goes
unchecked).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

import attrs

from ...errors import ToolDefinitionError
from ...vocabulary.tools import Tool
from .common import fail

__all__ = ["add_function_arguments", "function_tools", "load_function_file",
           "unchecked_parameters"]


def add_function_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--functions`` options of ``chat``, ``serve`` and ``tools``."""
    parser.add_argument("--functions", action="append", default=[], metavar="FILE.py",
                        help="offer the typed, documented functions of this Python file as "
                             "tools (repeatable)")
    parser.add_argument("--read-only-functions", action="store_true",
                        help="mark the --functions tools read-only (by default they count as "
                             "changing things, so a chat asks before each call)")


def function_tools(args: argparse.Namespace) -> list[Tool]:
    """The tools of every ``--functions`` file, in the order given.

    :raises UsageError: a file cannot be loaded, has no functions, or two files
        define the same tool name.
    """
    tools: list[Tool] = []
    where: dict[str, str] = {}
    for number, path in enumerate(getattr(args, "functions", None) or ()):
        for item in load_function_file(path, number,
                                       read_only=bool(getattr(args, "read_only_functions",
                                                              False))):
            if item.name in where:
                fail(f"--functions {path}: {item.name!r} is also defined in {where[item.name]}")
            where[item.name] = path
            tools.append(item)
    return tools


def load_function_file(path: str, number: int = 0, *, read_only: bool = False) -> list[Tool]:
    """Import ``path`` and turn its public functions into tools.

    :param number: makes the module name unique when several files are loaded.
    :raises UsageError: see :func:`function_tools`.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        fail(f"--functions {path}: file not found")
    module = _import(file, f"toolwire_user_functions_{number}")
    tools: list[Tool] = []
    for name, value in vars(module).items():
        if name.startswith("_"):
            continue
        try:
            if isinstance(value, Tool):
                tools.append(attrs.evolve(value, read_only=True) if read_only else value)
            elif inspect.isfunction(value) and value.__module__ == module.__name__:
                tools.append(Tool.from_function(value, read_only=read_only))
        except ToolDefinitionError as exc:
            line = inspect.getsourcelines(value)[1] if inspect.isfunction(value) else "?"
            fail(f"--functions {path}:{line}: function {name!r} cannot be a tool: {exc}")
    if not tools:
        fail(f"--functions {path}: the file defines no public function (names starting "
             "with _ are left out)")
    for item in tools:
        unchecked = unchecked_parameters(item)
        if unchecked:
            print(f"toolwire: warning: --functions {path}: {item.name!r} has parameters without "
                  f"a type ({', '.join(unchecked)}): whatever the model passes for them is "
                  "not checked", file=sys.stderr, flush=True)
    return tools


_NOT_CONSTRAINTS = frozenset({"description", "default", "title", "examples"})


def unchecked_parameters(item: Tool) -> list[str]:
    """The parameters of ``item`` whose schema accepts any value (no annotation, or ``Any``)."""
    properties = item.parameters.get("properties")
    if not isinstance(properties, Mapping):
        return []
    return [name for name, schema in properties.items()
            if isinstance(schema, Mapping) and not set(schema) - _NOT_CONSTRAINTS]


def _import(file: Path, module_name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        fail(f"--functions {file}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses and typing look the module up by name
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(module_name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        fail(f"--functions {file}: importing it failed: {_where(exc, file)}"
             f"{type(exc).__name__}: {exc}")
    return module


def _where(exc: BaseException, file: Path) -> str:
    """``line N: `` of the innermost frame in ``file``, when there is one."""
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f"line {exc.lineno}: "
    frames: Sequence[traceback.FrameSummary] = traceback.extract_tb(exc.__traceback__)
    lines = [f.lineno for f in frames if Path(f.filename) == file and f.lineno]
    return f"line {lines[-1]}: " if lines else ""
