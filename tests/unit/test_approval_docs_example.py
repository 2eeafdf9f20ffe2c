"""docs/examples/approve_writes.py, the example docs/events.md shows, runs as written."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.paths import DOCS
from toolwire.testing import ScriptedBackend

WRITE = ("<tool_call>\n<function=write_file>\n<parameter=path>\nnote.md\n</parameter>\n"
         "<parameter=content>\nhello\n</parameter>\n</function>\n</tool_call>")


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("approve_writes_example",
                                                  DOCS / "examples" / "approve_writes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def answering(monkeypatch: pytest.MonkeyPatch, *answers: str) -> list[str]:
    asked: list[str] = []
    replies = list(answers)

    def fake_input(prompt: str = "") -> str:
        asked.append(prompt)
        return replies.pop(0)

    monkeypatch.setattr("builtins.input", fake_input)
    return asked


def test_a_no_leaves_the_workspace_untouched_and_the_model_is_told(
        example: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    asked = answering(monkeypatch, "n")
    backend = ScriptedBackend([WRITE, "I was not allowed to write it."])
    answer = example.chat_with_approval(backend, tmp_path, "write a note", tmp_path / "c.json")
    assert answer == "I was not allowed to write it."
    assert asked == ['run write_file {"path": "note.md", "content": "hello"}? [y/N/a] ']
    assert not (tmp_path / "note.md").exists()
    stored = json.loads((tmp_path / "c.json").read_text())
    tool_record = next(r for r in stored if r["role"] == "tool")
    assert tool_record["is_error"] and "did not allow" in tool_record["content"]


def test_a_yes_writes_and_the_stored_conversation_resumes(
        example: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    answering(monkeypatch, "y")
    saved = tmp_path / "c.json"
    backend = ScriptedBackend([WRITE, "Written."])
    example.chat_with_approval(backend, tmp_path, "write a note", saved)
    assert (tmp_path / "note.md").read_text() == "hello"
    seen: list[Any] = []

    def reply(request: Any) -> str:
        seen.extend(request.messages)
        return "You asked me to write a note."

    again = ScriptedBackend([reply])
    assert example.resume(again, saved, "what did I ask?") == "You asked me to write a note."
    assert [m.role for m in seen] == ["user", "assistant", "tool", "assistant", "user"]
    assert seen[1].tool_calls[0].name == "write_file"
