"""The plugin system: built-ins, entry-point discovery, error boundaries, conflicts, CLI.

Entry-point plugins are real distributions for importlib.metadata: each test
writes a ``*.dist-info`` folder with an ``entry_points.txt`` and the plugin
module into a temporary folder on ``sys.path``. Nothing is installed.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import toolwire
from toolwire import (
    BackendNotFoundError,
    BackendSpec,
    Chat,
    ParserSpec,
    PluginConflictError,
    PluginLoadError,
    PluginManager,
    StreamFilterSpec,
    Tool,
    tool,
)
from toolwire.apps.cli.main import main as cli_main
from toolwire.hooks import specs as hookspecs
from toolwire.hooks.manager import BUILTIN_PLUGINS, PluginWarning
from toolwire.testing import ScriptedBackend, isolated_plugin_manager

ENV = ("TOOLWIRE_LOAD_PLUGINS", "TOOLWIRE_STRICT_PLUGINS", "TOOLWIRE_TRACE_PLUGINS")

GOOD_PLUGIN = """
    import toolwire
    from toolwire import BackendSpec, ParserSpec, StreamFilterSpec


    @toolwire.hookimpl
    def register_parsers(register):
        register(ParserSpec(name="{prefix}_family", detect=lambda source: 0.0,
                            create=lambda tools: None))


    @toolwire.hookimpl
    def register_backends(register):
        register(BackendSpec(name="{prefix}_backend", create=lambda **options: None))


    @toolwire.hookimpl
    def register_tools(register):
        @toolwire.tool(read_only=True)
        def {prefix}_echo(text: str) -> str:
            return text

        register({prefix}_echo)


    @toolwire.hookimpl
    def register_stream_filters(register):
        register(StreamFilterSpec(name="{prefix}_filter", priority=50,
                                  create=lambda context: None))
