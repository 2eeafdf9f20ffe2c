"""Codex CLI and Claude Code, as their users run them, on ``toolwire serve`` (issue 38, item 5).

The real programs from npm (``scripts/ensure_agent_clients``, found through
:func:`tests.support.agent_clients.agent_client`, which fails the test with the
reason when they cannot be installed) are pointed at the real app on 127.0.0.1:
Codex CLI with ``codex exec --oss --local-provider lmstudio`` and
``CODEX_OSS_BASE_URL``, Claude Code with ``claude -p`` and ``ANTHROPIC_BASE_URL``,
both with their telemetry and update checks off. The model is a scripted backend
behind the real ``qwen_xml`` parser that calls a tool the client offers (Codex's
``exec_command``, Claude Code's ``Read``) to read a file, then answers with what
the tool returned: each test checks that the call was parsed and run by the
client, that its result came back to the model, and that the client printed the
answer, in the transcript and in the requests the server saw.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.apps.test_server import running_server
from tests.support.agent_clients import CODEX_QUIET, agent_client, offline_environment
from toolwire.apps.server.app import create_app
from toolwire.apps.server.responses import Receive, Scope, Send
from toolwire.testing import ScriptedBackend
from toolwire.vocabulary.backend import ModelRequest

MODEL = "qwen3-local"
SECRET = "The secret word is pelican."
KEY = "sk-toolwire-local"


class Recorder:
    """An ASGI wrapper that keeps each request's method, path and headers."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[tuple[str, str, dict[str, str]]] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            self.seen.append((scope["method"], scope["path"], headers))
        await self.app(scope, receive, send)


def agent_model(call: str) -> ScriptedBackend:
    """A model that reads the file with the tool ``call`` writes, then answers with the
    tool's result (and says ``ok`` to a request without tools: a client's warm-up)."""

    def reply(request: ModelRequest) -> str:
        last = request.messages[-1] if request.messages else None
        if last is not None and last.role == "tool":
            return f"The file reads: {last.content.strip()}"
        return call if request.tools else "ok"

    return ScriptedBackend([reply] * 30)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "notes.txt").write_text(SECRET + "\n", encoding="utf-8")
    return folder


def serve(backend: ScriptedBackend, **options: Any) -> Iterator[tuple[str, Recorder]]:
    recorder = Recorder(create_app(lambda h, s: None, backend=backend, model=MODEL, **options))
    with running_server(recorder) as base:  # type: ignore[arg-type]
        yield base, recorder


def model_turns(backend: ScriptedBackend) -> list[ModelRequest]:
    """The turns that offered tools (a client's warm-up offers none)."""
    return [r for r in backend.requests if r.tools]


@pytest.mark.process
def test_codex_cli_runs_a_parsed_call_and_prints_the_answer(workdir: Path,
                                                            tmp_path: Path) -> None:
    codex = agent_client("codex")
    backend = agent_model("<tool_call>\n<function=exec_command>\n<parameter=cmd>\ncat notes.txt\n"
                          "</parameter>\n</function>\n</tool_call>")
    for base, recorder in serve(backend):
        env = offline_environment(tmp_path / "home", CODEX_HOME=str(tmp_path / "codex"),
                                  CODEX_OSS_BASE_URL=base + "/v1")
        (tmp_path / "codex").mkdir()
        run = subprocess.run(
            [str(codex), "exec", "--oss", "--local-provider", "lmstudio", "-m", MODEL,
             *CODEX_QUIET, "--skip-git-repo-check", "-C", str(workdir),
             "What does notes.txt say?"],
            capture_output=True, text=True, env=env, timeout=180, stdin=subprocess.DEVNULL)
        assert run.returncode == 0, run.stderr[-3000:]
        paths = [(method, path) for method, path, _ in recorder.seen]
    turns = model_turns(backend)
    assert len(turns) == 2, [m.role for t in turns for m in t.messages]
    offered = {tool.name for tool in turns[0].tools}
    assert "exec_command" in offered
    first_call = turns[1].messages[-2].tool_calls[0]
    assert first_call.name == "exec_command" and dict(first_call.arguments) == {
        "cmd": "cat notes.txt"}
    assert turns[1].messages[-1].role == "tool" and SECRET in turns[1].messages[-1].content
    assert ("POST", "/v1/responses") in paths and ("GET", "/v1/models") in paths
    assert "The file reads:" in run.stdout and SECRET in run.stdout
    assert "exec" in run.stderr and "cat notes.txt" in run.stderr  # Codex shows the command


@pytest.mark.process
def test_claude_code_runs_a_parsed_call_and_prints_the_answer(workdir: Path,
                                                              tmp_path: Path) -> None:
    claude = agent_client("claude")
    notes = workdir / "notes.txt"
    backend = agent_model(f"<tool_call>\n<function=Read>\n<parameter=file_path>\n{notes}\n"
                          "</parameter>\n</function>\n</tool_call>")
    for base, recorder in serve(backend, api_key=KEY):
        env = offline_environment(
            tmp_path / "home", ANTHROPIC_BASE_URL=base, ANTHROPIC_API_KEY=KEY,
            CLAUDE_CONFIG_DIR=str(tmp_path / "claude"), ANTHROPIC_MODEL=MODEL,
            ANTHROPIC_SMALL_FAST_MODEL=MODEL, ANTHROPIC_DEFAULT_HAIKU_MODEL=MODEL,
            ANTHROPIC_DEFAULT_SONNET_MODEL=MODEL, ANTHROPIC_DEFAULT_OPUS_MODEL=MODEL)
        run = subprocess.run(
            [str(claude), "-p", "--model", MODEL, "--allowedTools", "Read", "--",
             "What does notes.txt say?"],
            capture_output=True, text=True, env=env, timeout=180, cwd=workdir,
            stdin=subprocess.DEVNULL)
        assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
        seen = list(recorder.seen)
    turns = model_turns(backend)
    assert len(turns) == 2, [m.role for t in turns for m in t.messages]
    assert "Read" in {tool.name for tool in turns[0].tools}
    assert turns[0].messages[0].role == "system"  # system blocks and system messages, folded
    call = turns[1].messages[-2].tool_calls[0]
    assert call.name == "Read" and dict(call.arguments) == {"file_path": str(notes)}
    result = turns[1].messages[-1]
    assert result.role == "tool" and SECRET in result.content and not result.is_error
    posts = [(path, headers) for method, path, headers in seen if method == "POST"]
    assert posts and all(path == "/v1/messages" for path, _ in posts)
    assert all(headers.get("x-api-key") == KEY and "anthropic-version" in headers
               for _, headers in posts)
    assert "The file reads:" in run.stdout and SECRET in run.stdout


def test_a_failed_install_fails_the_test_with_the_installs_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support import agent_clients

    bin_dir = tmp_path / "node_modules" / ".bin"
    bin_dir.mkdir(parents=True)
    for name in ("codex", "claude"):
        (bin_dir / name).write_text("")
    (tmp_path / "FAILED").write_text("npm install failed: 404 Not Found\n")
    monkeypatch.setattr(agent_clients, "CLIENTS", tmp_path)
    agent_clients._install_failure.cache_clear()
    try:
        with pytest.raises(pytest.fail.Exception, match="404 Not Found"):
            agent_client("codex")
    finally:
        agent_clients._install_failure.cache_clear()
