"""Fixtures shared by the app tests: a real OpenAI-wire server on 127.0.0.1 and a
workspace for the command line's tests; one headless Chromium and a fresh page per
test for the dashboard's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS, open_page
from tests.support.openai_wire_server import WireServer
from tests.support.tiers import needs

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
