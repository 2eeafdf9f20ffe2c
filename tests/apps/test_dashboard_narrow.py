"""The dashboard on a narrow window, in a real headless Chromium against the real server:
below 700 px one column, the conversations and the settings as overlays, the message box
full width; at 800 px the columns side by side. Checked by the element boxes the browser
laid out (no two regions overlap, nothing leaves the window), with a screenshot of each
width kept for a person to look at."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import ask, open_page, skip_without_chromium

skip_without_chromium()

from playwright.sync_api import Browser, Page, expect  # noqa: E402

from tests.apps.test_server import ANSWER, CALL, running_server, scripted_app  # noqa: E402
from toolwire.testing import ScriptedBackend  # noqa: E402

Box = dict[str, float]


def box(page: Page, test_id: str) -> Box:
    found = page.get_by_test_id(test_id).bounding_box()
    assert found is not None, f"{test_id} is not laid out"
    return found


def overlap(a: Box, b: Box) -> bool:
    return (a["x"] < b["x"] + b["width"] - 0.5 and b["x"] < a["x"] + a["width"] - 0.5
            and a["y"] < b["y"] + b["height"] - 0.5 and b["y"] < a["y"] + a["height"] - 0.5)


def inside_width(b: Box, width: int) -> bool:
    return b["x"] >= -0.5 and b["x"] + b["width"] <= width + 0.5


def on_top(page: Page, test_id: str) -> bool:
    """Whether a click at the middle of ``test_id`` lands on it (nothing covers it)."""
    return bool(page.evaluate(
        """(id) => {
            const el = document.querySelector(`[data-testid="${id}"]`);
            const r = el.getBoundingClientRect();
            const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
            return hit !== null && el.contains(hit);
        }""", test_id))


def no_sideways_scroll(page: Page, width: int) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.fixture
def server() -> Iterator[str]:
    backend = ScriptedBackend([CALL, ANSWER, "A second conversation."])
    with running_server(scripted_app(backend)) as base:
        yield base


@pytest.fixture
def narrow(browser: Browser) -> Iterator[Page]:
    with open_page(browser, width=420, height=800) as opened:
        yield opened


def chat_once(page: Page, base: str) -> None:
    page.goto(base + "/")
    ask(page, "who is alex?")
    expect(page.get_by_test_id("done")).to_have_attribute("data-reason", "stop")


def test_a_narrow_window_shows_one_column_with_a_full_width_message_box(
        narrow: Page, server: str, tmp_path: Path) -> None:
    chat_once(narrow, server)
    expect(narrow.get_by_test_id("conversations")).to_be_hidden()
    expect(narrow.get_by_test_id("settings")).to_be_hidden()
    no_sideways_scroll(narrow, 420)
    header = [box(narrow, i) for i in ("conversations-toggle", "model", "status",
                                       "settings-toggle")]
    assert all(inside_width(b, 420) for b in header)
    assert not any(overlap(a, b) for i, a in enumerate(header) for b in header[i + 1:])
    transcript, composer, message = (box(narrow, i) for i in ("transcript", "composer",
                                                              "input"))
    assert inside_width(transcript, 420) and inside_width(composer, 420)
    assert message["width"] >= composer["width"] - 1  # the whole row is the message box
    buttons = [box(narrow, i) for i in ("send", "cancel", "regenerate")]
    assert all(b["y"] >= message["y"] + message["height"] - 0.5 for b in buttons)
    assert all(inside_width(b, 420) for b in buttons)
    assert not any(overlap(a, b) for i, a in enumerate(buttons) for b in buttons[i + 1:])
    tool_card = narrow.get_by_test_id("tool-call").bounding_box()
    assert tool_card is not None and inside_width(tool_card, 420)
    narrow.screenshot(path=str(tmp_path / "narrow.png"), full_page=True)
    assert (tmp_path / "narrow.png").stat().st_size > 5_000


def test_the_conversations_open_over_the_chat_and_close_when_one_is_chosen(
        narrow: Page, server: str) -> None:
    chat_once(narrow, server)
    narrow.get_by_test_id("conversations-toggle").click()
    expect(narrow.get_by_test_id("conversations")).to_be_visible()
    expect(narrow.get_by_test_id("conversations-toggle")).to_have_attribute(
        "aria-expanded", "true")
    sidebar = box(narrow, "reset")
    assert inside_width(sidebar, 420) and on_top(narrow, "reset")
    assert on_top(narrow, "conversation")  # above the chat, not beside it
    assert overlap(box(narrow, "conversations"), box(narrow, "transcript"))
    narrow.get_by_test_id("reset").click()  # a new conversation: the overlay goes away
    expect(narrow.get_by_test_id("conversations")).to_be_hidden()
    ask(narrow, "again")
    expect(narrow.get_by_test_id("done")).to_have_count(1)
    narrow.get_by_test_id("conversations-toggle").click()
    expect(narrow.get_by_test_id("conversation")).to_have_count(2)
    narrow.get_by_test_id("conversation").last.locator(".open").click()
    expect(narrow.get_by_test_id("conversations")).to_be_hidden()
    expect(narrow.get_by_test_id("assistant-text").last).to_have_text(ANSWER)


def test_the_settings_open_over_the_chat_and_close_with_escape_or_the_scrim(
        narrow: Page, server: str, tmp_path: Path) -> None:
    chat_once(narrow, server)
    narrow.get_by_test_id("settings-toggle").click()
    settings = narrow.get_by_test_id("settings")
    expect(settings).to_be_visible()
    placed = box(narrow, "settings")
    assert inside_width(placed, 420) and placed["width"] <= 420
    assert on_top(narrow, "system-prompt") and on_top(narrow, "read-only")
    narrow.screenshot(path=str(tmp_path / "narrow-settings.png"))
    narrow.keyboard.press("Escape")
    expect(settings).to_be_hidden()
    narrow.get_by_test_id("conversations-toggle").click()
    narrow.get_by_test_id("settings-toggle").dispatch_event("click")  # one overlay at a time
    expect(settings).to_be_visible()
    expect(narrow.get_by_test_id("conversations")).to_be_hidden()
    narrow.mouse.click(10, 400)  # the scrim, left of the settings
    expect(settings).to_be_hidden()
    assert on_top(narrow, "input")


def test_at_800_px_the_columns_stand_side_by_side_without_overlapping(
        browser: Browser, server: str, tmp_path: Path) -> None:
    with open_page(browser, width=800, height=720) as page:
        chat_once(page, server)
        expect(page.get_by_test_id("conversations-toggle")).to_be_hidden()
        page.get_by_test_id("settings-toggle").click()
        expect(page.get_by_test_id("settings")).to_be_visible()
        no_sideways_scroll(page, 800)
        regions: dict[str, Any] = {i: box(page, i) for i in ("conversations", "transcript",
                                                              "composer", "settings")}
        names = list(regions)
        assert not any(overlap(regions[a], regions[b])
                       for i, a in enumerate(names) for b in names[i + 1:]), regions
        assert regions["conversations"]["x"] + regions["conversations"]["width"] \
            <= regions["transcript"]["x"] + 0.5
        for control in ("input", "send", "cancel", "regenerate"):
            placed = box(page, control)
            assert not overlap(placed, regions["settings"]), control
            assert not overlap(placed, regions["conversations"]), control
        assert all(on_top(page, i) for i in ("input", "send", "reset", "system-prompt"))
        page.screenshot(path=str(tmp_path / "medium.png"))
