"""``toolwire chat --provider completions`` and ``toolwire serve`` with the same options,
through the real entry point, against a loopback stand-in engine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import CliRun, run_cli
from tests.support.completions_wire_server import (
    EngineStandIn,
    completion_chunks,
    models_listing,
)
from tests.support.openai_wire_server import Stream
from tests.support.paths import MISSING_TEMPLATES, SHARED_TEMPLATES
from toolwire import PluginManager
from toolwire.apps.cli.main import _parser
from toolwire.apps.cli.serve import make_chat_factory
from toolwire.plugins.completions.backend import CompletionsBackend

QWEN = SHARED_TEMPLATES / "Qwen3.5-4B.jinja"
CALL = ("<tool_call>\n<function=search_text>\n<parameter=pattern>\nalex\n</parameter>\n"
        "</function>\n</tool_call>")


def chat(*args: str, cwd: Path) -> CliRun:
    return run_cli("chat", *args, cwd=cwd)


@pytest.fixture
def engine() -> Iterator[EngineStandIn]:
    if not QWEN.is_file():
        pytest.skip(MISSING_TEMPLATES)
    with EngineStandIn({("GET", "/v1/models"): (200, models_listing("vllm", "qwen", 8192)),
                        ("POST", "/tokenize"): (200, {"count": 100})}) as server:
        yield server


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.md").write_text("alex: maintains the parsers\n")
    return root


def test_one_message_runs_a_workspace_tool_through_the_engine_and_exits_0(
        engine: EngineStandIn, workspace: Path) -> None:
    engine.enqueue(Stream(completion_chunks([CALL[:25], CALL[25:]])),
                   Stream(completion_chunks(["Alex maintains the parsers."])))
    run = chat("--provider", "completions", "--base-url", engine.root, "--template", str(QWEN),
               "--workspace", str(workspace), "--json", "--message", "who is alex?",
               cwd=workspace)
    assert run.returncode == 0, run.stderr
    events = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["content"] == "notes.md:1: alex: maintains the parsers"
    assert events[-1]["type"] == "done" and events[-1]["reason"] == "stop"
    first, second = (r.body for r in engine.requests)
    assert first["model"] == "qwen" and "search_text" in first["prompt"]
    assert "<tool_response>\nnotes.md:1: alex: maintains the parsers" in second["prompt"]


@pytest.mark.parametrize(("args", "said"), [
    (["--provider", "completions", "--template", "t.jinja"], "needs --base-url"),
    (["--model", "m.gguf", "--template", "t.jinja"], "options of --provider completions"),
    (["--provider", "custom", "--model", "m", "--model-file", "x.gguf"],
     "options of --provider completions"),
])
def test_completions_options_out_of_place_are_usage_errors(tmp_path: Path, args: list[str],
                                                           said: str) -> None:
    run = chat(*args, "--message", "x", cwd=tmp_path)
    assert run.returncode == 2 and said in run.stderr and "Traceback" not in run.stderr


def test_an_engine_without_a_template_is_a_clear_error(engine: EngineStandIn,
                                                       tmp_path: Path) -> None:
    run = chat("--provider", "completions", "--base-url", engine.root, "--message", "x",
               cwd=tmp_path)
    assert run.returncode == 2  # an input error: the user must name the template
    assert "--template PATH" in run.stderr and "Traceback" not in run.stderr


def test_serve_fronts_the_engine_with_the_same_options(engine: EngineStandIn,
                                                       workspace: Path) -> None:
    args = _parser()[0].parse_args(["serve", "--provider", "completions", "--base-url",
                                 f"{engine.root}/v1", "--template", str(QWEN), "--api",
                                 "completions", "--n-ctx", "2048", "--workspace",
                                 str(workspace)])
    make_chat, label = make_chat_factory(args, PluginManager(entry_points=False))
    assert label == f"completions: {engine.root}/v1"
    chat_session = make_chat((), None)
    backend = chat_session.backend
    assert isinstance(backend, CompletionsBackend)
    assert (backend.api, backend.n_ctx, backend.engine.kind) == ("completions", 2048, "vllm")
