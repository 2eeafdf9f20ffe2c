"""Conversation scenarios shared by every backend, run through ``toolwire.Chat``.

A scenario is written once as an abstract script: per model turn, the text the
model writes and the calls it makes. A small adapter per backend turns the
script into that backend's wire form and reads back what the backend was
sent:

* ``openai_compat``: OpenAI-native ``tool_calls`` deltas streamed by the test
  HTTP server (``tests/support/openai_wire_server.py``); what was sent is the request
  bodies the server recorded.
* ``scripted``: Qwen XML markup replayed by :class:`toolwire.testing.ScriptedBackend`
  through the real parser; what was sent is the recorded ``ModelRequest``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest

import toolwire
from tests.support.openai_wire_server import Stream, WireServer, reply_chunks
from toolwire import (
    Backend,
    DiagnosticEvent,
    DoneEvent,
    Event,
    Message,
    TextEvent,
    ToolCallEvent,
    ToolResultEvent,
    to_openai_messages,
)
from toolwire.plugins.openai_compat import OpenAICompatBackend
from toolwire.testing import ScriptedBackend

# -- tools --------------------------------------------------------------------------------

RAN: list[str] = []
NOTES = {"todo": "buy milk", "ideas": "a faster parser"}


@toolwire.tool(read_only=True)
def read_note(name: str) -> str:
    """Read one note.

    :param name: the note's name
    """
    RAN.append(f"read_note({name})")
    return NOTES.get(name, f"no note named {name}")


@toolwire.tool(read_only=True)
def count_words(text: str) -> int:
    """Count the words of a text."""
    RAN.append("count_words")
    return len(text.split())


@toolwire.tool
def write_note(name: str, text: str) -> str:
    """Write a note."""
    RAN.append(f"write_note({name})")
    NOTES[name] = text
    return "written"


TOOLS = (read_note, count_words, write_note)


# -- the abstract script and the adapters ----------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One call the model makes."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Turn:
    """One model turn: text, then calls."""

    text: str = ""
    calls: tuple[Call, ...] = ()


class Adapter(Protocol):
    """Turns a script into one backend and reads back what it was sent."""

    name: str

    def backend(self, turns: Sequence[Turn]) -> Backend: ...

    def offered(self, n: int) -> list[str] | None:
        """The tool names request ``n`` offered; ``None`` when it offered none."""
        ...

    def messages(self, n: int) -> list[dict[str, Any]]:
        """Request ``n``'s messages, in the OpenAI shape."""
        ...

    def request_count(self) -> int: ...


class RemoteAdapter:
    """OpenAI-native ``tool_calls`` from the test HTTP server."""

    name = "openai_compat"

    def __init__(self, server: WireServer) -> None:
        self.server = server

    def backend(self, turns: Sequence[Turn]) -> Backend:
        for t, turn in enumerate(turns):
            calls = [(f"call_t{t}_{i}", c.name, c.arguments) for i, c in enumerate(turn.calls)]
            self.server.enqueue(Stream(reply_chunks(turn.text, calls, piece=7)))
        return OpenAICompatBackend("custom", model="scenario-model", base_url=self.server.url,
                                   timeout=3, retry_backoff=0, environ={})

    def offered(self, n: int) -> list[str] | None:
        tools = self.server.bodies[n].get("tools")
        return None if tools is None else [t["function"]["name"] for t in tools]

    def messages(self, n: int) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.server.bodies[n]["messages"]
        return messages

    def request_count(self) -> int:
        return len(self.server.requests)


def qwen_xml(turn: Turn) -> str:
    """The Qwen3.5 / Qwen3-Coder markup of a turn."""
    out = [turn.text]
    for call in turn.calls:
        params = "".join(
            f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
            for k, v in call.arguments.items())
        out.append(f"\n<tool_call>\n<function={call.name}>\n{params}</function>\n</tool_call>")
    return "".join(out)


