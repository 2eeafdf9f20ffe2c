"""The core is built in floors, and the import graph keeps them (docs/architecture.md).

Every ``toolwire`` module sits on one floor. A module imports its own part (its
folder) and the floors below; never a floor above, never a sibling part on its
own floor. The rule holds for every import: at module level, under
``TYPE_CHECKING`` and inside functions, so no function-level import can get round
it. Inside the library (everything below the apps) a function-level import of a
toolwire module is allowed only where :data:`LAZY` says why. Plugins come in
through one door, as a third party's would: ``toolwire``, ``toolwire.plugin_api``
and ``toolwire.testing``; no plugin imports another, no app imports a plugin.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import attrs

from tests.support.paths import DOCS, REPO

FLOORS: tuple[tuple[str, ...], ...] = (
    ("toolwire.errors", "toolwire.events", "toolwire.boundaries", "toolwire.extras",
     "toolwire.limits"),
    ("toolwire.isolation",),
    ("toolwire.vocabulary",),
    ("toolwire.gguf", "toolwire.templates", "toolwire.parse"),
    ("toolwire.grammar",),
    ("toolwire.hooks",),
    ("toolwire.families",),
    ("toolwire.backends", "toolwire.conversation"),
    ("toolwire.testing",),
    ("toolwire", "toolwire.plugin_api"),
    ("toolwire.apps", "toolwire.engines"),
    ("toolwire.__main__",),
)
"""The floors, bottom first; each entry is a part (a module or a package)."""

PLUGIN_DOORS = frozenset({"toolwire", "toolwire.plugin_api", "toolwire.testing"})

LAZY: dict[tuple[str, str], str] = {
    ("toolwire.testing", "toolwire.testing.conformance"): "hypothesis loads with the kit",
    ("toolwire.testing", "toolwire.testing.fuzz"): "hypothesis loads with the fuzzer",
    ("toolwire.testing", "toolwire.testing.tiny_gguf"): "numpy loads with a model writer",
}
"""Function-level imports inside the library, each with its reason (a heavy import)."""


@attrs.frozen
class Import:
    source: str  # the importing module
    target: str  # the module imported (or the package a name comes from)
    line: int
    in_function: bool


def _module_of(path: Path) -> str:
    rel = path.relative_to(REPO)
    top, rest = rel.parts[0], rel.with_suffix("").parts[1:]
    parts = ["toolwire", *rest] if top == "core" else ["toolwire", "plugins", *rest]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(folder: str) -> Iterator[tuple[str, Path]]:
    for path in sorted((REPO / folder).rglob("*.py")):
        yield _module_of(path), path


KNOWN = {name for folder in ("core", "plugins") for name, _ in _modules(folder)}


def _imports(module: str, path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    functions = [node for node in ast.walk(tree)
                 if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    nested = {id(n) for f in functions for n in ast.walk(f)}
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            # "from pkg import module" imports the module, not the package
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in KNOWN else base
                       for a in node.names]
        for target in targets:
            if target == "toolwire" or target.startswith("toolwire."):
                yield Import(module, target, node.lineno, id(node) in nested)


ROOT_MODULES = frozenset({"toolwire", "toolwire.plugin_api", "toolwire.__main__"})


def _part(module: str) -> tuple[int, str] | None:
    """(floor, part) of a module: the longest part it is, or is inside (``None``: none)."""
    best: tuple[int, str] | None = None
    for floor, parts in enumerate(FLOORS):
        for part in parts:
            inside = module == part or (part not in ROOT_MODULES
                                        and module.startswith(part + "."))
            if inside and (best is None or len(part) > len(best[1])):
                best = (floor, part)
    return best


def _violations() -> list[str]:
    found = []
    for module, path in _modules("core"):
        floor, part = _part(module) or (-1, "")
        for imp in _imports(module, path):
            target_floor, target_part = _part(imp.target) or (-1, "")
            where = f"{path.relative_to(REPO)}:{imp.line}: {module} -> {imp.target}"
            if target_floor > floor:
                found.append(f"{where} (up from floor {floor} to floor {target_floor})")
            elif target_floor == floor and target_part != part:
                found.append(f"{where} (sideways, {part} and {target_part} share floor {floor})")
            elif imp.in_function and part != "toolwire.apps" and \
                    (module, imp.target) not in LAZY:
                found.append(f"{where} (a function-level import in the library)")
    return found


def test_no_import_goes_up_or_sideways_and_none_hides_in_a_function() -> None:
    assert _violations() == []


def test_every_core_module_is_on_a_floor() -> None:
    assert [m for m, _ in _modules("core") if _part(m) is None] == []


def test_every_lazy_import_allowed_still_exists() -> None:
    present = {(i.source, i.target) for m, p in _modules("core") for i in _imports(m, p)
               if i.in_function}
    assert set(LAZY) <= present


def test_plugins_come_in_through_the_door_and_never_import_each_other() -> None:
    wrong = []
    for module, path in _modules("plugins"):
        own = ".".join(module.split(".")[:3])
        for imp in _imports(module, path):
            if imp.target.startswith("toolwire.plugins."):
                if not imp.target.startswith(own):
                    wrong.append(f"{path.relative_to(REPO)}:{imp.line}: {imp.target}")
            elif imp.target not in PLUGIN_DOORS:
                wrong.append(f"{path.relative_to(REPO)}:{imp.line}: {imp.target}")
    assert wrong == []


def test_no_app_imports_a_plugin() -> None:
    wrong = [f"{path.relative_to(REPO)}:{imp.line}: {imp.target}"
             for module, path in _modules("core") for imp in _imports(module, path)
             if imp.target.startswith("toolwire.plugins")]
    assert wrong == []


def test_the_floors_on_the_architecture_page_are_the_floors_tested() -> None:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    table = re.search(r"^## Floors\n(.*?)^## ", text, re.M | re.S)
    assert table, "docs/architecture.md has no '## Floors' section"
    rows = re.findall(r"^\| (\d+) \| (.*?) \|", table.group(1), re.M)
    written = {int(n): set(re.findall(r"`(toolwire[\w.]*)`", parts)) for n, parts in rows}
    assert written == {n: set(parts) for n, parts in enumerate(FLOORS)}


def _private_names(module: str, path: Path) -> Iterator[tuple[int, str, str]]:
    """(line, module, name) of each private name ``module`` imports from a toolwire module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join([*anchor, *([node.module] if node.module else [])])
        if base != "toolwire" and not base.startswith("toolwire."):
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                yield node.lineno, base, alias.name


