"""pytest fixtures for toolwire (registered through the ``pytest11`` entry point).

* ``plugin_manager``: a fresh :class:`toolwire.PluginManager` with the built-ins
  and no entry points, so a test never depends on what happens to be installed.
* ``registered``: call ``registered(plugin)`` to add a plugin to that manager for
  the current test only; it is removed afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..hooks.manager import PluginManager
from .scripted import Registered, isolated_plugin_manager

__all__ = ["plugin_manager", "registered"]


@pytest.fixture
def plugin_manager() -> PluginManager:
    """A plugin manager with built-ins only (no entry points)."""
    return isolated_plugin_manager()


@pytest.fixture
def registered(plugin_manager: PluginManager) -> Iterator[Registered]:
    """Register plugins for one test: ``pm = registered(my_plugin)``."""
    names: list[str] = []

    def register(plugin: object) -> PluginManager:
        names.append(plugin_manager.register(plugin))
        return plugin_manager

    yield register
    for name in names:
        plugin_manager.unregister(name)
