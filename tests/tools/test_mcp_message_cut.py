"""MCP messages over the size bound, cut while they are read (issue 28, item 6).

The reading parts on their own: the reader that keeps a bounded head and tail of
a message of any size, the reading of JSON cut at an arbitrary byte, the message
that stands for an oversized one, the note the model reads, and the SSE framing
of the HTTP transport. ``test_mcp_large_results.py`` drives them through real
servers.
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("mcp")

from toolwire.plugins.mcp_tools import render_result
from toolwire.plugins.mcp_tools.http_transport import _EventStream, _JSONBody
from toolwire.plugins.mcp_tools.message_cut import (
    CUT_META_KEY,
    TAIL_BYTES,
    MessageReader,
    Oversized,
    complete_prefix,
    cut_message,
    ending_members,
)

MiB = 2**20

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
                                                                      allow_infinity=False) \
    | st.text(max_size=20)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=5)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=5),
                           max_leaves=30)


def read_whole(message: bytes, limit: int, piece: int = 65536) -> bytes | Oversized:
    reader = MessageReader(limit)
    for start in range(0, len(message), piece):
        reader.feed(message[start:start + piece])
    return reader.finish()


def begins(partial: Any, full: Any) -> bool:
    """Whether ``partial`` is what a start of ``full``'s JSON text can hold."""
    if isinstance(full, dict):
        if not isinstance(partial, dict) or list(partial) != list(full)[:len(partial)]:
            return False
        keys = list(partial)
        return all(partial[k] == full[k] for k in keys[:-1]) and \
            (not keys or begins(partial[keys[-1]], full[keys[-1]]))
    if isinstance(full, list):
        if not isinstance(partial, list) or len(partial) > len(full):
            return False
        return all(p == f for p, f in zip(partial[:-1], full, strict=False)) and \
            (not partial or begins(partial[-1], full[len(partial) - 1]))
    if isinstance(full, str):
        return isinstance(partial, str) and full.startswith(partial)
    return bool(partial == full)


# -- the reader -------------------------------------------------------------------------------


def test_a_message_within_the_bound_comes_back_whole() -> None:
    message = b'{"jsonrpc": "2.0", "id": 1, "result": {}}'
    assert read_whole(message, len(message), piece=3) == message


def test_an_oversized_message_keeps_its_head_and_tail_and_counts_the_rest() -> None:
    message = bytes(range(256)) * 10_000
    over = read_whole(message, 1000, piece=777)
    assert isinstance(over, Oversized)
    assert (over.head, over.tail, over.size, over.limit) == \
        (message[:1000], message[-TAIL_BYTES:], len(message), 1000)


def test_reading_a_100_mb_message_keeps_memory_at_the_bound() -> None:
    piece = b"x" * 65536
    reader = MessageReader(MiB)
    tracemalloc.start()
    try:
        for _ in range(1600):
            reader.feed(piece)
        over = reader.finish()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(over, Oversized) and over.size == 1600 * 65536
    assert peak < 3 * MiB


# -- JSON cut at any byte ---------------------------------------------------------------------


@settings(max_examples=300)
@given(json_values, st.data())
def test_any_cut_of_any_document_reads_as_a_start_of_it(value: Any, data: st.DataObject) -> None:
    for ascii_only in (True, False):
        text = json.dumps(value, ensure_ascii=ascii_only)
        cut = data.draw(st.integers(0, len(text)))
        partial = complete_prefix(text[:cut])
        if partial is not None:
            assert begins(partial, value), (text[:cut], partial)
        # a text that ends in a number could go on: only then is the whole text not whole
        ends_in_number = isinstance(value, int | float) and not isinstance(value, bool)
        assert complete_prefix(text) == (None if ends_in_number else value)


def test_a_string_cut_inside_an_escape_keeps_what_came_before() -> None:
    text = '{"a": "xy\\\\\\ud83d\\ude00\\u00e9\\n"}'
    seen = [complete_prefix(text[:n]) for n in range(len('{"a": "xy'), len(text))]
    assert {"a": "xy\\"} in seen and {"a": "xy\\\U0001F600"} in seen
    assert all(isinstance(s, dict) and "\ud83d" not in s["a"] for s in seen)


def test_deep_or_wide_openings_are_read_within_a_budget() -> None:
    assert complete_prefix("[" * 100_000) is not None
    wide = complete_prefix(json.dumps(list(range(1_000_000)))[:-1])
    assert isinstance(wide, list) and 0 < len(wide) <= 1_000_000


@pytest.mark.parametrize("text, members", [
    ('...}],"isError":false},"jsonrpc":"2.0","id":7}', {"jsonrpc": "2.0", "id": 7}),
    ('...}],"isError":true}}', {}),
    ('...x, \\"id\\": 9}"}]}, "id": "ab"}', {"id": "ab"}),
    ('...]', {}),
])
def test_the_members_that_end_a_message_are_those_of_its_outermost_object(
        text: str, members: dict[str, Any]) -> None:
    assert ending_members(text)[0] == members


# -- the message that stands for an oversized one ---------------------------------------------


def huge_result(text: str, *, request_first: bool = True, error: bool = False) -> bytes:
    result = {"content": [{"text": text, "type": "text"}], "isError": error,
              "resultType": "complete"}
    ordered = {"jsonrpc": "2.0", "id": 3, "result": result} if request_first else \
        {"result": result, "jsonrpc": "2.0", "id": 3}
    return json.dumps(ordered, ensure_ascii=False).encode()


