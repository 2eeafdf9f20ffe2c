"""Headless Chromium for the dashboard tests: where it is, how it is launched, a page.

Debian's Chromium at /usr/bin/chromium (``scripts/ensure_chromium`` installs it; CI runs
that) driven by Playwright for Python (the ``test`` extra); never ``playwright install``.
A page opened here fails its test on any script error or CSP violation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "TIMEOUT_MS", "ask", "open_page",
           "skip_without_chromium"]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 15_000


def skip_without_chromium() -> None:
    """Skip the calling test module when Chromium is not installed."""
    if not CHROMIUM.exists():
        pytest.skip(f"no Chromium at {CHROMIUM}: run scripts/ensure_chromium to install "
                    "Debian's chromium package", allow_module_level=True)


@contextmanager
def open_page(browser: Browser, width: int = 1000, height: int = 720) -> Iterator[Page]:
    """A page in a fresh context (its own storage); no script errors allowed on it."""
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(TIMEOUT_MS)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    try:
        yield opened
    finally:
        context.close()
    assert errors == [], errors  # no script errors, no CSP violations


def ask(page: Page, text: str) -> None:
    """Type a message into the dashboard and send it with Enter."""
    page.get_by_test_id("input").fill(text)
    page.get_by_test_id("input").press("Enter")