class ScriptedAdapter:
    """Qwen XML text through the local stand-in backend and the real parser."""

    name = "scripted"

    def __init__(self) -> None:
        self.stand_in: ScriptedBackend | None = None

    def backend(self, turns: Sequence[Turn]) -> Backend:
        self.stand_in = ScriptedBackend([qwen_xml(t) for t in turns], chunk_size=5)
        return self.stand_in

    def _request(self, n: int) -> Any:
        assert self.stand_in is not None
        return self.stand_in.requests[n]

    def offered(self, n: int) -> list[str] | None:
        names = [t.name for t in self._request(n).tools]
        return names or None

    def messages(self, n: int) -> list[dict[str, Any]]:
        return to_openai_messages(self._request(n).messages)

    def request_count(self) -> int:
        assert self.stand_in is not None
        return len(self.stand_in.requests)


@pytest.fixture(params=["openai_compat", "scripted"])
def adapter(request: pytest.FixtureRequest) -> Iterator[Adapter]:
    RAN.clear()
    NOTES.update({"todo": "buy milk", "ideas": "a faster parser"})
    NOTES.pop("new", None)
    if request.param == "openai_compat":
        with WireServer() as server:
            yield RemoteAdapter(server)
    else:
        yield ScriptedAdapter()


def of(events: Sequence[Event], cls: type) -> list[Any]:
    return [e for e in events if isinstance(e, cls)]


def done(events: Sequence[Event]) -> DoneEvent:
    last = events[-1]
    assert isinstance(last, DoneEvent), events
    return last


def text(events: Sequence[Event]) -> str:
    return "".join(e.text for e in of(events, TextEvent))


# -- scenarios --------------------------------------------------------------------------------


def test_several_calls_in_one_turn_each_get_their_own_answer(adapter: Adapter) -> None:
    backend = adapter.backend([
        Turn("Reading both notes.", (Call("read_note", {"name": "todo"}),
                                     Call("read_note", {"name": "ideas"}),
                                     Call("count_words", {"text": "one two three"}))),
        Turn("todo: buy milk; ideas: a faster parser."),
    ])
    events = list(toolwire.Chat(backend, tools=TOOLS).send("what do my notes say?"))
    assert done(events).reason == "stop" and done(events).turns == 2
    assert RAN == ["read_note(todo)", "read_note(ideas)", "count_words"]
    calls = of(events, ToolCallEvent)
    results = of(events, ToolResultEvent)
    assert [r.content for r in results] == ["buy milk", "a faster parser", "3"]
    assert [r.id for r in results] == [c.id for c in calls]
    assert len({c.id for c in calls}) == 3
    sent = adapter.messages(1)
    assistant = sent[-4]
    assert assistant["role"] == "assistant"
    assert [c["id"] for c in assistant["tool_calls"]] == [c.id for c in calls]
    assert [json.loads(c["function"]["arguments"]) for c in assistant["tool_calls"]] == [
        {"name": "todo"}, {"name": "ideas"}, {"text": "one two three"}]
    assert sent[-3:] == [{"role": "tool", "tool_call_id": r.id, "content": r.content}
                         for r in results]
    assert "todo: buy milk" in text(events)


def test_missing_required_argument_is_returned_and_the_model_corrects_itself(
        adapter: Adapter) -> None:
    backend = adapter.backend([
        Turn("Let me read it.", (Call("read_note", {}),)),
        Turn("Oops, with the name.", (Call("read_note", {"name": "todo"}),)),
        Turn("It says: buy milk."),
    ])
    events = list(toolwire.Chat(backend, tools=TOOLS).send("read my todo note"))
    first, second = of(events, ToolResultEvent)
    assert first.is_error and first.error_kind == "invalid_arguments"
    assert "'name'" in first.content and "read_note" in first.content
    assert not second.is_error and second.content == "buy milk"
    assert RAN == ["read_note(todo)"]
    assert adapter.messages(1)[-1] == {"role": "tool", "tool_call_id": first.id,
                                       "content": first.content}
    assert adapter.messages(2)[-1]["content"] == "buy milk"
    assert done(events).reason == "stop" and done(events).turns == 3


