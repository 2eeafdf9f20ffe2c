"""``toolwire chat --tool-choice`` through its real entry point: passed to a real
OpenAI-wire server on 127.0.0.1 as it is, enforced on the tiny local model by the
grammar (real llama.cpp, the real Qwen 3.5 template), bad values refused up front."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import CliRun, run_cli
from tests.support.openai_wire_server import Stream, WireServer, reply_chunks
from tests.support.templates import shared_template


def chat(*args: str, cwd: Path | None = None) -> CliRun:
    return run_cli("chat", *args, cwd=cwd)


def events_of(run: CliRun) -> list[dict[str, object]]:
    return [json.loads(line) for line in run.stdout.splitlines() if line.strip()]


def remote(server: WireServer, workspace: Path, *extra: str) -> list[str]:
    return ["--provider", "custom", "--base-url", server.url, "--model", "m",
            "--workspace", str(workspace), "--json", "--message", "who is alex?", *extra]


def test_a_named_tool_choice_reaches_the_provider_on_the_first_turn_only(
        server: WireServer, workspace: Path) -> None:
    server.enqueue(Stream(reply_chunks("", [("c1", "search_text", {"pattern": "alex"})])),
                   Stream(reply_chunks("Alex maintains the parsers.")))
    run = chat(*remote(server, workspace, "--tool-choice", "Search_Text"))
    assert run.returncode == 0, run.stderr
    first, second = (r.body for r in server.requests)
    assert first["tool_choice"] == {"type": "function", "function": {"name": "search_text"}}
    # the turn after the tool results is "auto" (the default, not sent), so the model can answer
    assert "tool_choice" not in second and "tools" in second


def test_tool_choice_required_and_none_are_passed_as_they_are(server: WireServer,
                                                                workspace: Path) -> None:
    for choice in ("required", "none"):
        server.enqueue(Stream(reply_chunks("Fine.")))
        run = chat(*remote(server, workspace, "--tool-choice", choice))
        assert run.returncode == 0, run.stderr
        assert server.requests[-1].body["tool_choice"] == choice


def test_the_default_tool_choice_sends_nothing(server: WireServer, workspace: Path) -> None:
    server.enqueue(Stream(reply_chunks("Fine.")))
    run = chat(*remote(server, workspace))
    assert run.returncode == 0, run.stderr
    body = server.requests[0].body
    assert "tools" in body and "tool_choice" not in body and "parallel_tool_calls" not in body


@pytest.mark.parametrize(("extra", "message"), [
    (("--tool-choice", "search_txt"), "(did you mean 'search_text'?)"),
    (("--tool-choice", "write_file", "--read-only"),
     "write_file changes things, and --read-only offers only tools that do not"),
    (("--tool-choice", "required", "--no-tools"), "the chat offers no tools"),
])
def test_a_tool_choice_the_chat_cannot_honour_is_a_usage_error(
        server: WireServer, workspace: Path, extra: tuple[str, ...], message: str) -> None:
    run = chat(*remote(server, workspace, *extra))
    assert run.returncode == 2
    assert message in run.stderr and "Traceback" not in run.stderr
    assert server.requests == []  # refused before anything is sent


@pytest.fixture(scope="module")
def qwen_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("llama_cpp")
    from toolwire.testing import write_tiny_gguf

    source = shared_template("Qwen3.5-4B.jinja")
    return write_tiny_gguf(tmp_path_factory.mktemp("tool-choice") / "qwen.gguf", source,
                           sample_bytes=False)


def local(model: Path, workspace: Path, choice: str, seed: int) -> list[dict[str, object]]:
    run = chat("--model", str(model), "--workspace", str(workspace), "--read-only",
               "--tool-choice", choice, "--json", "--message", "hi", "--max-tokens", "400",
               "--max-tool-iters", "2", "--seed", str(seed), "--threads", "1")
    assert "Traceback" not in run.stderr, run.stderr
    return events_of(run)


@pytest.mark.model
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_named_tool_choice_makes_the_tiny_local_model_call_that_tool(
        qwen_model: Path, workspace: Path, seed: int) -> None:
    events = local(qwen_model, workspace, "list_dir", seed)
    ends = [i for i, e in enumerate(events) if e["type"] in ("tool_result", "done")]
    first_turn = events[:ends[0]] if ends else events
    # a diagnostic may note what the parser made of the noise (a call written twice)
    calls = [e for e in first_turn if e["type"] != "diagnostic"]
    assert calls and all(e["type"] in ("tool_call_start", "tool_call") for e in calls), first_turn
    assert {e["name"] for e in calls} == {"list_dir"}
    results = [e for e in events if e["type"] == "tool_result"]
    assert results and not any(r["is_error"] for r in results), events


@pytest.mark.model
@pytest.mark.parametrize("seed", [1, 2])
def test_tool_choice_required_makes_the_tiny_local_model_open_a_call_first(
        qwen_model: Path, workspace: Path, seed: int) -> None:
    events = local(qwen_model, workspace, "required", seed)
    assert events[0]["type"] == "tool_call_start"
    assert events[0]["name"] in {"list_dir", "read_file", "search_text"}
