"""Tests of the bracket_calls example plugin, run against the installed package."""

from __future__ import annotations

from pathlib import Path

import toolwire
from toolwire import PluginManager
from toolwire.testing import Registered, check_parser

import toolwire_bracket_calls

TEMPLATE = Path(toolwire_bracket_calls.__file__).with_name("template.jinja")


def test_conformance() -> None:
    check_parser(toolwire_bracket_calls, TEMPLATE.read_text(encoding="utf-8"))


def test_a_call_between_text_is_parsed(registered: Registered) -> None:
    plugins = registered(toolwire_bracket_calls)
    reply = toolwire.parse_reply('Looking.\n[[call search {"query": "alex"}]]',
                                 family="bracket_calls", plugins=plugins)
    assert reply.content == "Looking."
    assert [(c.name, dict(c.arguments)) for c in reply.tool_calls] == \
        [("search", {"query": "alex"})]


def test_brackets_inside_a_string_value_do_not_end_the_call(registered: Registered) -> None:
    plugins = registered(toolwire_bracket_calls)
    reply = toolwire.parse_reply('[[call echo {"text": "]] and [[call x {}]]"}]]',
                                 family="bracket_calls", plugins=plugins)
    assert [dict(c.arguments) for c in reply.tool_calls] == [{"text": "]] and [[call x {}]]"}]


def test_a_broken_call_stays_text_with_a_diagnostic(registered: Registered) -> None:
    plugins = registered(toolwire_bracket_calls)
    reply = toolwire.parse_reply("[[call search not json]]", family="bracket_calls",
                                 plugins=plugins)
    assert reply.tool_calls == ()
    assert reply.content == "[[call search not json]]"
    assert [d.code for d in reply.diagnostics] == ["malformed_call"]


def test_the_template_is_claimed_by_this_plugin(plugin_manager: PluginManager) -> None:
    plugin_manager.register(toolwire_bracket_calls)
    choice = toolwire.select_parser(TEMPLATE.read_text(encoding="utf-8"), plugin_manager)
    assert choice.spec.name == "bracket_calls"
