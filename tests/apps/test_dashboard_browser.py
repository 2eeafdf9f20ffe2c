"""The dashboard page in a real headless Chromium (Playwright), against the real server.

Needs Debian's Chromium at /usr/bin/chromium (``scripts/ensure_chromium`` installs
it; CI runs that): the module skips only when it is missing. Playwright for Python
(the ``test`` extra) drives it; never run ``playwright install``.
The chat-page features (kept conversations, Markdown, approval, export and import...)
are tested in ``test_dashboard_page.py``, which also takes the README's screenshot.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import ask, skip_without_chromium

skip_without_chromium()

from playwright.sync_api import Page, expect  # noqa: E402

from tests.apps.test_server import ANSWER, CALL, lookup, running_server, scripted_app  # noqa: E402
from toolwire import Chat, Message, ModelRequest, TurnEnd  # noqa: E402
from toolwire.apps.cli.serve import make_chat_factory  # noqa: E402
from toolwire.apps.cli.serve import register as add_serve_command  # noqa: E402
from toolwire.apps.server.app import create_app  # noqa: E402
from toolwire.events import Event  # noqa: E402
from toolwire.testing import ScriptedBackend, isolated_plugin_manager  # noqa: E402
from toolwire.vocabulary.cancel import CancelToken  # noqa: E402


@pytest.mark.model
def test_demo_reply_shows_the_tool_call_its_result_and_the_answer(
        page: Page, tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp")
    parser = argparse.ArgumentParser()
    add_serve_command(parser.add_subparsers())
    make_chat, label = make_chat_factory(parser.parse_args(["serve", "--demo"]),
                                         isolated_plugin_manager())
    seen: list[Sequence[Message]] = []

    def recording(history: Sequence[Message], system: str | None) -> Chat:
        seen.append(tuple(history))
        return make_chat(history, system)

    with running_server(create_app(recording, model=label)) as base:
        page.goto(base + "/")
        expect(page.get_by_test_id("model")).to_contain_text("demo")
        ask(page, "What do my notes say about Alex?")

        call = page.locator('[data-testid="tool-call"][data-name="search_text"]')
        expect(call).to_have_attribute("data-state", "done")
        expect(call.get_by_test_id("tool-name")).to_have_text("search_text")
        expect(call.get_by_test_id("tool-args")).to_contain_text('"pattern": "Alex"')
        result = call.get_by_test_id("tool-result")
        expect(result).to_contain_text("notes/people.md:3: Alex")
        expect(result).not_to_have_class("tool-result error")
        expect(page.get_by_test_id("done")).to_have_attribute("data-reason", "stop")
        answer = page.get_by_test_id("assistant-text").last
        expect(answer).to_contain_text("Alex: maintains the parser plugins")
        expect(page.get_by_test_id("status")).to_have_attribute("data-state", "idle")
        expect(page.get_by_test_id("cancel")).to_be_disabled()

        page.screenshot(path=str(tmp_path / "demo.png"))
        assert (tmp_path / "demo.png").stat().st_size > 10_000

        # the page keeps the conversation in the OpenAI shape and posts it back whole
        conversation: list[dict[str, Any]] = page.evaluate(
            "window.toolwireDashboard.conversation")
        assert [m["role"] for m in conversation] == ["user", "assistant", "tool", "assistant"]
        (sent_call,) = conversation[1]["tool_calls"]
        assert sent_call["function"]["name"] == "search_text"
        assert json.loads(sent_call["function"]["arguments"]) == {"pattern": "Alex"}
        assert conversation[2]["tool_call_id"] == sent_call["id"]

        ask(page, "Thanks. Again?")
        expect(page.get_by_test_id("done")).to_have_count(2)
        expect(page.get_by_test_id("done").last).to_have_attribute("data-reason", "stop")

    # the first message went with no history (GET /v1/tools makes a chat with none too)
    assert all(history == () for history in seen[:-1])
    history = seen[-1]
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1].content.startswith("I will search the notes.")
    assert history[1].tool_calls[0].id == sent_call["id"]
    assert dict(history[1].tool_calls[0].arguments) == {"pattern": "Alex"}
    assert "notes/people.md:3: Alex" in history[2].content
    assert "Alex: maintains the parser plugins" in history[3].content


class SlowBackend(ScriptedBackend):
    """A scripted backend that takes its time over each piece it streams."""

    def stream_turn(self, request: ModelRequest,
                    cancel: CancelToken) -> Iterator[Event | TurnEnd]:
        for item in super().stream_turn(request, cancel):
            time.sleep(0.03)
            yield item


def test_cancel_button_stops_a_streaming_reply(page: Page) -> None:
    words = " ".join(f"word{i}" for i in range(150))
    backend = SlowBackend([words], chunk_size=6)
    with running_server(scripted_app(backend)) as base:
        page.goto(base + "/")
        ask(page, "talk for a while")
        expect(page.get_by_test_id("assistant-text")).to_contain_text("word1")
        expect(page.get_by_test_id("cancel")).to_be_enabled()
        page.get_by_test_id("cancel").click()
        expect(page.get_by_test_id("done")).to_have_attribute("data-reason", "cancelled")
        expect(page.get_by_test_id("status")).to_have_attribute("data-state", "cancelled")
        expect(page.get_by_test_id("cancel")).to_be_disabled()
        expect(page.get_by_test_id("send")).to_be_enabled()
        shown = page.get_by_test_id("assistant-text").inner_text()
        assert shown and len(shown) < len(words)
        assert backend.closed_early == 1
        conversation = page.evaluate("window.toolwireDashboard.conversation")
        assert conversation[0] == {"role": "user", "content": "talk for a while"}
        assert conversation[1]["role"] == "assistant"
        assert conversation[1]["content"] == shown


def test_tool_arguments_stream_into_the_call_card_while_written(page: Page) -> None:
    slow_call = ("Looking.\n<tool_call>\n<function=lookup>\n<parameter=name>\n"
                 "alex from the parser team\n</parameter>\n</function>\n</tool_call>")
    backend = SlowBackend([slow_call, ANSWER], chunk_size=2)
    with running_server(scripted_app(backend)) as base:
        page.goto(base + "/")
        ask(page, "who is alex?")
        card = page.locator('[data-testid="tool-call"][data-name="lookup"]')
        # while the model writes the call, the parameter's text grows in place
        page.wait_for_function("""() => {
            const card = document.querySelector('[data-testid="tool-call"][data-name="lookup"]');
            return card !== null && card.dataset.state === "writing"
                && card.querySelector(".tool-args").textContent.startsWith("name: alex");
        }""")
        # then the complete call replaces it, and its result follows
        expect(card.get_by_test_id("tool-args")).to_contain_text(
            '"name": "alex from the parser team"')
        expect(card).to_have_attribute("data-state", "done")
        expect(page.get_by_test_id("done")).to_have_attribute("data-reason", "stop")


def test_reasoning_and_a_failed_call_are_shown_as_such(page: Page) -> None:
    reply = ("<think>\nThe user wants alex; there is a tool.\n</think>\n\nChecking.\n"
             "<tool_call>\n<function=nope>\n<parameter=q>\nalex\n</parameter>\n</function>\n"
             "</tool_call>")
    backend = ScriptedBackend([reply, CALL, ANSWER])
    with running_server(scripted_app(backend, tools=(lookup,))) as base:
        page.goto(base + "/")
        ask(page, "who is alex?")
        expect(page.get_by_test_id("done")).to_have_attribute("data-reason", "stop")
        reasoning = page.get_by_test_id("reasoning")
        expect(reasoning).to_contain_text("The user wants alex")
        expect(reasoning).not_to_have_attribute("open", "")  # collapsed once the answer began
        failed = page.locator('[data-testid="tool-call"][data-name="nope"]')
        expect(failed).to_have_attribute("data-state", "error")
        expect(failed.get_by_test_id("tool-result")).to_have_class("tool-result error")
        expect(failed.get_by_test_id("tool-state")).to_have_text("unknown_tool")
        ok = page.locator('[data-testid="tool-call"][data-name="lookup"]')
        expect(ok.get_by_test_id("tool-result")).to_contain_text("a colleague")
        expect(page.get_by_test_id("assistant-text").last).to_have_text(ANSWER)
    conversation = page.evaluate("window.toolwireDashboard.conversation")
    assert [m["role"] for m in conversation] == ["user", "assistant", "tool", "assistant",
                                                 "tool", "assistant"]
    assert conversation[1]["reasoning"].strip() == "The user wants alex; there is a tool."
    assert conversation[2]["is_error"] is True
