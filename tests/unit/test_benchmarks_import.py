"""Every benchmark still imports: a module it names that a change deleted or renamed
is found here, not months later by the next person who measures (``workspace_tools``
imported the deleted ``regex_search`` for a whole stop)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import benchmarks

MODULES = sorted(info.name for info in pkgutil.iter_modules(benchmarks.__path__)
                 if info.name not in ("__main__",))


def test_the_benchmarks_are_found() -> None:
    assert {"harness", "rendering", "parser_paired", "workspace_tools"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_a_benchmark_imports_and_can_be_run(name: str) -> None:
    module = importlib.import_module(f"benchmarks.{name}")
    if name != "harness":
        assert callable(getattr(module, "run", None)) or callable(getattr(module, "main", None))


@pytest.mark.parametrize("name", MODULES)
def test_every_name_a_benchmark_imports_from_toolwire_exists(name: str) -> None:
    """Imports inside functions too (``schema_walks`` imported ``grammar_for`` from where it
    no longer was, inside the function that runs: the module imported, the run failed)."""
    source = importlib.util.find_spec(f"benchmarks.{name}")
    assert source is not None and source.origin is not None
    tree = ast.parse(Path(source.origin).read_text(encoding="utf-8"))
    missing = [f"{node.module}.{alias.name}" for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and node.level == 0
               and (node.module or "").split(".")[0] == "toolwire"
               for alias in node.names
               if not _importable(node.module or "", alias.name)]
    assert not missing


def _importable(module: str, name: str) -> bool:
    """Whether ``module`` has ``name`` (a module that needs a package this venv lacks, an
    engine's, cannot be looked into here: not counted as missing)."""
    try:
        found = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        return not (exc.name or "toolwire").startswith("toolwire")
    except ImportError:
        return False
    if hasattr(found, name):
        return True
    try:
        importlib.import_module(f"{module}.{name}")
    except ImportError:
        return False
    return True