@pytest.mark.parametrize("request_first", [True, False], ids=["python-order", "ts-order"])
def test_a_cut_tool_result_keeps_its_first_text_its_id_and_its_ending_members(
        request_first: bool) -> None:
    over = read_whole(huge_result("é" * 3 * MiB, request_first=request_first, error=True), MiB)
    assert isinstance(over, Oversized)
    cut = cut_message(over)
    assert cut is not None and cut["id"] == 3
    result = cut["result"]
    assert result["isError"] is True and result["resultType"] == "complete"
    (block,) = result["content"]
    assert block["type"] == "text" and set(block["text"]) == {"é"}
    assert MiB // 3 < len(block["text"]) <= MiB // 2  # two bytes each, no split character
    assert result["_meta"][CUT_META_KEY] == {"bytes": over.size, "read": MiB, "limit": MiB}


def test_a_cut_listing_or_error_is_an_error_answer_and_a_notification_is_dropped() -> None:
    listing = json.dumps({"jsonrpc": "2.0", "id": 5, "result": {
        "tools": [{"name": f"t{i}", "inputSchema": {"type": "object"}} for i in range(9999)]}})
    cut = cut_message(read_whole(listing.encode(), 4096))  # type: ignore[arg-type]
    assert cut is not None and cut["id"] == 5 and "result" not in cut
    assert "more than the 4,096 bytes" in cut["error"]["message"]
    error = json.dumps({"jsonrpc": "2.0", "id": 6, "error": {"code": -32000,
                                                               "message": "no: " + "z" * 9999}})
    cut = cut_message(read_whole(error.encode(), 4096))  # type: ignore[arg-type]
    assert cut is not None and cut["error"]["code"] == -32000
    assert cut["error"]["message"].startswith("no: zzz") and len(cut["error"]["message"]) < 2500
    notice = json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                         "params": {"data": "z" * 9999}})
    assert cut_message(read_whole(notice.encode(), 4096)) is None  # type: ignore[arg-type]


def test_blocks_the_sdk_would_refuse_are_left_out_and_the_known_id_wins() -> None:
    message = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"content": [
        {"type": "text", "text": "kept"}, {"type": "image", "data": "AAAA" * 9999}]}})
    over = read_whole(message.encode(), 2048)
    assert isinstance(over, Oversized)
    cut = cut_message(over, request_id="post-1",
                      usable_block=lambda block: block.get("type") == "text")
    assert cut is not None and cut["id"] == "post-1"
    assert cut["result"]["content"] == [{"type": "text", "text": "kept"}]


# -- the note the model reads -----------------------------------------------------------------


def test_a_result_cut_while_read_says_how_large_the_answer_was_within_the_bound() -> None:
    result = SimpleNamespace(content=[SimpleNamespace(type="text", text="x" * 500_000)],
                             structured_content=None,
                             meta={CUT_META_KEY: {"bytes": 419_430_500, "read": 4 * MiB,
                                                  "limit": 4 * MiB}})
    text = render_result(result, max_chars=100_000)
    assert len(text) <= 100_000
    assert text.endswith("[result cut: the MCP server's answer was 419,430,500 bytes, more than "
                         "the 4,194,304 bytes read of one message; only its first part is "
                         "shown]")
    spoofed = SimpleNamespace(content=[SimpleNamespace(type="text", text="hi")],
                              structured_content=None, meta={CUT_META_KEY: {"bytes": "lots"}})
    assert render_result(spoofed) == "hi"


# -- the HTTP bodies --------------------------------------------------------------------------


class Chunks:
    """An httpx byte stream that yields given chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk

    async def aclose(self) -> None:
        pass


def collect(stream: Any) -> bytes:
    async def gather() -> bytes:
        return b"".join([part async for part in stream])
    return asyncio.run(gather())


def split_everywhere(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


EVENTS = (b'event: message\r\nid: 1\r\ndata: {"jsonrpc":"2.0","method":"ping"}\r\n\r\n'
          b': keep-alive\n\n'
          b'data: {"jsonrpc":"2.0","id":4,\ndata: "result":{}}\r\r')


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64])
def test_events_within_the_bound_pass_whatever_the_chunking(size: int) -> None:
    passed = collect(_EventStream(Chunks(split_everywhere(EVENTS, size)), 4096, None))  # type: ignore[arg-type]
    assert passed == EVENTS.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def test_an_oversized_event_is_replaced_by_the_cut_message_and_the_next_passes() -> None:
    big = json.dumps({"jsonrpc": "2.0", "id": 0, "result": {"content": [
        {"type": "text", "text": "y" * 50_000}]}}).encode()
    stream = b"id: 9\ndata: " + big + b"\n\n" + b'data: {"jsonrpc":"2.0","method":"ping"}\n\n'
    passed = collect(_EventStream(Chunks(split_everywhere(stream, 1000)), 8192, 12))  # type: ignore[arg-type]
    first, second, rest = passed.split(b"\n\n")
    assert second == b'data: {"jsonrpc":"2.0","method":"ping"}' and rest == b""
    lines = first.split(b"\n")
    assert lines[:2] == [b"event: message", b"id: 9"]
    message = json.loads(lines[2].removeprefix(b"data: "))
    assert message["id"] == 12 and message["result"]["content"][0]["text"].startswith("yyy")
    assert message["result"]["_meta"][CUT_META_KEY]["bytes"] == len(b"id: 9\ndata: " + big + b"\n")


def test_a_json_body_over_the_bound_is_cut_for_the_request_it_answers() -> None:
    body = huge_result("z" * 100_000)
    passed = collect(_JSONBody(Chunks(split_everywhere(body, 4096)), 10_000, 3))  # type: ignore[arg-type]
    message = json.loads(passed)
    assert message["id"] == 3 and message["result"]["content"][0]["text"].startswith("zzz")
    small = b'{"jsonrpc":"2.0","id":3,"result":{}}'
    assert collect(_JSONBody(Chunks([small]), 10_000, 3)) == small  # type: ignore[arg-type]
