"""Histories and requests real chat templates refuse unless the endpoint adapts them
(issue 29, item 4): call ids another provider made, and a turn without tools for a
template that iterates its tools whatever it is given.

A tiny real llama.cpp model (random weights) carries each real template behind
a real server on 127.0.0.1, spoken to by the ``openai`` SDK; the prompt the
template rendered is read back from the backend.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.apps.test_server import running_server
from tests.support.templates import shared_template
from tests.support.tiers import needs
from toolwire import Chat
from toolwire.apps.server.app import create_app
from toolwire.apps.server.call_id_forms import CallIdForm, with_template_ids
from toolwire.apps.server.completion_request import parse_completion_request
from toolwire.apps.server.model_route import model_request_for
from toolwire.limits import ServerLimits
from toolwire.testing import isolated_plugin_manager, write_tiny_gguf
from toolwire.testing.tiny_gguf import TINY_BACKEND_OPTIONS
from toolwire.vocabulary.call_ids import default_call_id, nine_char_call_id
from toolwire.vocabulary.history import Message, ToolCall

pytest.importorskip("llama_cpp")
from toolwire.plugins.llama_cpp import LlamaCppBackend

WEATHER: Any = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object",
                                          "properties": {"city": {"type": "string"}}}}}
FOREIGN = ["call_9kYt2QxTq8mZ1vB4nR7wL0aS", "toolu_01A09q90qw90lq917835lq9", "x"]


def history(ids: list[str]) -> list[dict[str, Any]]:
    """A conversation whose earlier calls carry ``ids`` (another provider's)."""
    records: list[dict[str, Any]] = [{"role": "user", "content": "Weather in three cities?"}]
    records.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function",
         "function": {"name": "get_weather", "arguments": f'{{"city": "c{n}"}}'}}
        for n, i in enumerate(ids)]})
    records += [{"role": "tool", "tool_call_id": i, "content": f"sunny {n}"}
                for n, i in enumerate(ids)]
    return records


def tiny_backend(folder: Path, template: str) -> LlamaCppBackend:
    source = shared_template(template)
    extra = sorted({c for c in source if ord(c) > 127})
    path = write_tiny_gguf(folder / "tiny.gguf", source, sample_bytes=False, extra_tokens=extra)
    return LlamaCppBackend(path, n_ctx=4096, max_tokens=16, temperature=0.0,
                           plugins=isolated_plugin_manager(),
                           **TINY_BACKEND_OPTIONS)  # type: ignore[arg-type]


@pytest.fixture(scope="module", params=["Mistral-Small-3.2-24B-Instruct-2506.jinja",
                                        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja"])
@needs("model")
def served(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, LlamaCppBackend]]:
    backend = tiny_backend(tmp_path_factory.mktemp("template"), request.param)

    def make_chat(past: Any, system: str | None) -> Chat:
        return Chat(backend, history=past, plugins=isolated_plugin_manager())

    try:
        with running_server(create_app(make_chat, backend=backend, model="tiny")) as base:
            yield base, backend
    finally:
        backend.close()


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=120)


def test_a_history_with_another_providers_call_ids_is_answered(
        served: tuple[str, LlamaCppBackend]) -> None:
    base, _ = served
    for stream in (False, True):
        reply = sdk(base).chat.completions.create(model="tiny", messages=history(FOREIGN),
                                                  tools=[WEATHER], max_tokens=4, stream=stream)
        if stream:
            finishes = [c.choices[0].finish_reason for c in reply if c.choices]
            assert finishes[-1] in ("stop", "length", "tool_calls")
        else:
            assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_a_request_without_tools_is_answered_by_every_template(
        served: tuple[str, LlamaCppBackend]) -> None:
    base, _ = served
    reply = sdk(base).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert reply.choices[0].finish_reason in ("stop", "length")


def test_foreign_ids_become_the_templates_form_the_same_in_the_call_and_its_result(
        served: tuple[str, LlamaCppBackend]) -> None:
    _, backend = served
    form = CallIdForm.of(backend.make_call_id)
    body = {"model": "tiny", "messages": history(FOREIGN), "tools": [WEATHER]}
    first = model_request_for(parse_completion_request(body, ServerLimits()), form)
    again = model_request_for(parse_completion_request(body, ServerLimits()), form)
    assert first.messages == again.messages  # the same prompt every time it is sent
    calls = first.messages[1].tool_calls
    assert [m.tool_call_id for m in first.messages[2:]] == [c.id for c in calls]
    assert len({c.id for c in calls}) == 3
    prompt = backend.render(first.messages, first.tool_schemas())
    assert form is not None and all(form.fits(c.id) for c in calls)
    shown = [c.id in prompt for c in calls]  # Mistral prints each id twice, Hermes none
    assert all(shown) or not any(shown)
    assert not any(foreign in prompt for foreign in FOREIGN[:2])


def test_the_form_is_learnt_from_the_backends_own_ids() -> None:
    nine = CallIdForm.of(nine_char_call_id)
    assert nine is not None and nine.length == 9 and nine.prefix == ""
    assert nine.fits("aB3dE5gH9") and not nine.fits("call_abc") and not nine.fits("aB3dE5gH_")
    default = CallIdForm.of(default_call_id)
    assert default is not None and default.prefix.startswith("call_")
    assert default.fits(default_call_id(0))
    assert CallIdForm.of(lambda i: f"functions.call:{i}") is None  # a counter: no fixed form


def test_ids_that_fit_are_kept_and_others_are_derived_without_collisions() -> None:
    form = CallIdForm.of(nine_char_call_id)
    own = "Ab12Cd34E"
    calls = [ToolCall(own, "t"), *(ToolCall(f"foreign-{n}", "t") for n in range(200))]
    messages = [Message.assistant("", calls), *(Message.tool_result(c, "r") for c in calls)]
    mapped = with_template_ids(messages, form)
    ids = [c.id for c in mapped[0].tool_calls]
    assert ids[0] == own and len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in ids)
    assert [m.tool_call_id for m in mapped[1:]] == ids