"""


class Site:
    """A folder on sys.path where tests install fake distributions."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: list[str] = []

    def add(self, dist: str, entry_points: dict[str, str], modules: dict[str, str],
            version: str = "1.0") -> None:
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8")
        (info / "entry_points.txt").write_text(
            "[toolwire]\n" + "".join(f"{n} = {v}\n" for n, v in entry_points.items()),
            encoding="utf-8")
        for name, source in modules.items():
            (self.root / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
            self.modules.append(name)
        importlib.invalidate_caches()

    def good(self, name: str, dist: str | None = None) -> None:
        """A plugin ``name`` that registers one of everything, named after itself."""
        module = f"{name}_plugin_module"
        self.add(dist or f"{name}-plugin", {name: module},
                 {module: GOOD_PLUGIN.format(prefix=name)})


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    monkeypatch.syspath_prepend(str(tmp_path))
    made = Site(tmp_path)
    yield made
    for name in made.modules:
        sys.modules.pop(name, None)
    importlib.invalidate_caches()


def info_of(manager: PluginManager, name: str) -> toolwire.PluginInfo:
    (found,) = [i for i in manager.describe() if i.name == name]
    return found


# -- built-ins -------------------------------------------------------------------------


def test_builtins_are_registered_explicitly_without_entry_points() -> None:
    manager = PluginManager(entry_points=False)
    assert "qwen_xml" in manager.parsers()
    assert "think" in [f.name for f in manager.stream_filters()]
    infos = {i.name: i for i in manager.describe()}
    for module in ("toolwire.hooks.builtin_reasoning", "toolwire.plugins.qwen_xml"):
        assert module in BUILTIN_PLUGINS
        assert infos[module].builtin
    assert infos["toolwire.plugins.qwen_xml"].parsers == ("qwen_xml",)
    assert manager.parser("qwen_xml").plugin == "toolwire.plugins.qwen_xml"


def test_manager_without_builtins_or_entry_points_is_empty() -> None:
    manager = PluginManager(builtins=False, entry_points=False)
    assert manager.parsers() == {} and manager.describe() == []


def test_builtins_are_also_published_as_entry_points() -> None:
    group = importlib.metadata.entry_points(group="toolwire")
    assert group["qwen_xml"].value == "toolwire.plugins.qwen_xml"
    assert group["qwen_xml"].dist is not None and group["qwen_xml"].dist.name == "toolwire"


def test_unknown_backend_is_a_lookup_error_listing_the_known_ones() -> None:
    manager = isolated_plugin_manager()
    with pytest.raises(BackendNotFoundError, match="no backend 'nope'") as info:
        manager.backend("nope")
    assert isinstance(info.value, LookupError)


# -- hookspecs -------------------------------------------------------------------------


def hook_specs() -> list[Callable[..., Any]]:
    return [f for _, f in inspect.getmembers(hookspecs, inspect.isfunction)
            if hasattr(f, "toolwire_spec")]


def test_every_hook_is_documented_in_pytest_order() -> None:
    specs = hook_specs()
    assert {f.__name__ for f in specs} == {
        "register_parsers", "register_backends", "register_tools", "register_stream_filters",
        "register_tool_sources",
        "on_tool_call", "on_tool_result"}
    for spec in specs:
        doc = inspect.getdoc(spec) or ""
        summary = doc.splitlines()[0] if doc else ""
        assert summary and summary[0].isupper() and summary.endswith("."), spec.__name__
        for parameter in inspect.signature(spec).parameters:
            assert f":param {parameter}:" in doc, (spec.__name__, parameter)
        assert ":returns:" in doc and ".. versionadded::" in doc, spec.__name__
        positions = [doc.index(":param"), doc.index(":returns:"), doc.index(".. versionadded::")]
        assert positions == sorted(positions), spec.__name__


def test_hookimpl_marker_is_exported_from_the_package_root() -> None:
    assert toolwire.hookimpl is hookspecs.hookimpl


# -- entry-point plugins ---------------------------------------------------------------


def test_entry_point_plugin_is_discovered_with_its_distribution_and_contributions(
        site: Site) -> None:
    site.good("fake", dist="fake-plugin")
    manager = PluginManager()
    info = info_of(manager, "fake")
    assert (info.distribution, info.version, info.builtin, info.error) == (
        "fake-plugin", "1.0", False, None)
    assert (info.parsers, info.backends, info.tools, info.stream_filters) == (
        ("fake_family",), ("fake_backend",), ("fake_echo",), ("fake_filter",))
    assert manager.parser("fake_family").plugin == "fake"
    assert manager.backend("fake_backend").plugin == "fake"
    assert [f.plugin for f in manager.stream_filters() if f.name == "fake_filter"] == ["fake"]
    assert "fake_echo" in [t.name for t in manager.tools()]


def test_broken_plugin_is_a_warning_naming_it_and_the_others_still_load(site: Site) -> None:
    site.good("fine")
    site.add("broken-dist", {"broken": "broken_module"},
             {"broken_module": "raise ImportError('needs libfoo')"})
    with pytest.warns(PluginWarning, match="'broken'.*needs libfoo"):
        manager = PluginManager()
    assert "fine_family" in manager.parsers()
    info = info_of(manager, "broken")
    assert "needs libfoo" in (info.error or "")
    assert info.distribution == "broken-dist"


def test_broken_entry_point_plugin_does_not_stop_the_host(site: Site) -> None:
    site.add("broken-dist", {"broken": "broken_module:missing_attribute"},
             {"broken_module": "x = 1"})

    @tool(read_only=True)
    def search(query: str) -> str:
        return f"hits for {query}"

    with pytest.warns(PluginWarning, match="'broken'"):
        manager = PluginManager()
    reply = ("<tool_call>\n<function=search>\n<parameter=query>\nalex\n</parameter>\n"
             "</function>\n</tool_call>")
    chat = Chat(ScriptedBackend([reply, "Found."], plugins=manager), [search], plugins=manager)
    assert chat.ask("find alex") == "Found."
    assert chat.history[2].content == "hits for alex"


def test_registration_hook_that_raises_skips_the_whole_plugin(site: Site) -> None:
    site.add("half-dist", {"half": "half_module"}, {"half_module": """
        import toolwire
        from toolwire import BackendSpec, ParserSpec

        @toolwire.hookimpl
        def register_parsers(register):
            register(ParserSpec(name="half_family", detect=lambda s: 0.0,
                                create=lambda tools: None))

        @toolwire.hookimpl
        def register_backends(register):
            raise RuntimeError("config file missing")

        @toolwire.hookimpl
        def on_tool_call(name):
            raise AssertionError("a skipped plugin must not observe")
    """})
    with pytest.warns(PluginWarning, match="'half'.*register_backends raised RuntimeError"):
        manager = PluginManager()
    assert "half_family" not in manager.parsers()
    info = info_of(manager, "half")
    assert info.distribution == "half-dist" and "config file missing" in (info.error or "")
    manager.notify_tool_call("search", {}, "c")  # the skipped plugin's observer is gone


@pytest.mark.parametrize("how", ["environment", "argument"])
def test_strict_mode_raises_for_a_broken_plugin(site: Site, how: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    site.add("broken-dist", {"broken": "broken_module"},
             {"broken_module": "raise ImportError('needs libfoo')"})
    if how == "environment":
        monkeypatch.setenv("TOOLWIRE_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match=r"'broken'.*needs libfoo") as info:
        PluginManager(strict=True if how == "argument" else None)
    assert info.value.plugin == "broken"


def test_strict_mode_raises_for_a_registration_hook_that_fails(
        site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    site.add("half-dist", {"half": "half_module"}, {"half_module": """
        import toolwire

        @toolwire.hookimpl
        def register_tools(register):
            register({"name": "not a Tool"})
    """})
    monkeypatch.setenv("TOOLWIRE_STRICT_PLUGINS", "1")
    with pytest.raises(PluginLoadError, match=r"'half'.*expects a Tool, got dict"):
        PluginManager()


def test_allowlist_loads_only_the_named_entry_point_plugins(
        site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    site.good("alpha")
    site.good("beta")
    site.add("broken-dist", {"broken": "broken_module"},
             {"broken_module": "raise ImportError('needs libfoo')"})
    monkeypatch.setenv("TOOLWIRE_LOAD_PLUGINS", " alpha , ")
    manager = PluginManager()  # the broken plugin is not even imported: no warning
    names = {i.name for i in manager.describe()}
    assert "alpha" in names and "beta" not in names and "broken" not in names
    assert "broken_module" not in sys.modules
    assert "qwen_xml" in manager.parsers()  # built-ins are always there


def test_empty_allowlist_loads_no_entry_point_plugins(
        site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    site.good("alpha")
    monkeypatch.setenv("TOOLWIRE_LOAD_PLUGINS", "")
    manager = PluginManager()
    assert all(i.builtin for i in manager.describe())
    assert "alpha_family" not in manager.parsers()


def test_two_distributions_with_one_entry_point_name_keep_the_first(site: Site) -> None:
    site.good("twin", dist="twin-one")
    site.add("twin-two", {"twin": "twin_two_module"}, {"twin_two_module": "x = 1"})
    with pytest.warns(PluginWarning, match="'twin'.*already registered"):
        manager = PluginManager()
    assert info_of(manager, "twin").error is None
    assert "twin_family" in manager.parsers()
    assert [i.error is not None for i in manager.describe() if i.name.startswith("twin")] == [
        False, True]


# -- conflicts -------------------------------------------------------------------------


def plugin_registering(kind: str, name: str, label: str) -> object:
    """A plugin object (named ``label``) registering one record of ``kind``."""
    records: dict[str, Callable[[], Any]] = {
        "parsers": lambda: ParserSpec(name=name, detect=lambda s: 0.5, create=lambda t: None),
        "backends": lambda: BackendSpec(name=name, create=lambda **o: None),
        "tools": lambda: Tool(schema={"name": name}, function=lambda: ""),
        "stream_filters": lambda: StreamFilterSpec(name=name, priority=1,
                                                   create=lambda c: None),
    }

    def hook(register: Callable[[Any], None]) -> None:
        register(records[kind]())

    hook.__name__ = f"register_{kind}"
    namespace = {f"register_{kind}": staticmethod(toolwire.hookimpl(hook))}
    return type(label, (), namespace)()


KINDS = ["parsers", "backends", "tools", "stream_filters"]


@pytest.mark.parametrize("kind", KINDS)
def test_two_plugins_registering_one_name_is_a_conflict_naming_both(kind: str) -> None:
    manager = PluginManager(builtins=False, entry_points=False, strict=True)
    manager.register(plugin_registering(kind, "shared", "first_plugin"))
    manager.register(plugin_registering(kind, "shared", "second_plugin"))
    with pytest.raises(PluginConflictError) as info:
        manager.describe()
    error = info.value
    assert isinstance(error, ValueError)
    assert (error.name, error.first, error.second) == ("shared", "first_plugin", "second_plugin")
    assert "'first_plugin'" in str(error) and "'second_plugin'" in str(error)


@pytest.mark.parametrize("kind", KINDS)
def test_conflict_outside_strict_mode_warns_naming_both_and_keeps_the_first(kind: str) -> None:
    manager = PluginManager(builtins=False, entry_points=False, strict=False)
    manager.register(plugin_registering(kind, "shared", "first_plugin"))
    manager.register(plugin_registering(kind, "shared", "second_plugin"))
    with pytest.warns(PluginWarning, match="'first_plugin' and plugin 'second_plugin'"):
        infos = {i.name: i for i in manager.describe()}
    assert getattr(infos["first_plugin"], kind) == ("shared",)
    assert getattr(infos["second_plugin"], kind) == ()
    assert "first_plugin" in (infos["second_plugin"].error or "")


def test_conflict_winner_is_the_first_registered_not_pluggys_call_order() -> None:
    for first, second in (("a_plugin", "b_plugin"), ("b_plugin", "a_plugin")):
        manager = PluginManager(builtins=False, entry_points=False)
        manager.register(plugin_registering("parsers", "shared", first))
        manager.register(plugin_registering("parsers", "shared", second))
        with pytest.warns(PluginWarning):
            assert manager.parser("shared").plugin == first


def test_third_party_parser_cannot_take_a_builtin_name() -> None:
    manager = isolated_plugin_manager()
    manager.register(plugin_registering("parsers", "qwen_xml", "impostor"))
    with pytest.warns(PluginWarning, match="'toolwire.plugins.qwen_xml' and plugin 'impostor'"):
        spec = manager.parser("qwen_xml")
    assert spec.plugin == "toolwire.plugins.qwen_xml"


def test_one_plugin_registering_a_name_twice_is_refused() -> None:
    class Twice:
        @toolwire.hookimpl
        def register_backends(self, register: Callable[[Any], None]) -> None:
            register(BackendSpec(name="dup", create=lambda **o: None))
            register(BackendSpec(name="dup", create=lambda **o: None))

    manager = PluginManager(builtins=False, entry_points=False)
    manager.register(Twice())
    with pytest.warns(PluginWarning, match="'Twice'.*'dup' is registered twice"):
        assert manager.backends() == {}


# -- fixtures and tracing ----------------------------------------------------------------


def test_registered_fixture_adds_a_plugin_for_one_test(
        registered: Callable[[object], PluginManager]) -> None:
    manager = registered(plugin_registering("backends", "temporary", "temp_plugin"))
    assert "temporary" in manager.backends()
    assert manager.backend("temporary").plugin == "temp_plugin"


def test_trace_variable_prints_each_hook_call(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TOOLWIRE_TRACE_PLUGINS", "1")
    manager = PluginManager(entry_points=False)
    manager.notify_tool_call("search", {"q": 1}, "call_9")
    err = capsys.readouterr().err
    assert "register_parsers(register) [plugin toolwire.plugins.qwen_xml]" in err


# -- the `toolwire plugins` command --------------------------------------------------------


def test_plugins_command_lists_each_plugin_its_distribution_and_contributions(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    site.good("fake", dist="fake-plugin")
    site.add("broken-dist", {"broken": "broken_module"},
             {"broken_module": "raise ImportError('needs libfoo')"})
    with pytest.warns(PluginWarning):
        assert cli_main(["plugins"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    qwen = next(i for i, line in enumerate(lines) if line.startswith("toolwire.plugins.qwen_xml "))
    assert "built-in" in lines[qwen] and lines[qwen + 1] == "  parsers: qwen_xml"
    fake = lines.index("fake  (fake-plugin 1.0)")
    assert lines[fake + 1:fake + 5] == ["  parsers: fake_family", "  backends: fake_backend",
                                        "  tools: fake_echo", "  stream filters: fake_filter"]
    broken = next(i for i, line in enumerate(lines) if line.startswith("broken  ("))
    assert "broken-dist 1.0" in lines[broken]
    assert lines[broken + 1].startswith("  FAILED: ") and "needs libfoo" in lines[broken + 1]


def test_plugins_command_prints_json(site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    site.good("fake", dist="fake-plugin")
    assert cli_main(["plugins", "--json"]) == 0
    listing = {p["name"]: p for p in json.loads(capsys.readouterr().out)}
    assert listing["fake"] == {
        "name": "fake", "distribution": "fake-plugin", "version": "1.0", "builtin": False,
        "parsers": ["fake_family"], "backends": ["fake_backend"], "tools": ["fake_echo"],
        "stream_filters": ["fake_filter"], "error": None}
    assert listing["toolwire.plugins.qwen_xml"]["builtin"] is True
