"""The dashboard as people use a chat page, in a real headless Chromium against the real server.

Kept in the browser, Markdown rendered safely, export and import in the stored format,
per-conversation settings, approval of writes, token figures, copy, regenerate, stop and
the keyboard. The browser and page fixtures (and the skip without Chromium) are those of
``test_dashboard_browser``; every page fails its test on a script error or a CSP
violation. ``TOOLWIRE_UPDATE_SCREENSHOT=1`` rewrites ``docs/dashboard.png``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import ask, open_page, skip_without_chromium

skip_without_chromium()

from playwright.sync_api import Browser, Page, expect  # noqa: E402

from tests.apps.test_dashboard_browser import SlowBackend  # noqa: E402
from tests.apps.test_dashboard_routes import SAVED, WRITE_CALL, note_writer  # noqa: E402
from tests.apps.test_server import (  # noqa: E402
    ANSWER,
    CALL,
    lookup,
    running_server,
    scripted_app,
)
from tests.support.paths import DOCS  # noqa: E402
from toolwire import Chat, Message, from_stored, to_stored, tool  # noqa: E402
from toolwire.apps.server.app import create_app, messages_from_openai  # noqa: E402
from toolwire.testing import ScriptedBackend, isolated_plugin_manager  # noqa: E402

MARKDOWN_ANSWER = ("Here is **what I found**:\n\n- alex: maintains the parsers\n- sam: writes "
                   "the docs\n\n```python\nprint('alex')\n```\n")
XSS_REPLY = ("Careful: <img src=x onerror=\"window.__xss='reply img'\"> and "
             "<script>window.__xss='reply script'</script> and "
             "[a link](javascript:window.__xss='reply link') and "
             "<a href=\"javascript:window.__xss='html link'\">html link</a>.")
XSS_CALL = ("<tool_call>\n<function=fetch_page>\n<parameter=url>\nhttp://example.test\n"
            "</parameter>\n</function>\n</tool_call>")


@tool(read_only=True)
def fetch_page(url: str) -> str:
    """Fetch a web page (returns hostile HTML).

    :param url: the page
    """
    return ("<img src=x onerror=\"window.__xss='result img'\">"
            "<script>window.__xss='result script'</script>")


def conversation(page: Page) -> list[dict[str, Any]]:
    value: list[dict[str, Any]] = page.evaluate("window.toolwireDashboard.conversation")
    return value


def wait_idle(page: Page, replies: int) -> None:
    expect(page.get_by_test_id("done")).to_have_count(replies)
    expect(page.get_by_test_id("send")).to_be_enabled()


def recording_app(backend: Any, tools: Sequence[Any] = (lookup,), **options: Any,
                  ) -> tuple[Any, list[tuple[tuple[Message, ...], str | None]]]:
    """A scripted app that records each chat's history and system prompt."""
    seen: list[tuple[tuple[Message, ...], str | None]] = []

    def make_chat(history: Sequence[Message], system: str | None) -> Chat:
        seen.append((tuple(history), system))
        return Chat(backend, tools=list(tools), history=history, system_prompt=system,
                    plugins=isolated_plugin_manager())

    return create_app(make_chat, model="scripted", **options), seen


@pytest.fixture
def wide_page(browser: Browser) -> Iterator[Page]:
    """A page 1280x800: wide enough for the settings panel to open by itself."""
    with open_page(browser, 1280, 800) as opened:
        yield opened


# -- kept in the browser ----------------------------------------------------------------


def test_a_reload_keeps_the_conversation_and_its_settings(page: Page) -> None:
    backend = ScriptedBackend([CALL, MARKDOWN_ANSWER, ANSWER])
    app, seen = recording_app(backend)
    with running_server(app) as base:
        page.goto(base + "/")
        page.get_by_test_id("settings-toggle").click()
        page.get_by_test_id("system-prompt").fill("Answer in one line.")
        ask(page, "who is alex?")
        wait_idle(page, 1)
        before = conversation(page)
        shown = page.get_by_test_id("transcript").inner_text()

        page.reload()
        expect(page.get_by_test_id("user-message")).to_have_count(1)
        assert conversation(page) == before
        assert page.get_by_test_id("transcript").inner_text() == shown
        card = page.locator('[data-testid="tool-call"][data-name="lookup"]')
        expect(card).to_have_attribute("data-state", "done")
        expect(page.locator('[data-testid="assistant-text"] strong')).to_have_text(
            "what I found")
        expect(page.get_by_test_id("stats")).to_have_count(1)
        expect(page.get_by_test_id("conversation")).to_have_count(1)
        expect(page.get_by_test_id("conversation")).to_contain_text("who is alex?")
        page.get_by_test_id("settings-toggle").click()
        expect(page.get_by_test_id("system-prompt")).to_have_value("Answer in one line.")

        ask(page, "and sam?")  # the kept conversation is what the model sees next
        wait_idle(page, 2)
    history, system = seen[-1]
    assert system == "Answer in one line."
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[3].content == MARKDOWN_ANSWER


