"""The register_tool_sources hook: sources an app opens where a session asks for them."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

import toolwire
from toolwire.hooks.manager import PluginWarning
from toolwire.plugin_api import ToolSource, ToolSourceSpec
from toolwire.testing import isolated_plugin_manager


@toolwire.tool(read_only=True)
def ping() -> str:
    """Answer pong."""
    return "pong"


class _Opened:
    def __init__(self, **options: Any) -> None:
        self.options, self.notes, self.closed = options, [], False

    def tools(self, *, taken: Any = ()) -> list[toolwire.Tool]:
        return [] if "ping" in taken else [ping]

    def close(self) -> None:
        self.closed = True


def _plugin(name: str = "pinger", origin: Any = None, label: str = "Pinger") -> object:
    class Plugin:
        @toolwire.hookimpl
        def register_tool_sources(self, register: Any) -> None:
            register(ToolSourceSpec(name=name, open=_Opened, options=("host",),
                                    **({"origin": origin} if origin else {})))

    Plugin.__name__ = label
    return Plugin()


def test_a_registered_source_opens_with_its_options_and_lists_its_tools() -> None:
    plugins = isolated_plugin_manager(_plugin())
    spec = plugins.tool_source("pinger")
    assert spec.options == ("host",) and spec.plugin
    source = spec.open(host="h")
    assert isinstance(source, ToolSource) and source.options == {"host": "h"}
    assert [t.name for t in source.tools()] == ["ping"]
    assert source.tools(taken=["ping"]) == []
    assert any(info.tool_sources == ("pinger",) for info in plugins.describe())


def test_an_unknown_source_is_a_typed_lookup_error() -> None:
    with pytest.raises(toolwire.ToolSourceNotFoundError, match="no tool source 'nope'") as info:
        isolated_plugin_manager().tool_source("nope")
    assert isinstance(info.value, LookupError)


def test_two_plugins_registering_one_source_name_conflict() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plugins = isolated_plugin_manager(_plugin(), _plugin(label="Copycat"))
        assert plugins.tool_sources()["pinger"].plugin == "Pinger"
    assert any("tool source 'pinger'" in str(w.message) for w in caught)


def test_an_origin_that_raises_is_contained_and_names_nothing() -> None:
    def broken(tool: toolwire.Tool) -> str:
        raise RuntimeError("boom")

    plugins = isolated_plugin_manager(_plugin(origin=broken))
    with pytest.warns(PluginWarning, match="origin"):
        assert plugins.tool_source("pinger").origin(ping) is None


def test_the_built_in_mcp_source_names_its_tools_and_refuses_a_bad_command() -> None:
    plugins = toolwire.default_plugin_manager()
    spec = plugins.tool_source("mcp")
    assert {"commands", "urls", "config_files"} <= set(spec.options)
    assert spec.origin(ping) is None
    with pytest.raises(toolwire.ToolwireError, match="empty"):
        spec.open(commands=["   "])
    servers = spec.open(commands=["python -m some.server"])
    try:
        assert isinstance(servers, ToolSource) and servers.notes == []
    finally:
        servers.close()
