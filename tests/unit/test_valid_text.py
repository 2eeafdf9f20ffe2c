"""Text from outside is valid text (issue 40, item 2).

A lone surrogate (a Latin-1 file name through ``os.listdir``, a JSON ``"\\ud800"``
escape in an MCP result or a resume file, a template's string literal) is made
valid where it comes in, so nothing downstream (a save, the worker's pipe, a
tokenizer, an HTTP body) can fail to encode it. The rule, as a property: whatever
string goes into a message, a call, a tool's schema, a result or a rendered
prompt, what comes out encodes as UTF-8, and valid text passes unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from toolwire import Chat, Message, Tool, ToolCall, ToolResultEvent
from toolwire.conversation.dispatch import Dispatcher
from toolwire.templates.chat_template import ChatTemplate
from toolwire.testing import ScriptedBackend, isolated_plugin_manager
from toolwire.vocabulary.history import from_stored, to_stored
from toolwire.vocabulary.tools import ToolRegistry
from toolwire.vocabulary.valid_text import REPLACEMENT, valid_json_value, valid_text

LATIN1_NAME = "caf\udce9.txt"  # what os.listdir gives for b"caf\xe9.txt" on a UTF-8 system
ANY_TEXT = st.lists(st.one_of(st.characters(exclude_categories=()),
                              st.sampled_from(["\ud800", "\udce9", "\udfff", "\ud83d"])),
                    max_size=40).map("".join)
"""Any text, lone and paired surrogates included (drawn often, not left to luck)."""


def encodes(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@given(ANY_TEXT)
def test_valid_text_always_encodes_and_keeps_valid_text_as_it_is(text: str) -> None:
    made = valid_text(text)
    made.encode("utf-8")
    if encodes(text):
        assert made is text
    else:
        assert REPLACEMENT in made or len(made) < len(text)


def test_a_surrogate_pair_becomes_its_character_and_a_lone_one_the_replacement() -> None:
    assert valid_text("a\ud83d\ude00b") == "a\U0001f600b"
    assert valid_text(LATIN1_NAME) == "caf\ufffd.txt"
    assert valid_text("\udc00\ud800") == "\ufffd\ufffd"


def test_json_values_are_made_valid_at_any_depth_and_left_alone_when_valid() -> None:
    deep: Any = "\ud800"
    for _ in range(5000):
        deep = [deep]
    made = valid_json_value({"k\udce9": deep})
    inner = made["k\ufffd"]
    for _ in range(5000):
        inner = inner[0]
    assert inner == "\ufffd"
    clean = {"a": [1, {"b": "c"}]}
    assert valid_json_value(clean) is clean


@given(ANY_TEXT, ANY_TEXT, ANY_TEXT)
def test_every_record_a_conversation_keeps_is_valid_text(content: str, key: str,
                                                         value: str) -> None:
    call = ToolCall("c" + content, "lookup", {key: [value, {key: value}]})
    messages = [Message.user(content), Message.assistant(content, [call], reasoning=content),
                Message.tool_result(call, content)]
    assert encodes(to_stored(messages))
    assert encodes([list(m.arguments or {}) for m in messages])
    assert encodes(call.arguments) and encodes(call.id)


def test_a_resume_file_with_lone_surrogate_escapes_loads_as_valid_text() -> None:
    records = json.loads('[{"role": "user", "content": "caf\\udce9"}, {"role": "tool", '
                         '"tool_name": "t", "tool_args": {"p\\ud800": "\\udfff"}, '
                         '"tool_call_id": "c1", "content": "r\\ud800"}]')
    assert encodes(to_stored(from_stored(records)))


def test_a_tools_description_and_schema_from_outside_are_valid_text() -> None:
    tool = Tool({"name": "t", "description": "d\ud800", "parameters": {
        "type": "object", "properties": {"p": {"description": "x\udce9"}}}}, lambda p: p)
    assert tool.description == "d\ufffd"
    assert encodes(dict(tool.schema))


def test_a_tool_result_holding_a_file_name_that_is_not_utf8_is_valid_text() -> None:
    listing = Tool({"name": "list_dir"}, lambda: f"notes.md\n{LATIN1_NAME}\n", read_only=True)
    result = Dispatcher(ToolRegistry([listing])).dispatch(ToolCall("c1", "list_dir", {}))
    assert result.content == "notes.md\ncaf\ufffd.txt\n"
    failing = Tool({"name": "boom"}, lambda: (_ for _ in ()).throw(OSError(LATIN1_NAME)))
    failed = Dispatcher(ToolRegistry([failing])).dispatch(ToolCall("c2", "boom", {}))
    assert failed.is_error and encodes(failed.content)


def test_a_chat_with_such_a_result_can_always_be_saved_and_goes_on() -> None:
    listing = Tool({"name": "list_dir"}, lambda: LATIN1_NAME, read_only=True)
    call = "<tool_call>\n<function=list_dir>\n</function>\n</tool_call>"
    backend = ScriptedBackend([call, "done", "again"])
    chat = Chat(backend, tools=[listing], plugins=isolated_plugin_manager())
    events = list(chat.send("list"))
    (result,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert result.content == "caf\ufffd.txt"
    json.dumps(chat.save(), ensure_ascii=False).encode("utf-8")
    assert chat.ask("and?") == "again"


def test_a_template_that_writes_a_lone_surrogate_renders_valid_text() -> None:
    template = ChatTemplate("{{ '\\ud800' }}{% for m in messages %}{{ m.content }}{% endfor %}")
    assert template.render([{"role": "user", "content": "hi"}]) == "\ufffdhi"


def test_a_childs_pipe_never_writes_what_it_cannot_encode() -> None:
    from toolwire.isolation.supervisor import encode_line

    message = {"op": "turn", "text": "a\udce9", "key\ud800": ["\udfff"], "plain": "café"}
    written = encode_line(message)
    assert written.endswith(b"\n") and written.count(b"\n") == 1
    assert json.loads(written.decode("utf-8")) == message  # crosses unchanged, escaped