def test_conversations_are_listed_switched_and_deleted(page: Page) -> None:
    backend = ScriptedBackend(["First answer.", "Second answer."])
    with running_server(scripted_app(backend)) as base:
        page.goto(base + "/")
        ask(page, "first question")
        wait_idle(page, 1)
        page.get_by_test_id("reset").click()
        expect(page.get_by_test_id("user-message")).to_have_count(0)
        ask(page, "second question")
        wait_idle(page, 1)
        items = page.get_by_test_id("conversation")
        expect(items).to_have_count(2)
        expect(items.first).to_contain_text("second question")  # the latest first
        expect(items.first).to_have_attribute("aria-current", "true")

        items.nth(1).locator(".open").click()
        expect(page.get_by_test_id("user-text")).to_have_text("first question")
        expect(page.get_by_test_id("assistant-text")).to_have_text("First answer.")

        page.reload()
        expect(page.get_by_test_id("user-text")).to_have_text("first question")
        remove = page.locator('[data-testid="conversation"][aria-current="true"] '
                              '[data-testid="delete-conversation"]')
        remove.click()
        expect(page.get_by_test_id("conversation")).to_have_count(2)  # asks first
        remove.click()
        expect(page.get_by_test_id("conversation")).to_have_count(1)
        expect(page.get_by_test_id("user-text")).to_have_text("second question")
        page.reload()
        expect(page.get_by_test_id("conversation")).to_have_count(1)
        expect(page.get_by_test_id("conversation")).to_contain_text("second question")


def titles(page: Page) -> list[str]:
    return page.locator('[data-testid="conversation"] .open').all_inner_texts()


def test_two_tabs_never_delete_each_others_conversations(page: Page) -> None:
    """Issue 40, item 3: each tab wrote its own list over the other's."""
    backend = ScriptedBackend(["One.", "Two.", "Three.", "Four."])
    with running_server(scripted_app(backend)) as base:
        page.goto(base + "/")
        ask(page, "from tab a")
        wait_idle(page, 1)
        other = page.context.new_page()
        other.goto(base + "/")
        expect(other.get_by_test_id("conversation")).to_have_count(1)
        other.get_by_test_id("reset").click()
        ask(other, "from tab b")
        wait_idle(other, 1)
        expect(page.get_by_test_id("conversation")).to_have_count(2)  # seen in tab a
        page.get_by_test_id("reset").click()
        ask(page, "again from tab a")
        wait_idle(page, 1)
        expect(other.get_by_test_id("conversation")).to_have_count(3)
        # a deletion in one tab is a deletion in the other, and never comes back
        remove = other.locator('[data-testid="conversation"]', has_text="from tab b").locator(
            '[data-testid="delete-conversation"]')
        remove.click()
        remove.click()
        expect(page.get_by_test_id("conversation")).to_have_count(2)
        ask(page, "more from tab a")
        wait_idle(page, 2)
        other.close()
        page.reload()
        expect(page.get_by_test_id("conversation")).to_have_count(2)
        assert sorted(titles(page)) == sorted(["again from tab a", "from tab a"])


_FILL_STORAGE = """(room) => {
  // fill the origin's storage to the browser's own limit, then give back about `room` chars
  const sizes = [];
  let size = 1 << 20;
  while (size >= 256) {
    try { localStorage.setItem("filler." + sizes.length, "x".repeat(size)); sizes.push(size); }
    catch (err) { size = size >> 1; }
  }
  let freed = 0;
  for (let i = sizes.length - 1; i >= 0 && freed < room; i--) {
    localStorage.removeItem("filler." + i); freed += sizes[i];
  }
  return freed;
}"""


