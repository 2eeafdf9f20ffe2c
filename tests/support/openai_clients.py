"""One chat-completions request through every way a client reads the answer.

:func:`every_reading` sends the same request through the real ``openai`` SDK,
sync and async, streamed and not, and as raw server-sent events over
``http.client``, and returns what each read as one :class:`Reading`, so a test
asserts that all five agree and what they say.
"""

from __future__ import annotations

import asyncio
import http.client
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import openai

__all__ = ["Reading", "every_reading", "joined_chunks", "raw_sse"]


@dataclass
class Reading:
    """What one client read: the status (``200`` or the error's), the message, the end.

    :ivar calls: ``(name, arguments text)`` of each call, in order.
    :ivar dropped: the choice's ``dropped_tool_calls`` extension field (or ``[]``).
    :ivar error: the error object's ``param`` and ``code`` for a refused request.
    """

    status: int
    content: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)
    finish: str | None = None
    dropped: list[dict[str, Any]] = field(default_factory=list)
    error: tuple[str | None, str | None] | None = None
    ids: list[str] = field(default_factory=list)

    def what(self) -> tuple[Any, ...]:
        """Everything but the call ids (fresh for every request)."""
        return (self.status, self.content, self.calls, self.finish, self.dropped, self.error)


def joined_chunks(chunks: Iterable[dict[str, Any]]) -> Reading:
    """Streamed chunks (as JSON-ready dicts) put back together."""
    reading = Reading(200)
    calls: dict[int, list[str]] = {}
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            reading.content += delta.get("content") or ""
            reading.finish = choice.get("finish_reason") or reading.finish
            reading.dropped = choice.get("dropped_tool_calls") or reading.dropped
            for call in delta.get("tool_calls") or []:
                entry = calls.setdefault(call["index"], ["", "", ""])
                if call.get("id"):
                    assert not entry[2], "a call's id comes once"
                    entry[2] = call["id"]
                function = call.get("function") or {}
                entry[0] += function.get("name") or ""
                entry[1] += function.get("arguments") or ""
            legacy = delta.get("function_call")
            if legacy:
                entry = calls.setdefault(0, ["", "", ""])
                entry[0] += legacy.get("name") or ""
                entry[1] += legacy.get("arguments") or ""
    reading.calls = [(calls[i][0], calls[i][1]) for i in sorted(calls)]
    reading.ids = [calls[i][2] for i in sorted(calls) if calls[i][2]]
    return reading


def _whole(body: dict[str, Any]) -> Reading:
    choice = body["choices"][0]
    message = choice["message"]
    calls = [(c["function"]["name"], c["function"]["arguments"])
             for c in message.get("tool_calls") or []]
    if message.get("function_call"):
        calls = [(message["function_call"]["name"], message["function_call"]["arguments"])]
    return Reading(200, message.get("content") or "", calls, choice["finish_reason"],
                   choice.get("dropped_tool_calls") or [],
                   ids=[c["id"] for c in message.get("tool_calls") or []])


def _refused(exc: openai.APIStatusError) -> Reading:
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body) if isinstance(body, dict) else {}
    return Reading(exc.status_code, error=(error.get("param"), error.get("code")))


def raw_sse(base: str, body: dict[str, Any], headers: dict[str, str] | None = None
            ) -> tuple[int, dict[str, str], list[Any] | Any]:
    """POST ``body`` with ``stream: true`` over plain HTTP: the status, the headers and
    the decoded ``data:`` frames (``[DONE]`` kept as the string), or the JSON error."""
    conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]), timeout=60)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps({**body, "stream": True}),
                     headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        raw = response.read().decode("utf-8")
        got = {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()
    if response.status != 200:
        return response.status, got, json.loads(raw)
    assert raw.endswith("\n\ndata: [DONE]\n\n"), raw[-200:]
    frames = []
    for frame in raw.split("\n\n")[:-1]:
        assert frame.startswith("data: ") and "\n" not in frame, frame
        data = frame.removeprefix("data: ")
        frames.append(data if data == "[DONE]" else json.loads(data))
    return 200, got, frames


def every_reading(base: str, body: dict[str, Any]) -> dict[str, Reading]:
    """The request read five ways: ``sync``, ``sync-stream``, ``async``,
    ``async-stream`` (the ``openai`` SDK) and ``raw-sse``."""
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=60)
    out: dict[str, Reading] = {}
    try:
        out["sync"] = _whole(client.chat.completions.create(**body).model_dump())
    except openai.APIStatusError as exc:
        out["sync"] = _refused(exc)
    try:
        out["sync-stream"] = joined_chunks(
            c.model_dump() for c in client.chat.completions.create(**body, stream=True))
    except openai.APIStatusError as exc:
        out["sync-stream"] = _refused(exc)

    async def asynchronous() -> tuple[Reading, Reading]:
        aclient = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0,
                                     timeout=60)
        try:
            whole = _whole((await aclient.chat.completions.create(**body)).model_dump())
        except openai.APIStatusError as exc:
            whole = _refused(exc)
        try:
            stream = await aclient.chat.completions.create(**body, stream=True)
            streamed = joined_chunks([c.model_dump() async for c in stream])
        except openai.APIStatusError as exc:
            streamed = _refused(exc)
        await aclient.close()
        return whole, streamed

    out["async"], out["async-stream"] = asyncio.run(asynchronous())
    status, _, frames = raw_sse(base, body)
    if status == 200:
        assert frames[-1] == "[DONE]"
        out["raw-sse"] = joined_chunks(f for f in frames[:-1])
    else:
        error = frames["error"]
        out["raw-sse"] = Reading(status, error=(error.get("param"), error.get("code")))
    client.close()
    return out
