"""The agent CLIs the end-to-end tests drive: OpenAI's Codex CLI and Anthropic's Claude Code.

``scripts/ensure_agent_clients`` installs them from npm into ``.agent-clients/`` in
the checkout (``TOOLWIRE_AGENT_CLIENTS`` moves it); CI runs it before the tests.
:func:`agent_client` is the one way a test finds them: when they are not there it
runs the script once, and when the install failed it **fails** the test with the
script's reason (never a skip: a missing client would hide a broken API).

:func:`offline_environment` is the environment both run in: a home of their own
in the test's folder, and every update check, telemetry and error report they
document turned off, so they talk to nothing but the server on 127.0.0.1.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path
from typing import Final

import pytest

from .paths import REPO

__all__ = ["CLIENTS", "agent_client", "offline_environment"]

CLIENTS: Final = Path(os.environ.get("TOOLWIRE_AGENT_CLIENTS", "").strip()
                      or REPO / ".agent-clients")
_SCRIPT: Final = REPO / "scripts" / "ensure_agent_clients"
_QUIET: Final = {
    # Claude Code's documented switches: no telemetry, error reports, update checks or
    # other traffic the turn does not need
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_BUG_COMMAND": "1",
    # npm's own update notice, and colour codes in the transcripts
    "NO_UPDATE_NOTIFIER": "1", "NO_COLOR": "1",
}
CODEX_QUIET: Final = ("-c", "check_for_update_on_startup=false", "-c", "analytics.enabled=false",
                      "-c", "feedback.enabled=false")
"""Codex CLI's documented switches for its update check, analytics and feedback."""


@functools.cache
def _install_failure() -> str | None:
    """Install the clients if they are not there; the reason the install failed, if it did."""
    if not all((CLIENTS / "node_modules" / ".bin" / name).exists() for name in ("codex", "claude")):
        try:
            run = subprocess.run(["bash", str(_SCRIPT)], capture_output=True, text=True,
                                 timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"scripts/ensure_agent_clients did not finish: {exc}"
        if run.returncode != 0:
            return (run.stderr.strip() or run.stdout.strip()).splitlines()[-1] \
                if (run.stderr.strip() or run.stdout.strip()) else "it failed"
    failed = CLIENTS / "FAILED"
    if failed.exists():
        return failed.read_text(encoding="utf-8").strip()
    return None


def agent_client(name: str) -> Path:
    """The installed ``codex`` or ``claude`` command; fails the test (with the install's
    reason) when it cannot be had."""
    failure = _install_failure()
    if failure:
        pytest.fail(f"the agent clients are not installed: {failure} "
                    "(scripts/ensure_agent_clients installs them from npm)", pytrace=False)
    path = CLIENTS / "node_modules" / ".bin" / name
    if not path.exists():
        pytest.fail(f"{path} is missing after scripts/ensure_agent_clients", pytrace=False)
    return path


def offline_environment(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a client run: its own home under ``home``, telemetry and
    update checks off, and ``extra``."""
    home.mkdir(parents=True, exist_ok=True)
    keep = {k: v for k, v in os.environ.items()
            if k in ("PATH", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")}
    return {**keep, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"), **_QUIET, **extra}