def test_a_conversation_over_the_browsers_quota_is_reported_and_the_others_still_kept(
        page: Page) -> None:
    backend = ScriptedBackend(["Short.", "y" * 60_000, "Short again."], chunk_size=4096)
    with running_server(scripted_app(backend)) as base:
        page.goto(base + "/")
        assert 20_000 <= page.evaluate(_FILL_STORAGE, 20_000) < 60_000
        ask(page, "small talk")
        wait_idle(page, 1)
        page.get_by_test_id("reset").click()
        ask(page, "a long one")
        wait_idle(page, 1)
        notice = page.get_by_test_id("notice")
        expect(notice).to_contain_text("Could not keep the latest changes of “a long one”")
        expect(notice).to_contain_text("Every other conversation is kept")
        page.locator('[data-testid="conversation"]', has_text="small talk").locator(
            ".open").click()
        ask(page, "and more")
        wait_idle(page, 2)
        page.reload()  # what was kept: the small conversation, whole
        page.locator('[data-testid="conversation"]', has_text="small talk").locator(
            ".open").click()
        expect(page.get_by_test_id("assistant-text")).to_have_text(["Short.", "Short again."])


def test_conversations_kept_by_the_earlier_page_are_read_and_kept_one_by_one(
        page: Page) -> None:
    old = {"version": 1, "current": "old-1", "conversations": [
        {"id": "old-1", "title": "", "created": 1, "updated": 2, "settings": {},
         "messages": [{"role": "user", "content": "kept from before"},
                      {"role": "assistant", "content": "Still here."}], "extras": {}}]}
    with running_server(scripted_app(ScriptedBackend([]))) as base:
        page.goto(base + "/")
        page.evaluate("(old) => localStorage.setItem('toolwire.dashboard.v1', old)",
                      json.dumps(old))
        page.reload()
        expect(page.get_by_test_id("user-text")).to_have_text("kept from before")
        keys = page.evaluate("Object.keys(localStorage)")
        assert "toolwire.dashboard.v1" not in keys
        assert "toolwire.dashboard.v2.conversation.old-1" in keys


# -- the stored format ------------------------------------------------------------------


def test_export_then_import_round_trips_in_the_stored_format(
        page: Page, tmp_path: Path) -> None:
    reply = ("<think>\nlook both up\n</think>\n\nChecking.\n<tool_call>\n<function=nope>\n"
             "<parameter=q>\nalex\n</parameter>\n</function>\n</tool_call>")
    backend = ScriptedBackend([reply, CALL, MARKDOWN_ANSWER])
    with running_server(scripted_app(backend)) as base:
        page.goto(base + "/")
        ask(page, "who is alex?")
        wait_idle(page, 1)
        original = conversation(page)
        with page.expect_download() as download:
            page.get_by_test_id("export").click()
        saved = tmp_path / download.value.suggested_filename
        download.value.save_as(saved)
        assert saved.name == "toolwire-who-is-alex.json"
        text = saved.read_text(encoding="utf-8")
        records = json.loads(text)

        # exactly what /save writes for this conversation, and --resume reads it back
        assert records == to_stored(messages_from_openai(original))
        assert text == json.dumps(records, ensure_ascii=False, indent=2) + "\n"
        resumed = Chat(ScriptedBackend([]))
        resumed.load(records)
        assert resumed.save() == records
        assert [r["role"] for r in records] == ["user", "assistant", "tool", "assistant",
                                                "tool", "assistant"]
        assert records[1]["reasoning"].strip() == "look both up"
        assert records[2]["is_error"] is True and records[2]["tool_name"] == "nope"

        exported_from = page.evaluate("window.toolwireDashboard.current")
        page.get_by_test_id("import-file").set_input_files(str(saved))
        expect(page.get_by_test_id("conversation")).to_have_count(2)
        assert page.evaluate("window.toolwireDashboard.current") != exported_from
        assert conversation(page) == original
        expect(page.get_by_test_id("tool-call")).to_have_count(2)
        expect(page.locator('[data-testid="tool-call"][data-name="nope"]')).to_have_attribute(
            "data-state", "error")
        expect(page.get_by_test_id("assistant-text").last).to_contain_text("what I found")


