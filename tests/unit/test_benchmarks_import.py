"""Every benchmark still imports: a module it names that a change deleted or renamed
is found here, not months later by the next person who measures (``workspace_tools``
imported the deleted ``regex_search`` for a whole stop)."""

from __future__ import annotations

import importlib
import pkgutil

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
