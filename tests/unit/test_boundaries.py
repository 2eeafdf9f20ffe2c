"""Every plugin and tool boundary contains what crosses it, but the host's own Ctrl-C.

Issue 23, item 7 (``SystemExit``/``KeyboardInterrupt`` escaping plugins, tools,
observers and backends) and item 12 (a stream-filter factory or a parser that
raises, an entry point named like a built-in). Entry-point plugins are real
distributions in a temporary folder (see ``test_plugin_manager``).
"""

from __future__ import annotations

import _thread
import importlib
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolwire
from tests.support.templates import shared_template
from tests.unit.test_plugin_manager import Site
from toolwire import (
    CancelToken,
    Chat,
    DiagnosticEvent,
    DoneEvent,
    ErrorEvent,
    Event,
    ModelRequest,
    ParserSpec,
    PluginLoadError,
    PluginManager,
    StreamFilterSpec,
    TextEvent,
    ToolCallEndEvent,
    ToolResultEvent,
    TurnEnd,
    tool,
)
from toolwire.boundaries import is_host_interrupt, must_propagate
from toolwire.families.selection import build_pipeline, select_parser
from toolwire.hooks.manager import PluginWarning
from toolwire.parse.protocol import FilterContext, ReplyPipeline, collect_reply
from toolwire.testing import ScriptedBackend, isolated_plugin_manager


class Fatal(BaseException):
    """Something that is not an Exception, like SystemExit, but nobody's own."""


ESCAPES: dict[str, Callable[[], BaseException]] = {
    "SystemExit": lambda: SystemExit(3),
    "KeyboardInterrupt raised": lambda: KeyboardInterrupt(),
    "RecursionError": lambda: RecursionError("maximum recursion depth exceeded"),
    "other BaseException": lambda: Fatal("boom"),
}
ESCAPE_IDS = list(ESCAPES)
ESCAPE_MAKERS = list(ESCAPES.values())

CALL = ("<tool_call>\n<function=search>\n<parameter=query>\nalex\n</parameter>\n"
        "</function>\n</tool_call>")


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TOOLWIRE_LOAD_PLUGINS", "TOOLWIRE_STRICT_PLUGINS", "TOOLWIRE_TRACE_PLUGINS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    monkeypatch.syspath_prepend(str(tmp_path))
    made = Site(tmp_path)
    yield made
    for name in made.modules:
        sys.modules.pop(name, None)
    importlib.invalidate_caches()


def done_last(events: Sequence[Event]) -> DoneEvent:
    assert isinstance(events[-1], DoneEvent), events[-1]
    return events[-1]


@tool(read_only=True)
def search(query: str) -> str:
    """Search.

    :param query: what
    """
    return f"hits for {query}"


# ---------------------------------------------------------------------------
# What counts as the host's own interrupt.


def test_a_raised_keyboard_interrupt_is_not_the_hosts() -> None:
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as exc:
        assert not is_host_interrupt(exc)
        assert not must_propagate(exc)


def test_a_delivered_sigint_is_the_hosts_and_so_is_one_wrapping_it() -> None:
    try:
        _thread.interrupt_main()
        time.sleep(5)
    except KeyboardInterrupt as exc:
        assert is_host_interrupt(exc)
        real = exc
    try:
        raise KeyboardInterrupt("re-raised by a handler") from real
    except KeyboardInterrupt as exc:
        assert is_host_interrupt(exc)


def test_no_interrupt_in_another_thread_is_the_hosts() -> None:
    seen: list[bool] = []

    def worker() -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            seen.append(is_host_interrupt(exc))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [False]


@pytest.mark.parametrize("make", ESCAPE_MAKERS, ids=ESCAPE_IDS)
def test_nothing_else_must_propagate_but_generator_exit(make: Callable[[],
                                                                       BaseException]) -> None:
    try:
        raise make()
    except BaseException as exc:
        assert not must_propagate(exc)
    assert must_propagate(GeneratorExit())


# ---------------------------------------------------------------------------
# Plugins: import, registration, observers (item 7).