def test_a_file_saved_by_the_cli_imports_with_its_system_prompt(
        page: Page, tmp_path: Path) -> None:
    chat = Chat(ScriptedBackend([CALL, ANSWER]), tools=[lookup],
                plugins=isolated_plugin_manager())
    chat.ask("who is alex?")
    saved = tmp_path / "chat.json"
    records = [{"role": "system", "content": "Be brief."}, *chat.save()]
    saved.write_text(json.dumps(records, indent=2), encoding="utf-8")
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps([{"role": "user", "content": "hi"},
                                  {"role": "tool", "content": "x"}]), encoding="utf-8")
    backend = ScriptedBackend(["Sam writes the docs."])
    app, seen = recording_app(backend)
    with running_server(app) as base:
        page.goto(base + "/")
        page.get_by_test_id("import-file").set_input_files(str(broken))
        expect(page.get_by_test_id("notice")).to_contain_text(
            "stored message 1: tool record needs tool_name and tool_args")
        expect(page.get_by_test_id("user-message")).to_have_count(0)

        page.get_by_test_id("import-file").set_input_files(str(saved))
        expect(page.get_by_test_id("tool-result")).to_contain_text("a colleague")
        page.get_by_test_id("settings-toggle").click()
        expect(page.get_by_test_id("system-prompt")).to_have_value("Be brief.")
        ask(page, "and sam?")
        wait_idle(page, 1)
    history, system = seen[-1]
    assert system == "Be brief."
    assert to_stored(history) == chat.save()
    assert from_stored(chat.save())[1].tool_calls[0].id == history[1].tool_calls[0].id


# -- model output is untrusted ----------------------------------------------------------


def test_html_in_a_reply_or_a_tool_result_runs_nothing(page: Page) -> None:
    backend = ScriptedBackend([XSS_CALL, XSS_REPLY + "\n\n" + MARKDOWN_ANSWER])
    with running_server(scripted_app(backend, tools=(fetch_page,))) as base:
        page.goto(base + "/")
        ask(page, "fetch it")
        wait_idle(page, 1)
        page.wait_for_timeout(300)  # time for anything that would load or run
        assert page.evaluate("window.__xss") is None
        transcript = page.get_by_test_id("transcript")
        assert transcript.locator("img, script, iframe, [onerror], [onclick]").count() == 0
        hrefs = transcript.locator("a").evaluate_all("(links) => links.map((a) => a.href)")
        assert not any(h.lower().startswith("javascript:") for h in hrefs)
        answer = page.get_by_test_id("assistant-text").last
        expect(answer).to_contain_text("<img src=x onerror=")  # shown as the text it is
        expect(answer).to_contain_text("<script>window.__xss='reply script'</script>")
        result = page.get_by_test_id("tool-result")
        expect(result).to_have_text("<img src=x onerror=\"window.__xss='result img'\">"
                                    "<script>window.__xss='result script'</script>")
        # the Markdown around it still renders
        expect(answer.locator("strong")).to_have_text("what I found")
        expect(answer.locator("li")).to_have_count(2)
        expect(answer.locator("pre code")).to_have_text("print('alex')\n")
        page.reload()
        wait_idle(page, 1)
        page.wait_for_timeout(300)
        assert page.evaluate("window.__xss") is None
        assert transcript.locator("img, script, [onerror]").count() == 0


# -- approval of writes -----------------------------------------------------------------


def test_a_write_call_is_approved_or_denied_in_the_page(page: Page) -> None:
    writer, written = note_writer()
    backend = ScriptedBackend([WRITE_CALL, SAVED, WRITE_CALL, "Not saved, then."])
    with running_server(scripted_app(backend, tools=(lookup, writer), approvals=True)) as base:
        page.goto(base + "/")
        ask(page, "note: buy milk")
        card = page.locator('[data-testid="tool-call"][data-name="write_note"]')
        expect(card).to_have_attribute("data-state", "approval")
        expect(card.get_by_test_id("tool-args")).to_contain_text('"text": "buy milk"')
        expect(page.get_by_test_id("status")).to_have_attribute("data-state", "approval")
        page.wait_for_timeout(200)
        assert written == []  # it waits
        card.get_by_test_id("approve").click()
        expect(card).to_have_attribute("data-state", "done")
        expect(card.get_by_test_id("tool-result")).to_have_text("saved 'buy milk'")
        expect(card.get_by_test_id("approval")).to_have_count(0)
        wait_idle(page, 1)
        assert written == ["buy milk"]

        ask(page, "again")
        second = card.nth(1)
        expect(second).to_have_attribute("data-state", "approval")
        second.get_by_test_id("deny").click()
        expect(second).to_have_attribute("data-state", "error")
        expect(second.get_by_test_id("tool-state")).to_have_text("denied")
        expect(second.get_by_test_id("tool-result")).to_contain_text("did not allow")
        wait_idle(page, 2)
        expect(page.get_by_test_id("assistant-text").last).to_have_text("Not saved, then.")
    assert written == ["buy milk"]
    assert conversation(page)[-2]["is_error"] is True


