"""``toolwire serve --demo`` answers each request's own tools, ``tool_choice`` and
``response_format``, honours the session options a chat honours and refuses the ones
its stand-in cannot use (issue 29, item 9; issue 28, item 6).

A real ``serve --demo`` process (the tiny llama.cpp model, forced by a grammar) on
127.0.0.1, spoken to by the real ``openai`` SDK and ``/v1/chat``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import openai
import pytest

from tests.apps.test_server import json_request, request, sse_items, wait_for
from tests.support.tiers import needs
from toolwire.apps.cli.demo import EXAMPLE_TEXT

pytest.importorskip("llama_cpp")

WEATHER: Any = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object",
                                          "properties": {"city": {"type": "string"}},
                                          "required": ["city"]}}}
SEARCH: Any = {"type": "function", "function": {
    "name": "search_text", "parameters": {"type": "object",
                                          "properties": {"pattern": {"type": "string"}},
                                          "required": ["pattern"]}}}
ASK: Any = [{"role": "user", "content": "Weather in Tokyo?"}]
FUNCTIONS = '''def greet(name: str) -> str:
    """Greet someone.

    :param name: who to greet
    """
    return f"hello {name}!"
'''


def toolwire(*args: str, cwd: Path | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TOOLWIRE_LOAD_PLUGINS": ""}
    return subprocess.run([sys.executable, "-m", "toolwire", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd)


@pytest.fixture(scope="module")
@needs("process")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``serve --demo --functions mine.py --max-tool-iters 2``; yields the base URL."""
    folder = tmp_path_factory.mktemp("demo")
    (folder / "mine.py").write_text(FUNCTIONS)
    env = {**os.environ, "TOOLWIRE_LOAD_PLUGINS": ""}
    proc = subprocess.Popen([sys.executable, "-m", "toolwire", "serve", "--demo", "--port", "0",
                             "--functions", str(folder / "mine.py"), "--max-tool-iters", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    assert proc.stderr is not None
    base = ""
    for line in proc.stderr:
        if "OpenAI API: http://" in line:
            base = line.split("OpenAI API: ", 1)[1].split("/v1", 1)[0]
            break
    assert base, "serve did not print its address"
    def ready() -> bool:
        try:
            return json_request(base, "GET", "/healthz")[0] == 200
        except OSError:  # bound, not listening yet
            return False

    try:
        wait_for(ready, timeout=60)
        yield base
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


def sdk(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=60)


def calls_of(base: str, **body: Any) -> tuple[list[tuple[str, Any]], str | None, str]:
    reply = sdk(base).chat.completions.create(model="toolwire-demo", messages=ASK, **body)
    message = reply.choices[0].message
    return ([(c.function.name, json.loads(c.function.arguments))  # type: ignore[union-attr]
             for c in message.tool_calls or []], reply.choices[0].finish_reason,
            message.content or "")


def test_the_requests_own_tool_is_called_when_it_is_the_only_one(demo: str) -> None:
    for choice in ("auto", "required", {"type": "function", "function": {"name": "get_weather"}}):
        calls, finish, _ = calls_of(demo, tools=[WEATHER], tool_choice=choice)
        assert calls == [("get_weather", {"city": EXAMPLE_TEXT})] and finish == "tool_calls"


def test_a_named_tool_choice_is_the_tool_called_streamed_too(demo: str) -> None:
    named: Any = {"type": "function", "function": {"name": "search_text"}}
    calls, _, _ = calls_of(demo, tools=[WEATHER, SEARCH], tool_choice=named)
    assert calls == [("search_text", {"pattern": "Alex"})]
    stream = sdk(demo).chat.completions.create(
        model="toolwire-demo", messages=ASK, tools=[SEARCH, WEATHER], stream=True,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    names = [c.function.name for chunk in stream for choice in chunk.choices  # type: ignore
             for c in choice.delta.tool_calls or []]
    assert names == ["get_weather"]


def test_tool_choice_none_gets_words_not_a_call(demo: str) -> None:
    calls, finish, content = calls_of(demo, tools=[WEATHER, SEARCH], tool_choice="none")
    assert calls == [] and finish == "stop" and "No tool is offered" in content


def test_a_response_format_gets_a_json_value_of_its_schema(demo: str) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"},
                                               "days": {"type": "integer", "minimum": 1}},
              "required": ["city", "days"], "additionalProperties": False}
    _, finish, content = calls_of(demo, response_format={"type": "json_schema", "json_schema": {
        "name": "forecast", "schema": schema, "strict": True}})
    jsonschema.validate(json.loads(content), schema)
    assert finish == "stop"


def test_the_chat_route_calls_the_users_function_and_stops_at_max_tool_iters(demo: str) -> None:
    conn, response = request(demo, "POST", "/v1/chat",
                             {"messages": [{"role": "user", "content": "hi"}]})
    items = list(sse_items(response))
    conn.close()
    calls = [i for i in items if i["type"] == "tool_call"]
    assert [(c["name"], c["arguments"]) for c in calls] == [("greet", {"name": EXAMPLE_TEXT})]
    results = [i["content"] for i in items if i["type"] == "tool_result"]
    assert results == [f"hello {EXAMPLE_TEXT}!"]
    assert items[-1]["type"] == "done" and items[-1]["turns"] <= 2


@pytest.mark.process
@pytest.mark.parametrize("option", [["--workspace", "/tmp"], ["--ctx-size", "512"],
                                    ["--temperature", "0.2"], ["--family", "qwen_xml"],
                                    ["--base-url", "http://127.0.0.1:1"],
                                    ["--chat-template-file", "t.jinja"]])
def test_options_the_stand_in_cannot_use_are_input_errors(option: list[str]) -> None:
    run = toolwire("serve", "--demo", "--port", "0", *option, timeout=60)
    assert run.returncode == 2, run.stderr
    assert option[0] in run.stderr and "--demo" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.model
def test_no_tools_and_read_only_are_honoured() -> None:
    import argparse

    from toolwire.apps.cli.serve import make_chat_factory, register
    from toolwire.testing import isolated_plugin_manager

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    make_chat, _ = make_chat_factory(parser.parse_args(["serve", "--demo", "--no-tools",
                                                        "--max-tool-iters", "3",
                                                        "--read-only"]),
                                     isolated_plugin_manager())
    chat = make_chat((), None)
    assert list(chat.registry) == [] and chat.read_only and chat.max_tool_iters == 3


@pytest.mark.process
def test_serve_help_prints_its_limits_as_integers() -> None:
    run = toolwire("serve", "--help")
    assert run.returncode == 0
    text = " ".join(run.stdout.split())
    assert "(default: 2,000,000 characters)" in text and "(default: 8 MiB)" in text
    assert "e+" not in text