def test_read_only_mode_offers_read_tools_and_refuses_a_write_by_name(adapter: Adapter) -> None:
    backend = adapter.backend([
        Turn("Writing it.", (Call("write_note", {"name": "new", "text": "hello"}),)),
        Turn("I cannot write in this session."),
    ])
    chat = toolwire.Chat(backend, tools=TOOLS, read_only=True)
    events = list(chat.send("save a note"))
    assert adapter.offered(0) == ["read_note", "count_words"]
    (result,) = of(events, ToolResultEvent)
    assert result.is_error and result.error_kind == "read_only"
    assert "'write_note'" in result.content
    assert RAN == [] and "new" not in NOTES
    assert done(events).reason == "stop"


def _stored_local_exchange() -> list[dict[str, Any]]:
    """An earlier exchange run on the local stand-in, saved in the stored format."""
    local = ScriptedBackend([qwen_xml(Turn("Looking.", (Call("read_note", {"name": "todo"}),))),
                             "Your todo says: buy milk."])
    chat = toolwire.Chat(local, tools=TOOLS)
    list(chat.send("what is on my todo?"))
    return chat.save()


def test_history_replays(adapter: Adapter) -> None:
    records = _stored_local_exchange()
    stored_id = next(r["tool_call_id"] for r in records if r["role"] == "tool")
    assert stored_id
    backend = adapter.backend([Turn("You asked about your todo note.")])
    chat = toolwire.Chat(backend, tools=TOOLS,
                         history=toolwire.from_stored(records, backend.make_call_id))
    events = list(chat.send("what did I ask before?"))
    assert done(events).reason == "stop"
    sent = adapter.messages(0)
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
    (call,) = sent[1]["tool_calls"]
    assert call["id"] == stored_id
    assert call["function"]["name"] == "read_note"
    assert isinstance(call["function"]["arguments"], str)
    assert json.loads(call["function"]["arguments"]) == {"name": "todo"}
    assert sent[2] == {"role": "tool", "tool_call_id": stored_id, "content": "buy milk"}
    assert sent[3] == {"role": "assistant", "content": "Your todo says: buy milk."}
    assert chat.history[1].tool_calls[0].id == stored_id


def test_history_replay_reaches_the_remote_wire_as_json_strings() -> None:
    records = _stored_local_exchange()
    with WireServer() as server:
        remote = RemoteAdapter(server)
        backend = remote.backend([Turn("ok")])
        list(toolwire.Chat(backend, tools=TOOLS,
                           history=toolwire.from_stored(records)).send("again"))
        body = server.bodies[0]
    call = body["messages"][1]["tool_calls"][0]
    assert call["type"] == "function"
    assert call["function"]["arguments"] == '{"name": "todo"}'
    assert body["messages"][2]["tool_call_id"] == call["id"]


def test_reserved_final_turn_offers_no_tools_and_ends_with_an_answer(adapter: Adapter) -> None:
    backend = adapter.backend([
        Turn("First look.", (Call("read_note", {"name": "todo"}),)),
        Turn("Final: your todo says buy milk.", (Call("read_note", {"name": "ideas"}),)),
    ])
    chat = toolwire.Chat(backend, tools=TOOLS, max_tool_iters=2)
    events = list(chat.send("keep reading notes"))
    assert adapter.request_count() == 2
    assert adapter.offered(0) == ["read_note", "count_words", "write_note"]
    assert adapter.offered(1) is None
    final_prompt = toolwire.conversation.chat.DEFAULT_FINAL_ANSWER_PROMPT
    assert adapter.messages(1)[-1] == {"role": "user", "content": final_prompt}
    assert len(of(events, ToolResultEvent)) == 1 and RAN == ["read_note(todo)"]
    assert [d.code for d in of(events, DiagnosticEvent)] == ["call_in_final_turn"]
    final = done(events)
    assert final.reason == "stop" and final.turns == 2
    assert "Final: your todo says buy milk." in text(events)
    assert chat.history[-1] == Message.assistant("Final: your todo says buy milk.")