def test_stop_while_a_write_waits_for_approval_cancels_the_reply(
        page: Page) -> None:
    writer, written = note_writer()
    with running_server(scripted_app(ScriptedBackend([WRITE_CALL, SAVED]), tools=(writer,),
                                     approvals=True)) as base:
        page.goto(base + "/")
        ask(page, "note: buy milk")
        card = page.get_by_test_id("tool-call")
        expect(card).to_have_attribute("data-state", "approval")
        page.keyboard.press("Escape")
        expect(page.get_by_test_id("done")).to_have_attribute("data-reason", "cancelled")
        expect(card).to_have_attribute("data-state", "error")
        expect(card.get_by_test_id("approval")).to_have_count(0)
    assert written == []


# -- stop, regenerate, keyboard, figures, copy ------------------------------------------


def test_escape_stops_a_streaming_reply(page: Page) -> None:
    words = " ".join(f"word{i}" for i in range(150))
    backend = SlowBackend([words], chunk_size=6)
    with running_server(scripted_app(backend)) as base:
        page.goto(base + "/")
        ask(page, "talk for a while")
        expect(page.get_by_test_id("assistant-text")).to_contain_text("word1")
        page.get_by_test_id("input").press("Escape")
        expect(page.get_by_test_id("done")).to_have_attribute("data-reason", "cancelled")
        expect(page.get_by_test_id("status")).to_have_attribute("data-state", "cancelled")
        expect(page.get_by_test_id("cancel")).to_be_disabled()
    assert backend.closed_early == 1
    assert len(conversation(page)[1]["content"]) < len(words)


def test_regenerate_answers_the_last_message_again(page: Page) -> None:
    backend = ScriptedBackend(["One answer.", "Another answer."])
    app, seen = recording_app(backend)
    with running_server(app) as base:
        page.goto(base + "/")
        expect(page.get_by_test_id("regenerate")).to_be_disabled()
        ask(page, "say something")
        wait_idle(page, 1)
        page.get_by_test_id("regenerate").click()
        expect(page.get_by_test_id("assistant-text")).to_have_text("Another answer.")
        wait_idle(page, 1)
        expect(page.get_by_test_id("user-message")).to_have_count(1)
    assert conversation(page) == [{"role": "user", "content": "say something"},
                                  {"role": "assistant", "content": "Another answer."}]
    assert seen[-1] == ((), None)  # the first answer is not in what the model sees


def test_enter_sends_and_shift_enter_starts_a_new_line(page: Page) -> None:
    backend = ScriptedBackend(["Two lines, noted."])
    with running_server(scripted_app(backend)) as base:
        page.goto(base + "/")
        box = page.get_by_test_id("input")
        box.type("line one")
        box.press("Shift+Enter")
        box.type("line two")
        expect(page.get_by_test_id("user-message")).to_have_count(0)
        box.press("Enter")
        wait_idle(page, 1)
        expect(box).to_have_value("")
    assert backend.requests[0].messages[-1].content == "line one\nline two"
    assert conversation(page)[0]["content"] == "line one\nline two"