@pytest.mark.parametrize("statement", ["raise SystemExit(3)", "raise KeyboardInterrupt",
                                       "import sys; sys.exit('bye')"])
def test_a_plugin_that_exits_at_import_is_skipped_and_the_host_lives(site: Site,
                                                                     statement: str) -> None:
    site.good("fine")
    site.add("exiting-dist", {"exiting": "exiting_module"}, {"exiting_module": statement})
    with pytest.warns(PluginWarning, match="'exiting'.*failed to load"):
        manager = PluginManager()
    assert "fine_family" in manager.parsers()
    (info,) = [i for i in manager.describe() if i.name == "exiting"]
    assert info.error is not None


def test_strict_mode_turns_an_exit_at_import_into_a_toolwire_error(site: Site) -> None:
    site.add("exiting-dist", {"exiting": "exiting_module"},
             {"exiting_module": "raise SystemExit(3)"})
    with pytest.raises(PluginLoadError, match=r"'exiting'.*SystemExit") as info:
        PluginManager(strict=True)
    assert isinstance(info.value.__cause__, SystemExit)


@pytest.mark.parametrize("raised", ["SystemExit(2)", "KeyboardInterrupt()"])
@pytest.mark.parametrize("strict", [False, True])
def test_a_registration_hook_that_exits_skips_the_plugin(site: Site, raised: str,
                                                         strict: bool) -> None:
    site.add("hook-dist", {"hooked": "hooked_module"}, {"hooked_module": f"""
        import toolwire

        @toolwire.hookimpl
        def register_tools(register):
            raise {raised}
    """})
    if strict:
        with pytest.raises(PluginLoadError, match="register_tools raised"):
            PluginManager(strict=True)
        return
    with pytest.warns(PluginWarning, match="'hooked'.*register_tools raised"):
        manager = PluginManager()
    (info,) = [i for i in manager.describe() if i.name == "hooked"]
    assert info.tools == () and "register_tools raised" in (info.error or "")


class ExitingObserver:
    """An observer plugin whose hooks raise what it is given."""

    def __init__(self, make: Callable[[], BaseException]) -> None:
        self.make = make

    @toolwire.hookimpl
    def on_tool_call(self, name: str) -> None:
        raise self.make()

    @toolwire.hookimpl
    def on_tool_result(self, name: str) -> None:
        raise self.make()


@pytest.mark.parametrize("make", ESCAPE_MAKERS, ids=ESCAPE_IDS)
def test_an_observer_that_exits_is_a_warning_and_the_reply_goes_on(
        make: Callable[[], BaseException]) -> None:
    plugins = isolated_plugin_manager(ExitingObserver(make))
    chat = Chat(ScriptedBackend([CALL, "Found."], plugins=plugins), [search], plugins=plugins)
    with pytest.warns(PluginWarning) as caught:
        events = list(chat.send("find alex"))
    messages = " ".join(str(w.message) for w in caught)
    assert "on_tool_call raised" in messages and "on_tool_result raised" in messages
    assert [e.content for e in events if isinstance(e, ToolResultEvent)] == ["hits for alex"]
    assert done_last(events).reason == "stop"


# ---------------------------------------------------------------------------
# Tools and backends (item 7).


@pytest.mark.parametrize("timeout", [5.0, None], ids=["worker thread", "inline"])
@pytest.mark.parametrize("make", ESCAPE_MAKERS, ids=ESCAPE_IDS)
def test_a_tool_that_exits_gets_an_error_result_and_the_reply_ends_with_done(
        make: Callable[[], BaseException], timeout: float | None) -> None:
    @tool(read_only=True)
    def search(query: str) -> str:
        """Search.

        :param query: what
        """
        raise make()

    plugins = isolated_plugin_manager()
    chat = Chat(ScriptedBackend([CALL, "Sorry."], plugins=plugins), [search], plugins=plugins,
                tool_timeout=timeout)
    events = list(chat.send("find alex"))
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.is_error and result.error_kind == "tool_error"
    assert type(make()).__name__ in result.content
    assert done_last(events).reason == "stop"
    assert [m.role for m in chat.history] == ["user", "assistant", "tool", "assistant"]


