"""Fixtures shared by the app tests: a real OpenAI-wire server on 127.0.0.1 and a
workspace for the command line's tests; one headless Chromium and a fresh page per
test for the dashboard's; the real app on a model that replies as a test says (the
Responses and Messages APIs' tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.apps.test_server import running_server
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, open_page
from tests.support.openai_wire_server import WireServer
from tests.support.tiers import needs
from toolwire.apps.server.app import create_app
from toolwire.testing import ScriptedBackend
from toolwire.vocabulary.backend import ModelRequest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


@pytest.fixture(scope="module")
@needs("browser")
def browser() -> Iterator[Browser]:
    """Debian's Chromium, headless, for one test module."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A page 1000x720 in a fresh context; the test fails on a script error."""
    with open_page(browser) as opened:
        yield opened


@pytest.fixture
def server() -> Iterator[WireServer]:
    """A scripted OpenAI-wire server on 127.0.0.1 (a test's own ``server`` overrides it)."""
    with WireServer() as wire:
        yield wire


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace folder holding one note (a test's own ``workspace`` overrides it)."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.md").write_text("alex: maintains the parsers\n")
    return root


@pytest.fixture
def replying_server() -> Iterator[tuple[str, ScriptedBackend, list[Any]]]:
    """The real app on 127.0.0.1 whose model (``qwen_xml`` markup, parsed for real)
    gives, turn by turn, the replies a test appends (a text, or a function of the turn's
    request); yields (base URL, the backend, the replies)."""
    replies: list[Any] = []

    def next_reply(request: ModelRequest) -> str:
        reply = replies.pop(0)
        return str(reply(request) if callable(reply) else reply)

    backend = ScriptedBackend([next_reply] * 40)
    with running_server(create_app(lambda h, s: None, backend=backend, model="m")) as base:
        yield base, backend, replies