def test_no_app_module_imports_a_private_name_of_another_module() -> None:
    # what two commands or two routes share is a module of its own with a public name
    # (the chat's event printer, the server's shared state), not one's private part
    wrong = [f"{path.relative_to(REPO)}:{line}: {name} from {source}"
             for module, path in _modules("core") if module.startswith("toolwire.apps.")
             for line, source, name in _private_names(module, path)]
    assert wrong == []


SERVER_DOOR = "toolwire.apps.cli.serve"
"""The one command module that starts the HTTP server, so the one that imports it."""


def test_the_command_line_imports_no_server_module_but_the_serve_command() -> None:
    # the model worker is a backend (toolwire.backends.model_worker), not a server part
    wrong = [f"{path.relative_to(REPO)}:{imp.line}: {imp.target}"
             for module, path in _modules("core")
             if module.startswith("toolwire.apps.cli.") and module != SERVER_DOOR
             for imp in _imports(module, path)
             if imp.target.startswith("toolwire.apps.server")]
    assert wrong == []


def test_the_server_imports_nothing_of_the_command_line() -> None:
    wrong = [f"{path.relative_to(REPO)}:{imp.line}: {imp.target}"
             for module, path in _modules("core") if module.startswith("toolwire.apps.server")
             for imp in _imports(module, path) if imp.target.startswith("toolwire.apps.cli")]
    assert wrong == []


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_two_app_modules_import_each_other_even_for_types() -> None:
    # a route that needs the state the app assembles imports it from its own module
    # (server_state.py), so the app and its routes read in one direction
    graph = {module: {imp.target for imp in _imports(module, path)}
             for module, path in _modules("core") if module.startswith("toolwire.apps")}
    for module in graph:
        graph[module] &= set(graph)
    assert _cycles(graph) == []


def test_the_cycle_finder_sees_a_cycle_through_a_type_only_import() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