def test_token_counts_first_token_and_rate_come_with_each_reply(
        page: Page) -> None:
    backend = ScriptedBackend([CALL, ANSWER])
    with running_server(scripted_app(backend)) as base:
        page.goto(base + "/")
        ask(page, "who is alex?")
        wait_idle(page, 1)
        stats = page.get_by_test_id("stats")
        tokens = int(stats.get_attribute("data-tokens") or 0)
        ttft = float(stats.get_attribute("data-ttft") or -1)
        rate = float(stats.get_attribute("data-tps") or 0)
    assert tokens == (len(CALL) // 4 + 1) + (len(ANSWER) // 4 + 1)  # usage, both turns
    assert ttft >= 0 and rate > 0
    expect(stats).to_contain_text(f"{tokens} tokens")
    expect(stats).to_contain_text("tokens/s")
    expect(stats).to_contain_text("first token")


def test_copy_buttons_copy_a_message_and_a_code_block(wide_page: Page) -> None:
    page = wide_page
    backend = ScriptedBackend([MARKDOWN_ANSWER])
    with running_server(scripted_app(backend)) as base:
        page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
        page.goto(base + "/")
        ask(page, "who?")
        wait_idle(page, 1)
        reply = page.get_by_test_id("assistant-message")
        reply.get_by_test_id("copy").click()
        expect(reply.get_by_test_id("copy")).to_have_attribute("data-copied", "yes")
        assert page.evaluate("navigator.clipboard.readText()") == conversation(page)[1]["content"]
        assert conversation(page)[1]["content"].startswith("Here is **what I found**")
        reply.get_by_test_id("copy-code").click()
        assert page.evaluate("navigator.clipboard.readText()") == "print('alex')\n"
        page.get_by_test_id("user-message").get_by_test_id("copy").click()
        assert page.evaluate("navigator.clipboard.readText()") == "who?"


# -- settings ---------------------------------------------------------------------------


def test_settings_show_the_tools_with_badges_and_narrow_what_is_offered(
        page: Page) -> None:
    writer, _ = note_writer()
    backend = ScriptedBackend(["a", "b", "c"])
    with running_server(scripted_app(backend, tools=(lookup, writer))) as base:
        page.goto(base + "/")
        page.get_by_test_id("settings-toggle").click()
        expect(page.get_by_test_id("backend")).to_have_text("scripted")
        expect(page.get_by_test_id("settings-model")).to_have_text("scripted")
        tools = page.get_by_test_id("tool")
        expect(tools).to_have_count(2)
        expect(tools.nth(0).get_by_test_id("tool-badge")).to_have_text("read")
        expect(tools.nth(1).get_by_test_id("tool-badge")).to_have_text("write")
        ask(page, "one")
        wait_idle(page, 1)

        page.get_by_test_id("read-only").check()
        expect(tools.nth(1).get_by_test_id("tool-enabled")).to_be_disabled()
        ask(page, "two")
        wait_idle(page, 2)

        page.get_by_test_id("read-only").uncheck()
        tools.nth(0).get_by_test_id("tool-enabled").uncheck()
        page.reload()  # the choice is the conversation's, kept with it
        page.get_by_test_id("settings-toggle").click()
        expect(page.get_by_test_id("tool").nth(0).get_by_test_id("tool-enabled")).not_to_be_checked()
        ask(page, "three")
        wait_idle(page, 3)
    offered = [[t.name for t in r.tools] for r in backend.requests]
    assert offered == [["lookup", "write_note"], ["lookup"], ["write_note"]]


# -- the screenshot in the README -------------------------------------------------------


def test_screenshot_of_a_conversation_waiting_for_approval(
        wide_page: Page, tmp_path: Path) -> None:
    page = wide_page
    writer, _ = note_writer()
    note_call = WRITE_CALL.replace("buy milk", "Alex reviews the parser PRs.")
    backend = SlowBackend(["The release is planned for **Friday**; the checklist is in "
                           "`docs/release.md`.", CALL, MARKDOWN_ANSWER, note_call, SAVED])
    with running_server(scripted_app(backend, tools=(lookup, writer), approvals=True)) as base:
        page.goto(base + "/")
        expect(page.get_by_test_id("settings")).to_be_visible()  # open on a wide window
        ask(page, "When is the release?")
        wait_idle(page, 1)
        page.get_by_test_id("reset").click()
        page.get_by_test_id("system-prompt").fill("You keep the team's notes.")
        ask(page, "Who is Alex?")
        wait_idle(page, 1)
        ask(page, "Add a note: Alex reviews the parser PRs.")
        expect(page.get_by_test_id("approve")).to_be_visible()
        target = DOCS if os.environ.get("TOOLWIRE_UPDATE_SCREENSHOT") == "1" else tmp_path
        page.screenshot(path=str(target / "dashboard.png"))
        assert (target / "dashboard.png").stat().st_size > 30_000
        page.get_by_test_id("approve").click()
        wait_idle(page, 2)
