"""An MCP result reaches the model once, and a cut result's note survives a second cut
(issue 29, item 10).

The official filesystem and memory servers answer with text and repeat it as
``structuredContent`` (``{"content": text}``; the memory server's entities as
JSON text and as the object); the model reads the text once. A result the MCP
source cut at its bound keeps its ``[result cut ...]`` note when the dispatcher
cuts it again at a smaller bound, so the model still reads how large the answer was.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from toolwire import Chat, tool
from toolwire.conversation.dispatch import limit_output
from toolwire.events import ToolResultEvent
from toolwire.plugins.mcp_tools.results import render_result
from toolwire.testing import ScriptedBackend, isolated_plugin_manager


def text(value: str) -> SimpleNamespace:
    return SimpleNamespace(type="text", text=value)


LISTING = "[FILE] notes.md\n[DIR] src"
GRAPH = {"entities": [{"name": "Alex", "entityType": "person", "observations": ["parsers"]}],
         "relations": []}


def test_the_filesystem_servers_repeated_text_is_read_once() -> None:
    result = SimpleNamespace(content=[text(LISTING)], structured_content={"content": LISTING})
    assert render_result(result) == LISTING


def test_the_memory_servers_json_and_its_object_are_read_once() -> None:
    result = SimpleNamespace(content=[text(json.dumps(GRAPH, indent=2))],
                             structured_content=GRAPH)
    assert render_result(result) == json.dumps(GRAPH, indent=2)


def test_text_in_several_blocks_repeated_whole_is_read_once() -> None:
    result = SimpleNamespace(content=[text("line one"), text("line two")],
                             structured_content={"content": "line one\nline two"})
    assert render_result(result) == "line one\nline two"


def test_structured_content_that_says_more_is_still_added() -> None:
    result = SimpleNamespace(content=[text("2 files")],
                             structured_content={"content": ["a.md", "b.md"]})
    assert render_result(result) == '2 files\nstructured content: {"content": ["a.md", "b.md"]}'
    two = SimpleNamespace(content=[text("x")], structured_content={"content": "x", "n": 1})
    assert render_result(two).endswith('structured content: {"content": "x", "n": 1}')


def test_a_cut_results_note_survives_a_second_smaller_cut() -> None:
    answer = SimpleNamespace(content=[text("y" * 5000)], structured_content=None)
    first = render_result(answer, max_chars=1000)
    assert first.endswith("\n[result cut: 4045 more characters not shown]")
    second = limit_output(first, 200)
    assert second.startswith("y" * 200)
    assert "\n[result cut: 4045 more characters not shown]\n[truncated:" in second
    assert second.endswith(f"the tool returned {len(first):,} characters; only the first "
                           "200 are shown]")


def test_a_result_over_the_bound_only_by_its_note_is_left_whole() -> None:
    body = "z" * 100 + "\n[result cut: 9 more characters not shown]"
    assert limit_output(body, 120) == body


def test_the_model_reads_the_first_cuts_note_through_a_chat() -> None:
    @tool(read_only=True)
    def huge_mcp_answer() -> str:
        """An MCP tool's rendered answer, already cut by its source."""
        return render_result(SimpleNamespace(content=[text("w" * 3000)],
                                             structured_content=None), max_chars=500)

    call = "<tool_call>\n<function=huge_mcp_answer>\n</function>\n</tool_call>"
    chat = Chat(ScriptedBackend([call, "done"]), tools=[huge_mcp_answer],
                plugins=isolated_plugin_manager(), max_tool_output_chars=100)
    results = [e for e in chat.send("go") if isinstance(e, ToolResultEvent)]
    assert "[result cut: 2545 more characters not shown]" in results[0].content
