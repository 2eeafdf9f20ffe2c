"""The tree shows the architecture, and the places that list it agree (issue 15)."""

from __future__ import annotations

import enum
import importlib
import re
import tomllib
from pathlib import Path

import pytest

import toolwire
from tests.support.paths import DOCS, REPO
from toolwire import plugin_api
from toolwire.hooks.manager import BUILTIN_PLUGINS

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
CORE_PLUGINS = {"toolwire.hooks.builtin_reasoning"}  # built-ins that live in core, not plugins/
MAX_CORE_MODULE_LINES = 700


def test_every_plugin_folder_is_packaged_registered_and_built_in() -> None:
    folders = {f"toolwire.plugins.{p.name}" for p in (REPO / "plugins").iterdir()
               if (p / "__init__.py").exists()}
    packages = {p for p in PYPROJECT["tool"]["setuptools"]["packages"]
                if p.startswith("toolwire.plugins.")}
    entry_points = set(PYPROJECT["project"]["entry-points"]["toolwire"].values())
    built_in = set(BUILTIN_PLUGINS) - CORE_PLUGINS
    assert packages == folders
    assert entry_points == folders
    assert built_in == folders
    for name, module in PYPROJECT["project"]["entry-points"]["toolwire"].items():
        assert module == f"toolwire.plugins.{name}"


def test_every_core_folder_is_a_listed_package() -> None:
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    for init in (REPO / "core").rglob("__init__.py"):
        parts = init.parent.relative_to(REPO / "core").parts
        assert ".".join(("toolwire", *parts)) in listed, init


@pytest.mark.parametrize("path", sorted((REPO / "core").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_no_core_module_is_over_the_size_limit(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_CORE_MODULE_LINES, f"{path} has {lines} lines"


def test_every_module_the_architecture_page_names_exists() -> None:
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`((?:core|plugins|tests)/[\w/]+(?:\.py)?/?)`", text))
    assert len(named) > 15
    for entry in named:
        assert (REPO / entry).exists(), entry
    # bare module names in the table rows, e.g. `chat.py` in the conversation row
    for row in re.findall(r"^\| .*? \| `(core/[\w/]+/)` \| (.*) \|$", text, re.M):
        folder, description = row
        for module in re.findall(r"`([\w/]+\.py)`", description):
            assert (REPO / folder / module).exists(), f"{folder}{module}"


def test_every_toolwire_module_path_in_the_docs_imports() -> None:
    """A documented ``toolwire.x.y`` path is a module or an attribute of one."""
    texts = [p.read_text(encoding="utf-8") for p in DOCS.glob("*.md")]
    texts.append((REPO / "README.md").read_text(encoding="utf-8"))
    paths = {m for t in texts for m in re.findall(r"\btoolwire(?:\.[A-Za-z_]\w*)+", t)}
    assert paths
    for dotted in sorted(paths):
        if dotted.startswith("toolwire.plugins.") and dotted.count(".") == 2:
            name = dotted.rsplit(".", 1)[1]
            if not (REPO / "plugins" / name).exists():
                continue  # a third-party plugin's name in prose (toolwire.plugins.<yours>)
        _resolve(dotted)


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            assert hasattr(value, attribute), f"{dotted}: no {attribute!r}"
            value = getattr(value, attribute)
        return value
    raise AssertionError(f"{dotted} does not import")


def test_every_plugin_api_name_is_documented() -> None:
    text = (DOCS / "plugin-api.md").read_text(encoding="utf-8")
    for name in plugin_api.__all__:
        assert f"`{name}`" in text, name
        assert getattr(plugin_api, name) is not None


def test_public_names_show_the_package_path() -> None:
    for name in toolwire.__all__:
        value = getattr(toolwire, name)
        if isinstance(value, type):
            assert value.__module__ == "toolwire", name
            if not issubclass(value, enum.Enum):  # an enum's repr is its bare name
                assert repr(value) == f"<class 'toolwire.{value.__qualname__}'>"