class ExitingBackend:
    """A backend that streams some text, then raises what it is given."""

    name = "exiting"

    def __init__(self, make: Callable[[], BaseException]) -> None:
        self.make = make

    def make_call_id(self, index: int) -> str:
        return f"call_{index}"

    def stream_turn(self, request: ModelRequest,
                    cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        yield TextEvent("Partly ")
        raise self.make()


@pytest.mark.parametrize("make", ESCAPE_MAKERS, ids=ESCAPE_IDS)
def test_a_backend_that_exits_mid_reply_is_an_error_event_then_done(
        make: Callable[[], BaseException]) -> None:
    chat = Chat(ExitingBackend(make), plugins=isolated_plugin_manager())
    events = list(chat.send("hi"))
    (error,) = [e for e in events if isinstance(e, ErrorEvent)]
    assert error.kind == "backend" and type(make()).__name__ in error.message
    assert done_last(events).reason == "error"
    assert [m.role for m in chat.history] == ["user", "assistant"]
    assert chat.history[1].content == "Partly "


def test_the_hosts_own_ctrl_c_in_a_backend_still_ends_the_reply() -> None:
    class InterruptedBackend(ExitingBackend):
        def stream_turn(self, request: ModelRequest,
                        cancel: CancelToken) -> Iterator[Event | TurnEnd]:
            yield TextEvent("Partly ")
            _thread.interrupt_main()
            time.sleep(5)

    chat = Chat(InterruptedBackend(KeyboardInterrupt), plugins=isolated_plugin_manager())
    with pytest.raises(KeyboardInterrupt):
        list(chat.send("hi"))
    assert [m.role for m in chat.history] == ["user", "assistant"]


# ---------------------------------------------------------------------------
# Stream filters, parsers, entry-point names (item 12).


def filter_plugin(create: Callable[[FilterContext], Any]) -> object:
    class FilterPlugin:
        @toolwire.hookimpl
        def register_stream_filters(self, register: Callable[[Any], None]) -> None:
            register(StreamFilterSpec(name="fragile", priority=5, create=create))

    return FilterPlugin()


def parses_a_call(plugins: PluginManager) -> bool:
    pipeline = build_pipeline(plugins.parser("qwen_xml"), {"search": {}}, plugins=plugins)
    events = pipeline.feed(CALL) + pipeline.close()
    return any(isinstance(e, ToolCallEndEvent) for e in events)


@pytest.mark.parametrize("make", ESCAPE_MAKERS, ids=ESCAPE_IDS)
def test_a_filter_factory_that_always_raises_is_skipped_at_load(
        make: Callable[[], BaseException]) -> None:
    def create(context: FilterContext) -> Any:
        raise make()

    with pytest.warns(PluginWarning, match="stream filter 'fragile'.*raised"):
        plugins = isolated_plugin_manager(filter_plugin(create))
        assert "fragile" not in [s.name for s in plugins.stream_filters()]
    assert parses_a_call(plugins)


def test_a_filter_factory_that_raises_for_one_family_is_left_out_of_that_reply() -> None:
    made: list[str | None] = []

    def create(context: FilterContext) -> Any:
        made.append(context.family)
        if context.family == "qwen_xml":
            raise RuntimeError("not for this family")
        return None

    plugins = isolated_plugin_manager(filter_plugin(create))
    with pytest.warns(PluginWarning, match="stream filter 'fragile' factory raised RuntimeError"):
        assert parses_a_call(plugins)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reported once, not per reply
        assert parses_a_call(plugins)
    assert made.count("qwen_xml") == 2


def test_strict_mode_raises_for_a_filter_factory_that_raises() -> None:
    def create(context: FilterContext) -> Any:
        raise ValueError("broken")

    manager = PluginManager(builtins=False, entry_points=False, strict=True)
    manager.register(filter_plugin(create), name="fragile-plugin")
    with pytest.raises(PluginLoadError, match=r"stream filter 'fragile'.*broken"):
        manager.stream_filters()


def test_an_entry_point_named_like_a_builtin_loads_with_a_warning(site: Site) -> None:
    site.add("lookalike-dist", {"qwen_xml": "lookalike_module"},
             {"lookalike_module": "x = 1"})
    with pytest.warns(PluginWarning, match="'qwen_xml'.*named like the built-in plugin "
                                           "toolwire.plugins.qwen_xml"):
        manager = PluginManager()
    assert manager.parser("qwen_xml").plugin == "toolwire.plugins.qwen_xml"
    with pytest.raises(PluginLoadError, match="named like the built-in"):
        PluginManager(strict=True)


class RaisingParser:
    """Reads text as text until ``fail_at`` characters, then raises."""

    def __init__(self, fail_at: int, when: str, make: Callable[[], BaseException]) -> None:
        self.fail_at = fail_at
        self.when = when
        self.make = make
        self.seen = 0

    def feed(self, text: str) -> list[Event]:
        self.seen += len(text)
        if self.when == "feed" and self.seen > self.fail_at:
            raise self.make()
        return [TextEvent(text)] if text else []

    def close(self) -> list[Event]:
        if self.when == "close":
            raise self.make()
        return []


def parser_plugin(parser: Callable[[], Any], detect: Callable[[str], float] | None = None
                  ) -> object:
    class ParserPlugin:
        @toolwire.hookimpl
        def register_parsers(self, register: Callable[[Any], None]) -> None:
            register(ParserSpec(name="fragile_family", detect=detect or (lambda source: 0.0),
                                create=lambda tools: parser()))

    return ParserPlugin()


@pytest.mark.parametrize("when", ["feed", "close"])
@pytest.mark.parametrize("make", ESCAPE_MAKERS, ids=ESCAPE_IDS)
def test_a_parser_that_raises_gives_parser_error_and_keeps_the_reply(
        when: str, make: Callable[[], BaseException]) -> None:
    plugins = isolated_plugin_manager(parser_plugin(lambda: RaisingParser(10, when, make)))
    chat = Chat(ScriptedBackend(["The answer is forty-two."], family="fragile_family",
                                plugins=plugins), plugins=plugins)
    events = list(chat.send("question"))
    (diagnostic,) = [e for e in events if isinstance(e, DiagnosticEvent)]
    assert diagnostic.code == "parser_error" and type(make()).__name__ in diagnostic.message
    assert "".join(e.text for e in events if isinstance(e, TextEvent)) == \
        "The answer is forty-two."
    assert done_last(events).reason == "stop"


def test_a_parser_whose_detect_raises_does_not_stop_selection_for_others() -> None:
    def detect(source: str) -> float:
        raise SystemExit("detect exits")

    plugins = isolated_plugin_manager(parser_plugin(lambda: None, detect))
    template = shared_template("Qwen3.5-4B.jinja")
    with pytest.warns(PluginWarning, match="parser 'fragile_family' detect raised SystemExit"):
        backend = ScriptedBackend(["hi"], chat_template=template, plugins=plugins)
    assert backend.make_call_id(0)  # qwen_xml claimed the template
    assert select_parser(template, plugins).spec.name == "qwen_xml"


@settings(max_examples=60, deadline=None)
@given(text=st.text(min_size=1, max_size=80), fail_at=st.integers(0, 80),
       cuts=st.lists(st.integers(1, 20), max_size=10),
       filter_fails=st.booleans())
def test_whatever_a_stage_raises_the_pipeline_passes_every_character_on(
        text: str, fail_at: int, cuts: list[int], filter_fails: bool) -> None:
    failing = RaisingParser(fail_at, "feed", lambda: SystemExit(1))
    healthy = RaisingParser(10**9, "feed", lambda: SystemExit(1))
    pipeline = ReplyPipeline([failing] if filter_fails else [],
                             healthy if filter_fails else failing)
    events: list[Event] = []
    start = 0
    for cut in [*cuts, len(text)]:
        events += pipeline.feed(text[start:start + cut])
        start += cut
        if start >= len(text):
            break
    events += pipeline.close()
    reply = collect_reply(events)
    assert reply.content == text
    errors = [d for d in reply.diagnostics if d.code == "parser_error"]
    assert len(errors) == (1 if fail_at < len(text) else 0)
